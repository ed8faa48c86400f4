//! Roles: what each tracked tensor is for, decided at its probe, and the per-role tally
//! of a sweep (filled in the sweep's walk, beside the per-device one).
//!
//! The rules are the report crate's (`tensor_lifetime_report::roles`, module docs): a
//! hint of the place that saw the tensor (`gradient` for a `GradStore`'s tensors,
//! `optimizer_state` for stores in an `impl Optimizer`, `input` for loop items and batch
//! calls, any role through [`crate::mark_role`]) comes first; then a `Var` is a
//! `parameter`, a tensor with an autograd op an `activation`, anything else `other`. A
//! probe reads `is_variable` and whether an op is tracked (two loads, no lock) so that a
//! tensor dead before the drain still has its role: the temporaries are counted by role.
//!
//! A role travels as one byte: the role's index, with [`HINTED`] set when a hint decided
//! it (and [`EXPLICIT`] when the program said it). A later hinted probe of a tensor whose
//! role was not hinted and is `other` or `activation` replaces it ([`upgrade`]); a
//! parameter keeps its role, except against the program's word ([`crate::mark_role`]:
//! an optimizer keeping its state in `Var`s).

use candle_core::Tensor;
use tensor_lifetime_report::{Role, RoleBytes};

/// Set in a role byte when a hint decided the role.
pub(super) const HINTED: u8 = 0x80;
/// Set (with [`HINTED`]) when the program said the role ([`crate::mark_role`]).
pub(super) const EXPLICIT: u8 = 0x40;
/// The role's index in a role byte.
pub(super) const INDEX: u8 = 0x07;

/// The role byte of a hint: `role` said by the place, or by the program (`explicit`).
pub(crate) const fn hint(role: Role, explicit: bool) -> u8 {
    role as u8 | HINTED | if explicit { EXPLICIT } else { 0 }
}

/// The role byte of a tensor probed with role byte `hint` (0: none) at a site of role
/// `site`.
#[inline]
pub(super) fn at_probe(t: &Tensor, hint: u8, site: Option<Role>) -> u8 {
    if hint != 0 {
        return hint;
    }
    match site {
        Some(role) => role.index() as u8 | HINTED,
        None if t.is_variable() => Role::Parameter.index() as u8,
        None if t.track_op() => Role::Activation.index() as u8,
        None => Role::Other.index() as u8,
    }
}

/// The role a role byte names.
#[inline]
pub(super) fn role(code: u8) -> Role {
    Role::from_index(usize::from(code & INDEX))
}

/// A later probe's role byte `probe` applied to a record's `role` (see the module docs):
/// the program's word replaces any role; a place's hint replaces `other` and
/// `activation` that no hint decided.
#[inline]
pub(super) fn upgrade(role_code: &mut u8, probe: u8) {
    if probe & EXPLICIT != 0
        || (probe & HINTED != 0
            && *role_code & HINTED == 0
            && matches!(role(*role_code), Role::Other | Role::Activation))
    {
        *role_code = probe;
    }
}

/// Per role: live tensors and the bytes they own. A sweep counts into one as it walks
/// ([`RoleTally`]); the old records of the generational registry keep one as records
/// change ([`super::generations`]), so that a partial sweep's split by role covers the
/// records it does not walk.
#[derive(Debug, Default, Clone)]
pub(super) struct RoleCounts {
    tensors: [u64; SLOTS],
    bytes: [u64; SLOTS],
}

impl RoleCounts {
    /// Adds (`add` true) or takes one record of role `code` owning `bytes`.
    #[inline]
    pub(super) fn count(&mut self, code: u8, bytes: u64, add: bool) {
        let i = slot(code);
        if add {
            self.tensors[i] += 1;
            self.bytes[i] += bytes;
        } else {
            self.tensors[i] = self.tensors[i].saturating_sub(1);
            self.bytes[i] = self.bytes[i].saturating_sub(bytes);
        }
    }
}

/// Slots of the per-role arrays: the six roles a tensor can have, indexed by the role
/// byte's low bits (masked, so no bounds check).
const SLOTS: usize = 8;

/// Per role: the tensors and bytes being counted by a sweep, and the split of the latest
/// sweep (live tensors and bytes) with the temporaries (born since the latest iteration
/// end and dead since), kept in the split handed to the analysis at iteration ends.
#[derive(Debug)]
pub(super) struct RoleTally {
    counting: RoleCounts,
    /// Records with an id from here on were born since the latest iteration end.
    watermark: u64,
    /// One entry per role, in role order (its roles never change, only the counts).
    split: Vec<RoleBytes>,
}

impl Default for RoleTally {
    fn default() -> Self {
        RoleTally {
            counting: RoleCounts::default(),
            watermark: 0,
            split: new_split(),
        }
    }
}

fn new_split() -> Vec<RoleBytes> {
    (0..ROLES)
        .map(|i| RoleBytes {
            role: Role::from_index(i),
            ..RoleBytes::default()
        })
        .collect()
}

impl RoleTally {
    /// A live record of role `code` (its bytes are counted by [`RoleTally::bytes`], once
    /// per storage).
    #[inline]
    pub(super) fn tensor(&mut self, code: u8) {
        self.counting.tensors[slot(code)] += 1;
    }

    /// A live storage's bytes, for its owner's role.
    #[inline]
    pub(super) fn bytes(&mut self, code: u8, bytes: u64) {
        self.counting.bytes[slot(code)] += bytes;
    }

    /// Adds counts kept elsewhere (the old records a partial sweep does not walk).
    #[inline]
    pub(super) fn add_counts(&mut self, counts: &RoleCounts) {
        for i in 0..SLOTS {
            self.counting.tensors[i] += counts.tensors[i];
            self.counting.bytes[i] += counts.bytes[i];
        }
    }

    /// Forgets the bytes counted so far in this sweep (its storages are claimed again).
    pub(super) fn reset_bytes(&mut self) {
        self.counting.bytes = [0; SLOTS];
    }

    /// A record found dead: a temporary if born since the latest iteration end.
    #[inline]
    pub(super) fn dead(&mut self, id: u64, code: u8, bytes: u64) {
        if id >= self.watermark {
            self.temporary(code, bytes);
        }
    }

    /// A tensor born and dead since the latest iteration end.
    #[inline]
    pub(super) fn temporary(&mut self, code: u8, bytes: u64) {
        if let Some(r) = self.split.get_mut(slot(code)) {
            r.temporary_tensors += 1;
            r.temporary_bytes += bytes;
        }
    }

    /// The end of a sweep: what it counted becomes the live split.
    #[inline]
    pub(super) fn finish_sweep(&mut self) {
        let counted = std::mem::take(&mut self.counting);
        for (i, r) in self.split.iter_mut().enumerate() {
            r.tensors = counted.tensors[i];
            r.bytes = counted.bytes[i];
        }
    }

    /// An iteration end: its split, one entry per role (give it back with
    /// [`RoleTally::put_back`], which starts the temporaries over from `next_record`).
    pub(super) fn iteration_end(&mut self) -> Vec<RoleBytes> {
        std::mem::take(&mut self.split)
    }

    /// Takes back an iteration end's split (or makes a new one if it was changed); the
    /// temporaries start over from `next_record`.
    pub(super) fn put_back(&mut self, mut split: Vec<RoleBytes>, next_record: u64) {
        if split.len() != ROLES {
            split = new_split();
        }
        for r in &mut split {
            r.temporary_tensors = 0;
            r.temporary_bytes = 0;
        }
        self.split = split;
        self.watermark = next_record;
    }
}

/// The six roles a tensor can have (not `temporary`).
const ROLES: usize = 6;

#[inline]
fn slot(code: u8) -> usize {
    usize::from(code) & (SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Var};

    #[test]
    fn roles_at_probe() {
        let t = Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap();
        assert_eq!(role(at_probe(&t, 0, None)), Role::Other);
        let v = Var::from_tensor(&t).unwrap();
        assert_eq!(role(at_probe(v.as_tensor(), 0, None)), Role::Parameter);
        let y = v.as_tensor().exp().unwrap();
        assert_eq!(role(at_probe(&y, 0, None)), Role::Activation);
        let hinted = at_probe(&t, 0, Some(Role::Input));
        assert_eq!(role(hinted), Role::Input);
        // A later hint replaces `other` and `activation`, never a parameter or a hint.
        let mut code = at_probe(&y, 0, None);
        upgrade(&mut code, hinted);
        assert_eq!(role(code), Role::Input);
        upgrade(&mut code, at_probe(&t, 0, Some(Role::Gradient)));
        assert_eq!(role(code), Role::Input);
        let mut param = at_probe(v.as_tensor(), 0, None);
        upgrade(&mut param, at_probe(&t, 0, Some(Role::OptimizerState)));
        assert_eq!(role(param), Role::Parameter);
        // The program's word replaces any role.
        upgrade(&mut param, hint(Role::OptimizerState, true));
        assert_eq!(role(param), Role::OptimizerState);
    }
}
