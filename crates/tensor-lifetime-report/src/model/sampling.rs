//! The sampled mode's law, written once for the tracker that samples and the tools that
//! read its log: a tensor of `s` own bytes is recorded with probability
//! `1 - exp(-s / interval)` and stands for the inverse of it (Go's heap profile and
//! jemalloc's sampler use the same law), so sums of weights are unbiased estimates.

/// The probability that the sampled mode at mean `interval` bytes records a tensor of
/// `bytes` own bytes (1 for an interval of 0: every tensor).
pub fn sample_probability(interval: u64, bytes: u64) -> f64 {
    if interval == 0 {
        return 1.0;
    }
    -(-(bytes as f64) / interval as f64).exp_m1()
}

/// What one recorded tensor of `bytes` own bytes stands for at `interval`: the inverse of
/// [`sample_probability`] (0 for a tensor of no bytes, which is never recorded).
pub fn sample_weight(interval: u64, bytes: u64) -> f64 {
    let p = sample_probability(interval, bytes);
    if p > 0.0 {
        1.0 / p
    } else {
        0.0
    }
}

/// A sum of weights (an estimate's count or bytes) as an integer: the nearest, by an add
/// and a truncation rather than a call (`as` saturates, so a corrupt log's sizes stay
/// finite, and makes NaN 0). Every estimate is rounded so.
#[inline]
pub fn estimate_count(x: f64) -> u64 {
    (x + 0.5) as u64
}

/// The weight of a `born` event's tensor in a log sampled at `interval` (`None`: exact,
/// 1): by its own bytes, its `shape` times the size of `dtype`, or the event's storage
/// `bytes` when those are unknown, as the sample chose it.
pub fn born_weight(interval: Option<u64>, shape: Option<&[usize]>, dtype: &str, bytes: u64) -> f64 {
    match interval {
        None => 1.0,
        Some(interval) => {
            let own = super::dtype::own_bytes(shape, dtype).unwrap_or(bytes);
            sample_weight(interval, own)
        }
    }
}

/// The sentence that says a run's figures are estimates from the sampled mode, one tensor
/// per `interval` bytes on average (unknown: `None`): every renderer says it in these
/// words.
pub fn estimate_sentence(interval: Option<u64>) -> String {
    let every = interval.map_or_else(
        || "a sample".to_string(),
        |i| format!("one per {} on average", crate::size::format_bytes(i)),
    );
    format!(
        "estimated: tensors sampled by size ({every}); counts and bytes are scaled by the inverse sampling probability"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_is_the_inverse_of_the_probability() {
        assert_eq!(sample_probability(0, 64), 1.0);
        assert_eq!(sample_weight(0, 64), 1.0);
        assert_eq!(sample_weight(1024, 0), 0.0);
        // One interval's worth of bytes: 1 - 1/e.
        let p = sample_probability(1024, 1024);
        assert!((p - (1.0 - (-1f64).exp())).abs() < 1e-12);
        assert!((sample_weight(1024, 1024) * p - 1.0).abs() < 1e-12);
        // Small tensors stand for about interval / bytes of them.
        assert!((sample_weight(512 * 1024, 64) - 8192.5).abs() < 0.01);
        // Large ones are nearly always recorded.
        assert!(sample_weight(1024, 64 * 1024) < 1.0 + 1e-12);
    }

    #[test]
    fn a_birth_weighs_by_its_own_bytes() {
        assert_eq!(born_weight(None, Some(&[16]), "f32", 64), 1.0);
        // A view of 16 f32 of a larger storage: its 64 own bytes, not the storage's.
        let view = born_weight(Some(4096), Some(&[16]), "f32", 1 << 20);
        assert_eq!(view, sample_weight(4096, 64));
        // No shape: the storage's bytes.
        assert_eq!(
            born_weight(Some(4096), None, "f32", 128),
            sample_weight(4096, 128)
        );
    }
}
