//! Shared helpers of the examples.
