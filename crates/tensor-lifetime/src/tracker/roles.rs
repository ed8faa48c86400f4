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
//! it. A later hinted probe of a tensor whose role was not hinted and is `other` or
//! `activation` replaces it ([`upgrade`]); a parameter keeps its role.

use candle_core::Tensor;
use tensor_lifetime_report::{Role, RoleBytes};

/// Set in a role byte when a hint decided the role.
pub(super) const HINTED: u8 = 0x80;

/// The role byte of a tensor probed with `hint`.
#[inline]
pub(super) fn at_probe(t: &Tensor, hint: Option<Role>) -> u8 {
    match hint {
        Some(role) => role.index() as u8 | HINTED,
        None if t.is_variable() => Role::Parameter.index() as u8,
        None if t.track_op() => Role::Activation.index() as u8,
        None => Role::Other.index() as u8,
    }
}

/// The role a role byte names.
#[inline]
pub(super) fn role(code: u8) -> Role {
    Role::from_index(usize::from(code & !HINTED))
}

/// A later probe's role byte `probe` applied to a record's `role` (see the module docs).
#[inline]
pub(super) fn upgrade(role_code: &mut u8, probe: u8) {
    if probe & HINTED != 0
        && *role_code & HINTED == 0
        && matches!(role(*role_code), Role::Other | Role::Activation)
    {
        *role_code = probe;
    }
}

/// Tensors and bytes.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Amount {
    pub(super) tensors: u64,
    pub(super) bytes: u64,
}

/// The six roles a tensor can have (not `temporary`).
const ROLES: usize = 6;

/// Per role: the live tensors and bytes of the latest sweep, those being counted by a
/// sweep, and the temporaries (born since the latest iteration end and dead since).
#[derive(Debug, Default)]
pub(super) struct RoleTally {
    pub(super) live: [Amount; ROLES],
    tally: [Amount; ROLES],
    temporary: [Amount; ROLES],
    /// Records with an id from here on were born since the latest iteration end.
    watermark: u64,
    /// The latest iteration end's split (kept for its allocation).
    split: Vec<RoleBytes>,
}

impl RoleTally {
    /// A live record of role `code` (its bytes are counted by [`RoleTally::bytes`], once
    /// per storage).
    #[inline]
    pub(super) fn tensor(&mut self, code: u8) {
        self.tally[index(code)].tensors += 1;
    }

    /// A live storage's bytes, for its owner's role.
    #[inline]
    pub(super) fn bytes(&mut self, code: u8, bytes: u64) {
        self.tally[index(code)].bytes += bytes;
    }

    /// Forgets the bytes counted so far in this sweep (its storages are claimed again).
    pub(super) fn reset_bytes(&mut self) {
        for a in &mut self.tally {
            a.bytes = 0;
        }
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
        let a = &mut self.temporary[index(code)];
        a.tensors += 1;
        a.bytes += bytes;
    }

    /// The end of a sweep: what it counted becomes the live split.
    pub(super) fn finish_sweep(&mut self) {
        self.live = std::mem::take(&mut self.tally);
    }

    /// An iteration end: its split (the roles with tensors; give it back with
    /// [`RoleTally::put_back`]), then the temporaries start over from `next_record`.
    pub(super) fn iteration_end(&mut self, next_record: u64) -> Vec<RoleBytes> {
        let mut out = std::mem::take(&mut self.split);
        out.clear();
        for (i, (live, temp)) in self.live.iter().zip(&self.temporary).enumerate() {
            if live.tensors + temp.tensors == 0 {
                continue;
            }
            out.push(RoleBytes {
                role: Role::from_index(i),
                bytes: live.bytes,
                tensors: live.tensors,
                temporary_bytes: temp.bytes,
                temporary_tensors: temp.tensors,
            });
        }
        self.temporary = Default::default();
        self.watermark = next_record;
        out
    }

    /// Keeps an iteration end's split for its allocation.
    pub(super) fn put_back(&mut self, split: Vec<RoleBytes>) {
        self.split = split;
    }
}

#[inline]
fn index(code: u8) -> usize {
    usize::from(code & !HINTED).min(ROLES - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Var};

    #[test]
    fn roles_at_probe() {
        let t = Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap();
        assert_eq!(role(at_probe(&t, None)), Role::Other);
        let v = Var::from_tensor(&t).unwrap();
        assert_eq!(role(at_probe(v.as_tensor(), None)), Role::Parameter);
        let y = v.as_tensor().exp().unwrap();
        assert_eq!(role(at_probe(&y, None)), Role::Activation);
        let hinted = at_probe(&t, Some(Role::Input));
        assert_eq!(role(hinted), Role::Input);
        // A later hint replaces `other` and `activation`, never a parameter or a hint.
        let mut code = at_probe(&y, None);
        upgrade(&mut code, hinted);
        assert_eq!(role(code), Role::Input);
        upgrade(&mut code, at_probe(&t, Some(Role::Gradient)));
        assert_eq!(role(code), Role::Input);
        let mut param = at_probe(v.as_tensor(), None);
        upgrade(&mut param, at_probe(&t, Some(Role::OptimizerState)));
        assert_eq!(role(param), Role::Parameter);
    }
}
