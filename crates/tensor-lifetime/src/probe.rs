//! Tagging values of any type.
//!
//! `#[track]` tags every binding without knowing its type. Autoref specialization would
//! constrain type inference at bindings whose type is only known later
//! (`let ids = iter.collect();`), so the probes are plain generic functions with no bound
//! but `?Sized`: they add no constraint. Inside, the value's type is compared with the
//! known tensor-holding types through [`typeid::of`], which works for non-`'static` types;
//! a value of any other type costs a few comparisons and is left alone (its type name's
//! end is compared too: a tensor of another candle-core is reported once, see
//! [`crate::compat`]).

// why: a value whose type id is a known tensor-holding type is read as that type.
#![allow(unsafe_code)]

use crate::site::Site;
use crate::tracker::{self, Input};
use candle_core::backprop::GradStore;
use candle_core::{Error, Tensor, Var};
use std::any::TypeId;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use tensor_lifetime_report::Role;

/// Tags the tensors in `value` with their creation site (first sighting) or an alias.
#[inline(always)]
pub fn tag<T: ?Sized>(value: &T, site: &'static Site) {
    if as_tensor(value).is_some_and(tracker::gated_out) {
        return;
    }
    if let Some(t) = tracker::active() {
        if let Some(x) = as_tensor(value) {
            return t.probe(x, site, false, 0);
        }
        if !grads(value, &mut |x| t.probe(x, site, false, GRADIENT)) {
            // The sampled mode is asked once per value (`Tracker::samples`).
            if t.samples() {
                visit(value, &mut |x| t.probe(x, site, false, 0));
            } else {
                visit(value, &mut |x| t.record_probe(x, site, false, 0));
            }
        }
    }
}

/// [`tag`] for a binding whose value the macro saw computed from `inputs` (see
/// [`input`]): a tensor with an autograd op keeps them as its graph's inputs.
#[inline(always)]
pub fn tag_made<T: ?Sized>(value: &T, site: &'static Site, inputs: &[Input]) {
    if as_tensor(value).is_some_and(tracker::gated_out) {
        return;
    }
    // No tensor among the inputs (or tracking off: `input` gave none): a plain tag.
    if inputs.iter().all(|i| i.key == 0) {
        return tag(value, site);
    }
    if let Some(t) = tracker::active() {
        if let Some(x) = as_tensor(value) {
            return t.probe_made(x, site, inputs);
        }
        if !grads(value, &mut |x| t.probe(x, site, false, GRADIENT)) {
            if t.samples() {
                visit(value, &mut |x| t.probe_made(x, site, inputs));
            } else {
                visit(value, &mut |x| t.record_made(x, site, inputs));
            }
        }
    }
}

/// The tensor `value` is, as an input of a value being computed (`model.forward(&x)`):
/// none unless it is a `Tensor` or `&Tensor` and tracking is built in. Two loads; whether
/// the tracker runs is asked once, by [`tag_made`].
#[inline(always)]
pub fn input<T: ?Sized>(value: &T) -> Input {
    match as_tensor(value) {
        Some(t) if cfg!(feature = "tracking") => Input::of(t),
        _ => Input::default(),
    }
}

/// `value` itself when it is a `Tensor` or a `&Tensor` (the common binding: decided at
/// compile time, so a probe of one goes straight to the tracker's gate).
#[inline(always)]
fn as_tensor<T: ?Sized>(value: &T) -> Option<&Tensor> {
    let ptr = value as *const T as *const ();
    let id = typeid::of::<T>();
    if id == TypeId::of::<Tensor>() {
        // SAFETY: `T` is `Tensor` (same `TypeId`), borrowed for this call.
        Some(unsafe { &*(ptr as *const Tensor) })
    } else if id == TypeId::of::<&Tensor>() {
        // SAFETY: `T` is `&Tensor` (same `TypeId`), borrowed for this call.
        Some(unsafe { *(ptr as *const &Tensor) })
    } else {
        None
    }
}

/// Records that the tensors in `value` are being stored at `site` (a container).
#[inline(always)]
pub fn store<T: ?Sized>(value: &T, site: &'static Site) {
    if as_tensor(value).is_some_and(tracker::gated_out) {
        return;
    }
    if let Some(t) = tracker::active() {
        if let Some(x) = as_tensor(value) {
            return t.probe(x, site, true, 0);
        }
        if !grads(value, &mut |x| t.probe(x, site, true, GRADIENT)) {
            if t.samples() {
                visit(value, &mut |x| t.probe(x, site, true, 0));
            } else {
                visit(value, &mut |x| t.record_probe(x, site, true, 0));
            }
        }
    }
}

/// The role byte of a `GradStore`'s tensors.
const GRADIENT: u8 = tracker::role_hint(Role::Gradient, false);

/// Tags the tensors in `value` at `site` with `role`, the program's word (see
/// [`crate::mark_role`]).
pub fn mark<T: ?Sized>(value: &T, site: &'static Site, role: Role) {
    if let Some(t) = tracker::active() {
        let hint = tracker::role_hint(role, true);
        let mut f = |x: &Tensor| t.probe(x, site, false, hint);
        if !grads(value, &mut f) {
            visit(value, &mut f);
        }
    }
}

/// The tensors of a `GradStore` (what `backward()` returns): gradients. False when
/// `value` is not one.
#[inline]
fn grads<T: ?Sized>(value: &T, f: &mut dyn FnMut(&Tensor)) -> bool {
    let id = typeid::of::<T>();
    let ptr = value as *const T as *const ();
    let store: &GradStore = if id == TypeId::of::<GradStore>() {
        // SAFETY: `T` is `GradStore` (same `TypeId`), borrowed for this call.
        unsafe { &*(ptr as *const GradStore) }
    } else if id == TypeId::of::<&GradStore>() {
        // SAFETY: `T` is `&GradStore` (same `TypeId`), borrowed for this call.
        unsafe { *(ptr as *const &GradStore) }
    } else {
        return false;
    };
    for tensor_id in store.get_ids() {
        if let Some(t) = store.get_id(*tensor_id) {
            f(t);
        }
    }
    true
}

/// Compares `T` with each supported type; on a match, calls `f` on each tensor in it.
// One closure shape for every case keeps the table uniform.
#[allow(clippy::redundant_closure)]
#[inline]
fn visit<T: ?Sized>(value: &T, f: &mut dyn FnMut(&Tensor)) {
    let ptr = value as *const T as *const ();
    let id = typeid::of::<T>();
    macro_rules! cases {
        ($($ty:ty => |$v:ident| $body:expr;)*) => {
            $(
                if id == TypeId::of::<$ty>() {
                    // SAFETY: `T` and `$ty` have the same `TypeId`, so they are the same
                    // (sized) type and `ptr` points at a valid `$ty` borrowed for this call.
                    let $v: &$ty = unsafe { &*(ptr as *const $ty) };
                    $body;
                    return;
                }
            )*
        };
    }
    cases! {
        Tensor => |v| f(v);
        &Tensor => |v| f(v);
        Var => |v| f(v.as_tensor());
        &Var => |v| f(v.as_tensor());
        Option<Tensor> => |v| if let Some(t) = v { f(t) };
        Result<Tensor, Error> => |v| if let Ok(t) = v { f(t) };
        Vec<Tensor> => |v| v.iter().for_each(|t| f(t));
        &Vec<Tensor> => |v| v.iter().for_each(|t| f(t));
        &mut Vec<Tensor> => |v| v.iter().for_each(|t| f(t));
        &VecDeque<Tensor> => |v| v.iter().for_each(|t| f(t));
        &mut VecDeque<Tensor> => |v| v.iter().for_each(|t| f(t));
        &mut HashMap<String, Tensor> => |v| v.values().for_each(|t| f(t));
        &mut HashMap<u64, Tensor> => |v| v.values().for_each(|t| f(t));
        &mut HashMap<usize, Tensor> => |v| v.values().for_each(|t| f(t));
        Vec<Var> => |v| v.iter().for_each(|t| f(t.as_tensor()));
        Vec<Option<Tensor>> => |v| v.iter().flatten().for_each(|t| f(t));
        Vec<(Tensor, Tensor)> => |v| v.iter().for_each(|(a, b)| { f(a); f(b) });
        Vec<Vec<Tensor>> => |v| v.iter().flatten().for_each(|t| f(t));
        VecDeque<Tensor> => |v| v.iter().for_each(|t| f(t));
        Option<Vec<Tensor>> => |v| v.iter().flatten().for_each(|t| f(t));
        Option<(Tensor, Tensor)> => |v| if let Some((a, b)) = v { f(a); f(b) };
        Option<Var> => |v| if let Some(t) = v { f(t.as_tensor()) };
        Result<Vec<Tensor>, Error> => |v| if let Ok(ts) = v { ts.iter().for_each(|t| f(t)) };
        Result<(Tensor, Tensor), Error> => |v| if let Ok((a, b)) = v { f(a); f(b) };
        (Tensor, Tensor) => |v| { f(&v.0); f(&v.1) };
        (Tensor, Tensor, Tensor) => |v| { f(&v.0); f(&v.1); f(&v.2) };
        (Tensor, f32) => |v| f(&v.0);
        (Tensor, f64) => |v| f(&v.0);
        (Tensor, usize) => |v| f(&v.0);
        (usize, Tensor) => |v| f(&v.1);
        (Tensor, Vec<Tensor>) => |v| { f(&v.0); v.1.iter().for_each(|t| f(t)) };
        [Tensor; 1] => |v| v.iter().for_each(|t| f(t));
        [Tensor; 2] => |v| v.iter().for_each(|t| f(t));
        [Tensor; 3] => |v| v.iter().for_each(|t| f(t));
        [Tensor; 4] => |v| v.iter().for_each(|t| f(t));
        Box<Tensor> => |v| f(v);
        Arc<Tensor> => |v| f(v);
        Rc<Tensor> => |v| f(v);
        HashMap<String, Tensor> => |v| v.values().for_each(|t| f(t));
        HashMap<&'static str, Tensor> => |v| v.values().for_each(|t| f(t));
        HashMap<usize, Tensor> => |v| v.values().for_each(|t| f(t));
        HashMap<u32, Tensor> => |v| v.values().for_each(|t| f(t));
        HashMap<u64, Tensor> => |v| v.values().for_each(|t| f(t));
        HashMap<i64, Tensor> => |v| v.values().for_each(|t| f(t));
        HashMap<String, Var> => |v| v.values().for_each(|t| f(t.as_tensor()));
        BTreeMap<String, Tensor> => |v| v.values().for_each(|t| f(t));
        BTreeMap<usize, Tensor> => |v| v.values().for_each(|t| f(t));
        BTreeMap<u64, Tensor> => |v| v.values().for_each(|t| f(t));
    }
    // None of ours: a tensor of another candle-core is said once, loudly.
    crate::compat::check_unknown(std::any::type_name::<T>());
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn seen<T>(value: &T) -> usize {
        let mut n = 0;
        visit(value, &mut |_| n += 1);
        n
    }

    #[test]
    fn finds_tensors_in_supported_types() {
        let t = Tensor::zeros(2, DType::F32, &Device::Cpu).unwrap();
        assert_eq!(seen(&t), 1);
        assert_eq!(seen(&&t), 1);
        assert_eq!(seen(&Some(t.clone())), 1);
        assert_eq!(seen(&None::<Tensor>), 0);
        assert_eq!(seen(&vec![t.clone(), t.clone()]), 2);
        let mut v = vec![t.clone()];
        assert_eq!(
            seen(&&mut v),
            1,
            "a borrowed container (extend on a &mut Vec)"
        );
        assert_eq!(seen(&&v), 1);
        assert_eq!(seen(&(t.clone(), t.clone())), 2);
        assert_eq!(seen(&candle_core::Result::Ok(t.clone())), 1);
        let mut m = HashMap::new();
        m.insert("a".to_string(), t.clone());
        assert_eq!(seen(&m), 1);
        assert_eq!(seen(&Var::from_tensor(&t).unwrap()), 1);
    }

    #[test]
    fn finds_gradients() {
        let w = Var::new(&[1f32, 2.0], &candle_core::Device::Cpu).unwrap();
        let loss = w.as_tensor().sqr().unwrap().sum_all().unwrap();
        let g = loss.backward().unwrap();
        let mut n = 0;
        assert!(grads(&g, &mut |_| n += 1));
        assert!(grads(&&g, &mut |_| n += 1));
        assert_eq!(n, 2);
        assert!(!grads(&w, &mut |_| n += 1));
    }

    #[test]
    fn ignores_other_types() {
        assert_eq!(seen(&1.0f32), 0);
        assert_eq!(seen(&"text"), 0);
        assert_eq!(seen(&vec![1u32, 2]), 0);
        let borrowed: Vec<&str> = vec!["x"];
        assert_eq!(seen(&borrowed), 0);
    }
}
