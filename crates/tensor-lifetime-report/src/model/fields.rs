//! Helpers of the serialized fields shared by the model's types.

/// `skip_serializing_if` of the counts that a log leaves out when zero.
pub(crate) fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// `skip_serializing_if` of the flags that a report leaves out when false.
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}
