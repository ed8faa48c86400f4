//! A tensor's own size from its shape and dtype, as a birth in the event log gives them.

/// A tensor's own bytes, its elements times their size, from a birth's shape and dtype
/// (candle's element sizes; its sub-byte types count 0, as candle counts them). `None`
/// without a shape or for a dtype not known here: the birth's storage bytes are used then.
pub fn own_bytes(shape: Option<&[usize]>, dtype: &str) -> Option<u64> {
    own_bytes_sized(shape, dtype_size(dtype)?)
}

/// The size of an element of `dtype` in bytes, if the dtype is known here.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "u8" | "f8e4m3" | "f8e8m0" => 1,
        "i16" | "bf16" | "f16" => 2,
        "u32" | "i32" | "f32" => 4,
        "i64" | "f64" => 8,
        "f6e2m3" | "f6e3m2" | "f4" => 0,
        _ => return None,
    })
}

/// [`own_bytes`] of a dtype whose element `size` is known ([`dtype_size`]).
#[inline]
pub fn own_bytes_sized(shape: Option<&[usize]>, size: u64) -> Option<u64> {
    // Saturating: a corrupt or hand-made log may hold any shape (tests/hostile_logs.rs).
    let elements = shape?
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
        .unwrap_or(u64::MAX);
    Some(elements.saturating_mul(size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_bytes_follow_candle_element_sizes() {
        assert_eq!(own_bytes(Some(&[2, 3]), "f32"), Some(24));
        assert_eq!(own_bytes(Some(&[2, 3]), "bf16"), Some(12));
        assert_eq!(own_bytes(Some(&[5]), "i64"), Some(40));
        assert_eq!(own_bytes(Some(&[]), "u8"), Some(1), "a scalar");
        assert_eq!(
            own_bytes(Some(&[8]), "f4"),
            Some(0),
            "candle counts sub-byte types 0"
        );
        assert_eq!(own_bytes(None, "f32"), None);
        assert_eq!(own_bytes(Some(&[2]), "complex"), None);
        assert_eq!(
            own_bytes(Some(&[usize::MAX, 4]), "f32"),
            Some(u64::MAX),
            "saturates"
        );
    }
}
