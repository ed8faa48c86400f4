//! Graph inputs: the locals a `let`'s (or an assignment's) value is computed from (`let logits =
//! model.forward(&x)?;` → `x`). candle keeps an op's inputs private, and the runtime's
//! graph walk only sees the nodes that lead to a variable; a batch held by a kept graph
//! would have no holder. The `let` becomes
//!
//! ```text
//! let __tl_inputs = [input(&x)];      // before: `x` may be moved into the value
//! let logits = model.forward(&x)?;
//! tag_made(&logits, SITE, &__tl_inputs);
//! ```
//!
//! An assignment reads them in the probe's argument list, before the value:
//! `h = tagged_made([input(&h)], layer.forward(&h)?, SITE)`.
//!
//! Only names bound in the function (its arguments and its patterns) are taken, so a
//! function item or a constant is never named again; closures, blocks and macros in the
//! value are not entered (their names may be bound inside them).

use super::syntax::{is_assign_op, is_pure_place};
use proc_macro2::Ident;
use quote::ToTokens;
use std::collections::HashSet;
use syn::visit::Visit;
use syn::{parse_quote, Attribute, Block, Expr, Item, Stmt};

/// Inputs named per `let` (the runtime keeps as many).
const INPUTS_MAX: usize = 4;

/// Every name bound in `block` or by the function's arguments `args`.
pub(super) fn bound_names(block: &Block, args: &[String]) -> HashSet<String> {
    struct Names(HashSet<String>);
    impl<'a> Visit<'a> for Names {
        fn visit_pat_ident(&mut self, p: &'a syn::PatIdent) {
            self.0.insert(p.ident.to_string());
            syn::visit::visit_pat_ident(self, p);
        }
        // A closure's parameters are not in scope outside it.
        fn visit_expr_closure(&mut self, c: &'a syn::ExprClosure) {
            self.visit_expr(&c.body);
        }
        fn visit_item(&mut self, _: &'a Item) {}
    }
    let mut names = Names(args.iter().cloned().collect());
    names.visit_block(block);
    names.0
}

/// The locals (and fields of locals) that `value` passes to calls, methods and operators,
/// in order, each once, at most [`INPUTS_MAX`].
pub(super) fn graph_inputs(value: &Expr, locals: &HashSet<String>) -> Vec<Expr> {
    fn walk(e: &Expr, locals: &HashSet<String>, out: &mut Vec<Expr>) {
        match e {
            Expr::Path(_) | Expr::Field(_) => {
                if is_local_place(e, locals) {
                    let text = e.to_token_stream().to_string();
                    if !out.iter().any(|o| o.to_token_stream().to_string() == text) {
                        out.push(e.clone());
                    }
                } else if let Expr::Field(f) = e {
                    walk(&f.base, locals, out);
                }
            }
            Expr::Reference(r) => walk(&r.expr, locals, out),
            Expr::MethodCall(m) => {
                walk(&m.receiver, locals, out);
                m.args.iter().for_each(|a| walk(a, locals, out));
            }
            Expr::Call(c) => c.args.iter().for_each(|a| walk(a, locals, out)),
            Expr::Binary(b) if !is_assign_op(&b.op) => {
                walk(&b.left, locals, out);
                walk(&b.right, locals, out);
            }
            Expr::Unary(u) if !matches!(u.op, syn::UnOp::Deref(_)) => walk(&u.expr, locals, out),
            Expr::Paren(p) => walk(&p.expr, locals, out),
            Expr::Group(g) => walk(&g.expr, locals, out),
            Expr::Try(t) => walk(&t.expr, locals, out),
            Expr::Await(a) => walk(&a.base, locals, out),
            Expr::Tuple(t) => t.elems.iter().for_each(|x| walk(x, locals, out)),
            Expr::Array(a) => a.elems.iter().for_each(|x| walk(x, locals, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, locals, &mut out);
    out.truncate(INPUTS_MAX);
    out
}

/// `x`, `batch.0`, `b.x.y` where `x` / `batch` / `b` is a local of the function (not
/// `self`: its fields are the model's, and its weights are variables the walk sees).
fn is_local_place(e: &Expr, locals: &HashSet<String>) -> bool {
    match e {
        Expr::Path(p) => {
            is_pure_place(e)
                && p.path
                    .get_ident()
                    .is_some_and(|i| i != "self" && locals.contains(&i.to_string()))
        }
        Expr::Field(f) => is_local_place(&f.base, locals),
        _ => false,
    }
}

/// `let __tl_inputs = [input(&a), input(&b)];` for `inputs`, under the `let`'s `#[cfg]`s.
pub(super) fn inputs_local(name: &Ident, inputs: &[Expr], cfgs: &[&Attribute]) -> Stmt {
    parse_quote! {
        #(#cfgs)*
        let #name = [#(::tensor_lifetime::__private::input(&#inputs)),*];
    }
}
