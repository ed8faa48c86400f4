//! The library's error type.

use std::fmt;

/// What went wrong.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The tracker refused to start: candle's tensor layout is not the one this build was
    /// checked against (see the weak-handle module).
    TrackerUnavailable(String),
    /// Tracking is turned off (`TENSOR_LIFETIME=off`, or the `tracking` feature is off).
    TrackingDisabled,
    /// A CUDA device was given but this build has no `cuda` feature.
    CudaNotEnabled,
    /// A CUDA driver call failed.
    Cuda(String),
    /// A candle operation failed.
    Candle(candle_core::Error),
    /// A file could not be written (`path`: which one).
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::TrackerUnavailable(why) => {
                write!(f, "tensor-lifetime cannot track tensors: {why}")
            }
            Error::TrackingDisabled => f.write_str(
                "tensor-lifetime tracking is disabled (TENSOR_LIFETIME=off or the `tracking` feature is off)",
            ),
            Error::CudaNotEnabled => f.write_str(
                "a CUDA device was given but tensor-lifetime was built without its `cuda` feature",
            ),
            Error::Cuda(msg) => write!(f, "CUDA driver call failed: {msg}"),
            Error::Candle(e) => write!(f, "candle: {e}"),
            Error::Io { path, source } => write!(f, "cannot write {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Candle(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<candle_core::Error> for Error {
    fn from(e: candle_core::Error) -> Self {
        Error::Candle(e)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
