//! Where a tensor comes from, as the source says it: role hints on sites (a loop's item
//! and a batch call are `input`; what the methods of an `impl Optimizer` make and store
//! is `optimizer_state`), the call-path guard of every tracked function, and the
//! out-of-memory check of the values that leave it with an error.
//!
//! ```ignore
//! fn f(args) -> Result<T> {
//!     let __tl_call = enter(&FN_SITE);    // call path: pushed here, popped on drop
//!     let y = Checked::checked(g(x))?;    // every `?`: an Err is looked at first
//!     Checked::checked(h(y))              // the tail of a function returning a Result
//! }
//! ```
//!
//! `Checked` is a trait implemented for `Result` and `Option`, called by path: the
//! operand's type is that of the `?` anyway, so inference is not constrained. The check
//! runs while the function's locals are alive (a post-mortem of the failing step).
//! `return Err(..)` is not checked (the caller's `?` sees it).

use super::sites::local;
use super::syntax::{diverges, pat_idents};
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{parse_quote, parse_quote_spanned, Block, Expr, ReturnType, Stmt};

/// Whether an `impl` block implements a trait named `Optimizer` (candle-nn's).
pub(super) fn is_optimizer_impl(imp: &syn::ItemImpl) -> bool {
    imp.trait_
        .as_ref()
        .and_then(|(_, path, _)| path.segments.last())
        .is_some_and(|s| s.ident == "Optimizer")
}

/// The names the function's arguments bind.
pub(super) fn fn_args(sig: &syn::Signature) -> Vec<String> {
    let mut out = Vec::new();
    for input in &sig.inputs {
        if let syn::FnArg::Typed(t) = input {
            let mut idents = Vec::new();
            pat_idents(&t.pat, &mut idents);
            out.extend(idents.into_iter().map(|i| i.to_string()));
        }
    }
    out
}

/// `expr` without `?`, `.unwrap()`, `.expect(..)`, `.await`, parentheses and references.
fn strip(mut expr: &Expr) -> &Expr {
    loop {
        expr = match expr {
            Expr::Try(t) => &t.expr,
            Expr::Paren(p) => &p.expr,
            Expr::Await(a) => &a.base,
            Expr::Reference(r) => &r.expr,
            Expr::MethodCall(c) if c.method == "unwrap" || c.method == "expect" => &c.receiver,
            // Our own check around a `?` operand (rewritten before the binding is seen).
            Expr::Call(c) if is_checked_call(c) => &c.args[0],
            e => return e,
        };
    }
}

/// `::tensor_lifetime::__private::Checked::checked(x)`, as [`checked`] writes it.
fn is_checked_call(c: &syn::ExprCall) -> bool {
    let Expr::Path(p) = &*c.func else {
        return false;
    };
    let names: Vec<String> = p
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    c.args.len() == 1 && names.ends_with(&["Checked".to_string(), "checked".to_string()])
}

/// A call whose name says batch (`data.next_batch()?`, `dataset::batch(i)`): its value
/// is an input.
pub(super) fn is_batch_call(expr: &Expr) -> bool {
    let name = match strip(expr) {
        Expr::MethodCall(c) => c.method.to_string(),
        Expr::Call(c) => match &*c.func {
            Expr::Path(p) => p
                .path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default(),
            _ => return false,
        },
        _ => return false,
    };
    name.to_lowercase().contains("batch")
}

/// A value that is not made here: one of the function's arguments (or its clone), or a
/// place (`self.vars[i]`, `&w`).
pub(super) fn is_handed_in(expr: &Expr, args: &[String]) -> bool {
    let e = match strip(expr) {
        Expr::MethodCall(c) if c.method == "clone" && c.args.is_empty() => strip(&c.receiver),
        e => e,
    };
    match e {
        Expr::Path(p) => p
            .path
            .get_ident()
            .is_some_and(|i| args.iter().any(|a| i == a)),
        Expr::Field(_) | Expr::Index(_) => true,
        _ => false,
    }
}

/// `static __TL_FN: FnSite = ..; &__TL_FN` for function `name`, placed at `span`.
fn fn_site(name: &str, span: Span) -> TokenStream {
    let file = quote_spanned!(span=> ::core::file!());
    let line = quote_spanned!(span=> ::core::line!());
    quote! {{
        static __TL_FN: ::tensor_lifetime::__private::FnSite =
            ::tensor_lifetime::__private::FnSite::new(#name, #file, #line);
        &__TL_FN
    }}
}

/// Whether the function returns a `Result` (its last path segment says so).
fn returns_result(sig: &syn::Signature) -> bool {
    match &sig.output {
        ReturnType::Type(_, ty) => match &**ty {
            syn::Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Result"),
            _ => false,
        },
        ReturnType::Default => false,
    }
}

/// `Checked::checked(expr)`: `expr` passed through the out-of-memory check.
pub(super) fn checked(expr: &Expr) -> Expr {
    // `(a + b)?`: the parentheses are not needed around an argument (`unused_parens`).
    let mut expr = expr;
    while let Expr::Paren(p) = expr {
        expr = &p.expr;
    }
    // Spanned at the operand: sites placed by the span of an expression around it
    // (`Type { field: f()? }`) keep naming the user's line.
    let span = expr.span();
    parse_quote_spanned!(span=> ::tensor_lifetime::__private::Checked::checked(#expr))
}

/// Adds the call-path guard and, for a function returning a `Result`, the check of its
/// tail expression (module docs). Nothing for `async` functions (the guard is per thread
/// and must not be held across an `.await`).
pub(super) fn wrap_body(function: &str, sig: &syn::Signature, block: &mut Block) {
    if sig.asyncness.is_some() {
        return;
    }
    if returns_result(sig) {
        if let Some(Stmt::Expr(tail, None)) = block.stmts.last_mut() {
            if !diverges(tail) {
                *tail = checked(tail);
            }
        }
    }
    let call = local("__tl_call");
    let site = fn_site(function, sig.ident.span());
    let enter: Stmt = parse_quote!(let #call = ::tensor_lifetime::__private::enter(#site););
    block.stmts.insert(0, enter);
}
