//! What is known of one function before its body is rewritten: its name, whether it is
//! `async`, the impl it belongs to, its arguments and locals, the locals it returns and
//! the containers it trims. Built once from the signature and the untouched body, then
//! only read by the visitor (`instrument.rs`), whose own state is what changes while it
//! walks.

use super::containers::{fills_returned, returned_locals, Evictions};
use super::inputs::bound_names;
use super::origin::{fn_args, is_handed_in};
use proc_macro2::Span;
use std::collections::HashSet;
use syn::{Block, Expr, Signature};

/// What the item around a function says of it.
#[derive(Default)]
pub(super) struct Owner {
    /// The impl's type, for `Self { .. }` in struct-literal labels.
    pub(super) self_type: Option<String>,
    /// Trims of `self.` containers in the other methods of the same impl or trait.
    pub(super) shared: Evictions,
    /// A method of an `impl Optimizer`: what it makes is `optimizer_state` (`origin.rs`).
    pub(super) optimizer: bool,
}

/// The read-only facts of one function (module docs).
pub(super) struct FnFacts {
    /// The function's name, for every site in it (closures included).
    function: String,
    /// An `async fn`.
    is_async: bool,
    self_type: Option<String>,
    optimizer: bool,
    /// The names the arguments bind (values handed in, not made here).
    args: Vec<String>,
    /// Every name the function binds, its arguments included: the locals a value may be
    /// computed from (`inputs.rs`).
    locals: HashSet<String>,
    /// Locals the function returns (`Ok(heads)`): a loop filling one builds a value.
    returned: Vec<String>,
    /// Containers the body trims, and those the owner's other methods trim, by receiver
    /// text: their stores are bounded.
    evictions: Evictions,
}

impl FnFacts {
    /// The facts of `function` (its name in sites) with signature `sig` and body `block`,
    /// read before the body is rewritten.
    pub(super) fn new(function: String, owner: &Owner, sig: &Signature, block: &Block) -> Self {
        let mut evictions = Evictions::of(block);
        evictions.merge(&owner.shared);
        let args = fn_args(sig);
        FnFacts {
            function,
            is_async: sig.asyncness.is_some(),
            self_type: owner.self_type.clone(),
            optimizer: owner.optimizer,
            locals: bound_names(block, &args),
            args,
            returned: returned_locals(block),
            evictions,
        }
    }

    pub(super) fn function(&self) -> &str {
        &self.function
    }

    pub(super) fn is_async(&self) -> bool {
        self.is_async
    }

    /// The impl's type, for `Self { .. }` in struct-literal labels.
    pub(super) fn self_type(&self) -> Option<&str> {
        self.self_type.as_deref()
    }

    /// A method of an `impl Optimizer`: what it makes is `optimizer_state` (`origin.rs`).
    pub(super) fn optimizer(&self) -> bool {
        self.optimizer
    }

    /// Every name the function binds, its arguments included.
    pub(super) fn locals(&self) -> &HashSet<String> {
        &self.locals
    }

    /// In an `impl Optimizer`: `value` is made there (not an argument or a place).
    pub(super) fn made_here(&self, value: &Expr) -> bool {
        self.optimizer && !is_handed_in(value, &self.args)
    }

    /// The returned local a loop stores into (`heads.push(..)` with `heads` returned).
    pub(super) fn fills_returned(&self, expr: &Expr) -> Option<String> {
        fills_returned(expr, &self.returned)
    }

    /// Where and how the code trims the container `label`, if it does.
    pub(super) fn eviction(&self, label: &str) -> Option<&(Span, String)> {
        self.evictions.get(label)
    }
}
