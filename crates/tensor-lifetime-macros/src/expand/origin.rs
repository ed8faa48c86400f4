//! Where a tensor comes from, as the source says it: role hints on sites (a loop's item
//! and a batch call are `input`; what the methods of an `impl Optimizer` make and store
//! is `optimizer_state`), and the per-function wrapper: the call-path guard of every
//! tracked function and, for those returning a `Result`, the out-of-memory check on the
//! way out.
//!
//! The wrapper of a function returning `Result<..>` (not `async`, `const` or `unsafe`,
//! no `impl Trait` in the return type):
//!
//! ```ignore
//! fn f(args) -> Result<T> {
//!     let __tl_call = enter(&FN_SITE);          // call path: pushed, popped on drop
//!     let __tl_result: Result<T> = (move || -> Result<T> { BODY })();
//!     (&Returned(&__tl_result)).check_oom();    // candle's CUDA OOM: the post-mortem
//!     __tl_result
//! }
//! ```
//!
//! The closure keeps `return` and `?` meaning what they meant (they leave the closure,
//! whose value is the function's); it takes the arguments by move, which the function
//! owned anyway. Other functions get the guard alone.

use super::*;

/// `.with_role(Role::X)` for a site of role `role` (a `Role` variant's name).
pub(super) fn role_tokens(role: Option<&str>) -> TokenStream {
    match role {
        Some(role) => {
            let ident = proc_macro2::Ident::new(role, Span::call_site());
            quote!(.with_role(::tensor_lifetime::__private::Role::#ident))
        }
        None => TokenStream::new(),
    }
}

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
            e => return e,
        };
    }
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

/// Whether the return type is a `Result` the wrapper can name (no `impl Trait`).
fn wrappable_result(sig: &syn::Signature) -> Option<&syn::Type> {
    let ReturnType::Type(_, ty) = &sig.output else {
        return None;
    };
    let syn::Type::Path(p) = &**ty else {
        return None;
    };
    let is_result = p.path.segments.last().is_some_and(|s| s.ident == "Result");
    let has_impl = ty
        .to_token_stream()
        .into_iter()
        .any(|t| matches!(&t, TokenTree::Ident(i) if i == "impl"));
    (is_result && !has_impl && sig.unsafety.is_none()).then_some(&**ty)
}

/// Adds the call-path guard and, for a `Result`, the out-of-memory check (module docs).
/// Nothing for `async` functions (the guard is per thread and must not be held across
/// an `.await`).
pub(super) fn wrap_body(function: &str, sig: &syn::Signature, block: &mut Block) {
    if sig.asyncness.is_some() || sig.constness.is_some() {
        return;
    }
    let call = local("__tl_call");
    let site = fn_site(function, sig.ident.span());
    let enter = quote!(let #call = ::tensor_lifetime::__private::enter(#site););
    match wrappable_result(sig) {
        Some(ret) => {
            let result = local("__tl_result");
            let body = &*block;
            *block = parse_quote!({
                #enter
                let #result: #ret = (move || -> #ret #body)();
                // The borrow picks the check (autoref specialization, `oom.rs`).
                #[allow(unused_imports, clippy::needless_borrow)]
                {
                    use ::tensor_lifetime::__private::{CheckAny as _, CheckResult as _};
                    (&::tensor_lifetime::__private::Returned(&#result)).check_oom();
                }
                #result
            });
        }
        None => {
            let stmt: Stmt = parse_quote!(#enter);
            block.stmts.insert(0, stmt);
        }
    }
}
