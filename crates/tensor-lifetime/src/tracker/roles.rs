//! Roles: what each tracked tensor is for, decided at its probe and carried as one byte
//! (the per-role tally of a sweep is [`super::tally`]'s).
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
use tensor_lifetime_report::Role;

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
