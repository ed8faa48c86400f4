//! The outputs of the commands that write files: opened buffered (`-`: standard output),
//! written with errors naming the file, and the closing line saying what was written.

use crate::input::Progress;
use anyhow::{Context, Result};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use tensor_lifetime_report::size::format_bytes;

/// Opens the output (`-`: standard output) buffered.
pub(crate) fn create(path: &Path) -> Result<Box<dyn Write>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufWriter::new(io::stdout().lock())));
    }
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(Box::new(BufWriter::with_capacity(256 * 1024, file)))
}

/// Writes `bytes` to the output (`-`: standard output) and flushes it.
pub(crate) fn write_output(output: &Path, bytes: &[u8]) -> Result<()> {
    let mut out = create(output)?;
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .with_context(|| format!("cannot write {}", output.display()))
}

/// Ends the progress bar and says what was written, and its size.
pub(crate) fn wrote(progress: &Progress, output: &Path, what: String) {
    progress.finish();
    if output.as_os_str() != "-" {
        let size = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "tensor-lifetime: wrote {} ({}) {what}",
            output.display(),
            format_bytes(size)
        );
    }
}
