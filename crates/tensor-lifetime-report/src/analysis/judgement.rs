//! The knobs of the judgement (see the rules in [`super`]).

/// The knobs of the judgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judgement {
    /// Iterations at the start of each loop frame whose growth is not counted.
    pub warmup: u64,
    /// Growth events needed (and the recency window, at least) for a leak.
    pub k: u64,
    /// A survivor whose storage is at least this many times its own size is a view
    /// retention.
    pub view_ratio: u64,
}

impl Default for Judgement {
    fn default() -> Self {
        Judgement {
            warmup: 1,
            k: 3,
            view_ratio: 2,
        }
    }
}
