//! The CUDA calls of [`super`] in a build without the `cuda` feature: the same
//! signatures, each a clear error ([`Error::CudaNotEnabled`]). A context cannot exist, so
//! the calls on one are unreachable.

use super::PoolInfo;
use crate::error::{Error, Result};
use candle_core::Device;

/// No context can be made without the `cuda` feature.
#[derive(Debug)]
pub(crate) enum Context {}

pub(crate) fn context_of(_: &Device) -> Result<Context> {
    Err(Error::CudaNotEnabled)
}

pub(crate) fn context_for_ordinal(_: usize) -> Result<Context> {
    Err(Error::CudaNotEnabled)
}

pub(crate) fn query(ctx: &Context) -> Result<PoolInfo> {
    match *ctx {}
}

pub(crate) fn reset_high(ctx: &Context) -> Result<()> {
    match *ctx {}
}

pub(crate) fn synchronize(ctx: &Context) -> Result<()> {
    match *ctx {}
}

pub(crate) fn trim(ctx: &Context, _: usize) -> Result<()> {
    match *ctx {}
}

pub(crate) fn set_release_threshold(ctx: &Context, _: u64) -> Result<()> {
    match *ctx {}
}
