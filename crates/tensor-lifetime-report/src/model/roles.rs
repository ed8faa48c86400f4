//! Where the memory goes: the role of every tracked tensor, the split of live bytes by
//! role at each iteration end, and the call path of a creation (the `#[track]`ed
//! functions on the stack).
//!
//! # Roles
//!
//! Every tracked tensor has one [`Role`], decided by the tracker when it first sees the
//! tensor, in this order (the first that applies):
//!
//! 1. `optimizer_state`, `gradient`, `input`: a hint of the place that saw it (set by
//!    `#[track]` or the API, see below);
//! 2. `parameter`: a candle `Var` (`Tensor::is_variable`);
//! 3. `activation`: a tensor with an autograd op (kept alive past its iteration only by a
//!    graph or a live result that uses it);
//! 4. `other`.
//!
//! The hints: `gradient` for the tensors of a `GradStore` (the value of `backward()` bound
//! in tracked code, `let grads = loss.backward()?`); `optimizer_state` for stores in the
//! methods of an `impl Optimizer for T` under `#[track]` (values that are the methods'
//! own arguments excepted: the parameters handed to `Optimizer::new`); `input` for a
//! loop's item (`for batch in ..`) and a binding whose value comes from a call whose name
//! says batch (`data.next_batch()`, `dataset.batch(i)`); any role through
//! `tensor_lifetime::mark_role`. A hint seen later, on a tensor whose role was `other` or
//! `activation`, replaces it (a batch made in a tracked `Dataset::batch` becomes an
//! `input` when the loop binds it); a parameter keeps its role.
//!
//! # The split
//!
//! At each iteration end the tracker counts the live tensors by role (each storage once,
//! for its owner) and, as `temporary`, the tensors born since the previous iteration end
//! and dead by this one (their storages' bytes summed: counted as if all alive at once,
//! the iteration's peak). [`RoleBytes`] carries both per role in the event log
//! (`iteration_end.roles`).
//!
//! The report's [`MemoryByRole`]: `now` is the split of the latest iteration end (the six
//! roles of the live tensors, and `temporary`); `peak` is that of the iteration end with
//! the highest *high water* (live bytes plus temporary bytes): there every tensor counts
//! under its own role, the temporaries included (a gradient or an activation that died
//! within the iteration was alive at its peak), and `temporary` says how much of that
//! was temporary (a part of the other roles, not added to them).

use super::fields::is_zero;
use crate::size::{format_bytes, group_digits};
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a tensor is for (see the module docs).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A candle `Var`: model weights.
    Parameter,
    /// A tensor of a `GradStore` (the value of `backward()`).
    Gradient,
    /// Kept by an optimizer (stores in an `impl Optimizer`, or marked).
    OptimizerState,
    /// A result with an autograd op (forward activations kept by a graph).
    Activation,
    /// A batch: a loop item or a dataset's result.
    Input,
    /// None of the above.
    #[default]
    Other,
    /// Born and dead within one iteration (only in splits, never a tensor's own role).
    Temporary,
}

impl Role {
    /// Every role, in the order reports list them.
    pub const ALL: [Role; 7] = [
        Role::Parameter,
        Role::Gradient,
        Role::OptimizerState,
        Role::Activation,
        Role::Input,
        Role::Other,
        Role::Temporary,
    ];

    /// The name used in JSON and text.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Parameter => "parameter",
            Role::Gradient => "gradient",
            Role::OptimizerState => "optimizer_state",
            Role::Activation => "activation",
            Role::Input => "input",
            Role::Other => "other",
            Role::Temporary => "temporary",
        }
    }

    /// Its place in [`Role::ALL`] (a small index for fixed arrays).
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The role at `index` of [`Role::ALL`] (`other` beyond it).
    #[inline]
    pub fn from_index(index: usize) -> Role {
        Role::ALL.get(index).copied().unwrap_or(Role::Other)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One role's part of an iteration end (`iteration_end.roles` in the event log): its
/// live tensors and bytes, and its tensors born and dead within the iteration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleBytes {
    pub role: Role,
    pub bytes: u64,
    pub tensors: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub temporary_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub temporary_tensors: u64,
}

/// Bytes and tensors of one role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleAmount {
    pub bytes: u64,
    pub tensors: u64,
}

impl RoleAmount {
    fn add(&mut self, bytes: u64, tensors: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.tensors = self.tensors.saturating_add(tensors);
    }
}

/// Bytes and tensors of every role at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleSplit {
    #[serde(default)]
    pub parameter: RoleAmount,
    #[serde(default)]
    pub gradient: RoleAmount,
    #[serde(default)]
    pub optimizer_state: RoleAmount,
    #[serde(default)]
    pub activation: RoleAmount,
    #[serde(default)]
    pub input: RoleAmount,
    #[serde(default)]
    pub other: RoleAmount,
    #[serde(default)]
    pub temporary: RoleAmount,
}

impl RoleSplit {
    /// The amount of `role`.
    pub fn get(&self, role: Role) -> RoleAmount {
        match role {
            Role::Parameter => self.parameter,
            Role::Gradient => self.gradient,
            Role::OptimizerState => self.optimizer_state,
            Role::Activation => self.activation,
            Role::Input => self.input,
            Role::Other => self.other,
            Role::Temporary => self.temporary,
        }
    }

    fn get_mut(&mut self, role: Role) -> &mut RoleAmount {
        match role {
            Role::Parameter => &mut self.parameter,
            Role::Gradient => &mut self.gradient,
            Role::OptimizerState => &mut self.optimizer_state,
            Role::Activation => &mut self.activation,
            Role::Input => &mut self.input,
            Role::Other => &mut self.other,
            Role::Temporary => &mut self.temporary,
        }
    }

    /// Adds `bytes` and `tensors` to `role`.
    pub fn add(&mut self, role: Role, bytes: u64, tensors: u64) {
        self.get_mut(role).add(bytes, tensors);
    }

    /// The split at an iteration end: live tensors by role, and `temporary`.
    pub fn at_end(roles: &[RoleBytes]) -> RoleSplit {
        let mut split = RoleSplit::default();
        for r in roles {
            if r.role != Role::Temporary {
                split.add(r.role, r.bytes, r.tensors);
            }
            split.add(Role::Temporary, r.temporary_bytes, r.temporary_tensors);
        }
        split
    }

    /// The split at an iteration's high water: every tensor under its own role, the
    /// temporaries included, and `temporary` the part of it that was temporary.
    pub fn at_high_water(roles: &[RoleBytes]) -> RoleSplit {
        let mut split = RoleSplit::default();
        for r in roles {
            if r.role != Role::Temporary {
                split.add(
                    r.role,
                    r.bytes.saturating_add(r.temporary_bytes),
                    r.tensors.saturating_add(r.temporary_tensors),
                );
            }
            split.add(Role::Temporary, r.temporary_bytes, r.temporary_tensors);
        }
        split
    }

    /// Bytes of the six roles (not `temporary`).
    pub fn role_bytes(&self) -> u64 {
        Role::ALL[..6]
            .iter()
            .fold(0u64, |a, r| a.saturating_add(self.get(*r).bytes))
    }

    /// Whether every amount is zero.
    pub fn is_empty(&self) -> bool {
        Role::ALL
            .iter()
            .all(|r| self.get(*r) == RoleAmount::default())
    }
}

impl fmt::Display for RoleSplit {
    /// `parameter 1.2 MiB (4), activation 3 KiB (7)`: the roles that have tensors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for role in Role::ALL {
            let a = self.get(role);
            if a.tensors == 0 && a.bytes == 0 {
                continue;
            }
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(
                f,
                "{role} {} ({})",
                format_bytes(a.bytes),
                group_digits(a.tensors)
            )?;
        }
        if first {
            f.write_str("nothing")?;
        }
        Ok(())
    }
}

/// The report's split of memory by role (see the module docs): now and at the peak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryByRole {
    /// At the latest iteration end.
    pub now: RoleSplit,
    /// At the iteration end of the highest high water (live plus temporary bytes).
    pub peak: RoleSplit,
}

impl MemoryByRole {
    /// No iteration end carried a split.
    pub fn is_empty(&self) -> bool {
        self.now.is_empty() && self.peak.is_empty()
    }
}

/// The splits of the iteration ends seen, kept as they came (cheap at every iteration
/// end; [`RoleHistory::memory_by_role`] makes the report's split).
#[derive(Debug, Clone, Default)]
pub struct RoleHistory {
    latest: Vec<RoleBytes>,
    /// The split at the peak, unless `peak_is_latest` (then `latest` is that split and
    /// this a spare buffer): a loop whose memory grows makes a new peak at every
    /// iteration end, and the peak is copied only when a later split is not one.
    peak: Vec<RoleBytes>,
    peak_is_latest: bool,
    peak_high: u64,
}

impl RoleHistory {
    /// Takes an iteration end's split (copied).
    pub fn note(&mut self, roles: &[RoleBytes]) {
        if roles.is_empty() {
            return;
        }
        self.note_peak(roles);
        self.latest.clear();
        self.latest.extend_from_slice(roles);
    }

    /// Takes an iteration end's split by swapping it with the previous one, which
    /// `roles` holds afterwards (no copy: the tracker's path at every iteration end).
    #[inline]
    pub fn note_owned(&mut self, roles: &mut Vec<RoleBytes>) {
        if roles.is_empty() {
            return;
        }
        self.note_peak(roles);
        std::mem::swap(&mut self.latest, roles);
    }

    /// The first iteration end of the highest high water (live plus temporary bytes),
    /// before `roles` becomes the latest split: when it is the new peak, the latest split
    /// will be the peak's; otherwise a peak that was the latest split keeps it.
    #[inline]
    fn note_peak(&mut self, roles: &[RoleBytes]) {
        // Wrapping: byte counts of one process are far from 2^64, and a hostile log's
        // only choose which split is shown.
        let mut high = 0u64;
        for r in roles {
            high = high.wrapping_add(r.bytes).wrapping_add(r.temporary_bytes);
        }
        let none = !self.peak_is_latest && self.peak.is_empty();
        if high > self.peak_high || none {
            self.peak_high = high;
            self.peak_is_latest = true;
        } else if self.peak_is_latest {
            std::mem::swap(&mut self.peak, &mut self.latest);
            self.peak_is_latest = false;
        }
    }

    /// Now (the latest split) and at the peak.
    pub fn memory_by_role(&self) -> MemoryByRole {
        let peak = if self.peak_is_latest {
            &self.latest
        } else {
            &self.peak
        };
        MemoryByRole {
            now: RoleSplit::at_end(&self.latest),
            peak: RoleSplit::at_high_water(peak),
        }
    }
}

impl fmt::Display for MemoryByRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "by role at the latest iteration end: {}; at peak: {}",
            self.now, self.peak
        )
    }
}

/// One `#[track]`ed function of a call path: its name (`Type::method` in an impl) and
/// where it is defined.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CallFrame {
    pub function: String,
    pub file: String,
    pub line: u32,
}

/// `train → Dataset::batch`: the functions of a call path, outermost first.
pub fn format_call_path(path: &[CallFrame]) -> String {
    let names: Vec<&str> = path.iter().map(|f| f.function.as_str()).collect();
    names.join(" → ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_counts_temporaries_under_their_role() {
        let roles = [
            RoleBytes {
                role: Role::Parameter,
                bytes: 100,
                tensors: 2,
                ..RoleBytes::default()
            },
            RoleBytes {
                role: Role::Activation,
                temporary_bytes: 40,
                temporary_tensors: 4,
                ..RoleBytes::default()
            },
        ];
        let mut h = RoleHistory::default();
        h.note(&roles);
        let m = h.memory_by_role();
        assert_eq!(m.now.parameter.bytes, 100);
        assert_eq!(m.now.activation.bytes, 0);
        assert_eq!(m.now.temporary.bytes, 40);
        assert_eq!(m.peak.activation.bytes, 40);
        assert_eq!(m.peak.temporary.tensors, 4);
        let json = serde_json::to_value(m).unwrap();
        assert_eq!(json["peak"]["parameter"]["bytes"], 100);
        assert_eq!(m.now.to_string(), "parameter 100 B (2), temporary 40 B (4)");
    }

    /// The peak is the first split of the highest high water, whether the splits are
    /// copied in or swapped in, through growth (a new peak at every end), a fall and a
    /// climb back to the same height.
    #[test]
    fn the_peak_follows_growth_falls_and_ties() {
        let split = |bytes: u64, tensors: u64| {
            vec![RoleBytes {
                role: Role::Activation,
                bytes,
                tensors,
                ..RoleBytes::default()
            }]
        };
        let steps = [
            (10, 1),
            (20, 2),
            (30, 3),
            (5, 4),
            (30, 5),
            (12, 6),
            (40, 7),
            (1, 8),
        ];
        // (live bytes now, peak bytes, tensors at the peak) after each step.
        let want = [
            (10, 10, 1),
            (20, 20, 2),
            (30, 30, 3),
            (5, 30, 3),
            (30, 30, 3),
            (12, 30, 3),
            (40, 40, 7),
            (1, 40, 7),
        ];
        let (mut copied, mut owned) = (RoleHistory::default(), RoleHistory::default());
        for (&(bytes, tensors), &w) in steps.iter().zip(&want) {
            copied.note(&split(bytes, tensors));
            let mut mine = split(bytes, tensors);
            owned.note_owned(&mut mine);
            for h in [&copied, &owned] {
                let m = h.memory_by_role();
                let got = (m.now.activation.bytes, m.peak.activation.bytes);
                assert_eq!((got.0, got.1, m.peak.activation.tensors), w);
            }
        }
    }
}
