//! Code generation: the rewrite of a function body into one that calls the probes of
//! `::tensor_lifetime::__private`.
//!
//! What is rewritten (everything else is left as written):
//!
//! | user code | becomes |
//! |---|---|
//! | `let PAT = EXPR;` (also `let ... else`) | the same `let`, then `tag(&ident, SITE)` per identifier of `PAT`; when `EXPR` passes locals to calls or operators, `let __tl_inputs = [input(&x), ..];` before and `tag_made(&ident, SITE, &__tl_inputs)` (`inputs.rs`) |
//! | `place = EXPR` | `place = tagged(EXPR, SITE)` (the value is tagged on its way in); `tagged_made([input(&x), ..], EXPR, SITE)` when `EXPR` passes locals to calls or operators |
//! | `self.field = EXPR`, `v[i] = EXPR` | `... = stored(EXPR, SITE)`: a store into `self.field` / `v` |
//! | `place op= EXPR` (simple places) | `{ place op= EXPR; tag(&place, SITE); }` |
//! | `recv.push(v)`, `push_back`, `push_front`, `insert(k, v)`, `entry(k).or_insert(v)` | the value argument becomes `stored(v, SITE)` |
//! | `recv.extend(it)`, `recv.append(o)` (simple receivers) | the call, then `store(&recv, SITE)` |
//! | `for`, `while`, `while let`, `loop` | a block opening a loop scope around the loop; each iteration starts an iteration guard |
//!
//! `tagged` and `stored` take and return the value, so evaluation order, temporaries and
//! two-phase borrows are those of the original call; `tag` and `store` take `&T` for any
//! `T: ?Sized`, so no probe constrains type inference (see `probe.rs` in the runtime).
//!
//! A `for` loop's pattern is bound inside the body, after the iteration guard, so the
//! loop's item (the batch) drops before the iteration ends; the body itself becomes a
//! statement so that its temporaries drop before the guard too.
//!
//! In `async` code a loop that `.await`s may resume on another thread: its scope is the
//! `Send` `AsyncLoopScope`, and the async body around it (the `async fn`'s, an `async`
//! block's, an async closure's) is wrapped in `in_task`, which carries the task's open
//! loops and leak-test session from poll to poll (`{ in_task(async { body }).await }`).
//!
//! Not rewritten: nested items (they are not part of the annotated code), `const`
//! contexts and `const fn`s, and macro invocations (their tokens are not Rust syntax to
//! us).
//!
//! # Modules
//!
//! Each uses only the modules below it in this list, never one above:
//!
//! | module | what | uses |
//! |---|---|---|
//! | `mod.rs` | the entry points: items, options, errors, the leak test around the body | `facts`, `instrument`, `containers`, `origin` |
//! | `instrument.rs` | the visitor that rewrites a body (its state: where the walk is) | `facts`, `containers`, `inputs`, `origin`, `sites`, `syntax` |
//! | `facts.rs` | what is known of a function before the rewrite, read-only | `containers`, `inputs`, `origin` |
//! | `origin.rs` | role hints, the call-path guard, the out-of-memory check at `?` | `sites`, `syntax` |
//! | `containers.rs` | evictions, returned locals, tensors inside a stored value | `syntax` |
//! | `inputs.rs` | the locals a value is computed from | `syntax` |
//! | `sites.rs` | the `Site` statics and hygienic locals generated code is made of | |
//! | `syntax.rs` | small questions about the user's syntax | |

use crate::attr::{self, Errors, LeakTestArgs, MaxLeakedBytes};
use containers::Evictions;
use facts::{FnFacts, Owner};
use origin::is_optimizer_impl;
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::{Attribute, Block, ImplItem, Item, ItemFn, LitStr, ReturnType, TraitItem};

mod containers;
mod facts;
mod inputs;
mod instrument;
mod origin;
mod sites;
mod syntax;

/// `#[track]`: instruments a function or every method of an impl block.
pub(crate) fn track(args: TokenStream, input: TokenStream, tracking: bool) -> TokenStream {
    let mut errors = Errors::default();
    if let Err(e) = attr::parse_track_args(args) {
        errors.push(e);
    }
    let item = match syn::parse2::<Item>(input.clone()) {
        Ok(item) => item,
        Err(e) => {
            errors.push(e);
            return with_errors(input, errors);
        }
    };
    let mut item = match item {
        Item::Fn(_) | Item::Impl(_) | Item::Trait(_) => item,
        other => {
            errors.push(wrong_item(
                &other,
                "#[track]",
                "a function, an impl block or a trait",
            ));
            return with_errors(input, errors);
        }
    };
    if errors.has_errors() {
        return with_errors(input, errors);
    }
    if !tracking {
        return input;
    }
    match &mut item {
        Item::Fn(f) => {
            let name = f.sig.ident.to_string();
            instrument_fn(name, &Owner::default(), &f.sig, &mut f.block);
        }
        Item::Impl(imp) => {
            let self_name = type_name(&imp.self_ty);
            let owner = Owner {
                self_type: self_name.clone(),
                // `self.buffer.pop_front()` in one method bounds
                // `self.buffer.push_back(..)` in another.
                shared: Evictions::of_self(imp.items.iter().filter_map(|i| match i {
                    ImplItem::Fn(f) => Some(&f.block),
                    _ => None,
                })),
                optimizer: is_optimizer_impl(imp),
            };
            for impl_item in &mut imp.items {
                if let ImplItem::Fn(f) = impl_item {
                    // The impl's attribute covers its methods: a method's own `#[track]`
                    // would instrument it twice.
                    f.attrs.retain(|a| !is_track_attr(a));
                    let name = match &self_name {
                        Some(ty) => format!("{ty}::{}", f.sig.ident),
                        None => f.sig.ident.to_string(),
                    };
                    instrument_fn(name, &owner, &f.sig, &mut f.block);
                }
            }
        }
        // A trait's default methods (the others have no body).
        Item::Trait(tr) => {
            let trait_name = tr.ident.to_string();
            let owner = Owner {
                shared: Evictions::of_self(tr.items.iter().filter_map(|i| match i {
                    TraitItem::Fn(f) => f.default.as_ref(),
                    _ => None,
                })),
                ..Owner::default()
            };
            for trait_item in &mut tr.items {
                if let TraitItem::Fn(f) = trait_item {
                    f.attrs.retain(|a| !is_track_attr(a));
                    if let Some(block) = &mut f.default {
                        let name = format!("{trait_name}::{}", f.sig.ident);
                        instrument_fn(name, &owner, &f.sig, block);
                    }
                }
            }
        }
        _ => unreachable!("checked above"),
    }
    item.into_token_stream()
}

/// `#[leak_test]`: a `#[test]` whose tracked body runs under its own leak session.
pub(crate) fn leak_test(args: TokenStream, input: TokenStream, tracking: bool) -> TokenStream {
    let mut errors = Errors::default();
    let options = LeakTestArgs::parse(args, &mut errors);
    let size = match &options.max_leaked_bytes {
        MaxLeakedBytes::Text(text) => Some(text),
        MaxLeakedBytes::Bytes(_) => None,
    };
    let func = match syn::parse2::<Item>(input.clone()) {
        Ok(Item::Fn(func)) => Ok(func),
        Ok(other) => Err(wrong_item(&other, "#[leak_test]", "a function")),
        Err(e) => Err(e),
    };
    let mut func = match func {
        Ok(func) => func,
        Err(e) => {
            errors.push(e);
            let item = with_errors(input, errors);
            // The size's error comes in the same compile as the others.
            let check = size.map(|text| {
                let bytes = size_in_bytes(text);
                quote!(const _: u64 = #bytes;)
            });
            return quote!(#item #check);
        }
    };
    // A size text is checked, and its bytes kept, in a `static` beside the function, not
    // in it: a `#[test]` function is compiled in test builds only, and a bad size is an
    // error in every build (with the other errors, with tracking or without).
    let (max, beside) = match &options.max_leaked_bytes {
        MaxLeakedBytes::Bytes(n) => (quote!(#n), None),
        MaxLeakedBytes::Text(text) => {
            let name = format_ident!("__TL_MAX_LEAKED_BYTES_{}", func.sig.ident.unraw());
            let bytes = size_in_bytes(text);
            let item = quote! {
                #[allow(dead_code, non_upper_case_globals)]
                static #name: u64 = #bytes;
            };
            (quote!(#name), Some(item))
        }
    };
    check_test_fn(&func, &mut errors);
    if let Err(e) = errors.finish() {
        let err = e.into_compile_error();
        // The function is not a test now: keep it (so the rest of the file still checks)
        // without a dead-code warning on top of the error.
        return quote!(#[allow(dead_code)] #func #err #beside);
    }
    if !tracking {
        return quote!(#[::core::prelude::v1::test] #func #beside);
    }
    let name = func.sig.ident.to_string();
    instrument_fn(name.clone(), &Owner::default(), &func.sig, &mut func.block);
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let ret = match &sig.output {
        ReturnType::Default => quote!(),
        ReturnType::Type(arrow, ty) => quote!(#arrow #ty),
    };
    let allow = &options.allow;
    let opt = |v: Option<u64>| match v {
        Some(n) => quote!(::core::option::Option::Some(#n)),
        None => quote!(::core::option::Option::None),
    };
    let (warmup, window) = (opt(options.warmup), opt(options.window));
    quote! {
        #[::core::prelude::v1::test]
        #(#attrs)*
        #vis #sig {
            ::tensor_lifetime::__private::run_leak_test(
                #name,
                ::tensor_lifetime::__private::LeakTestOptions {
                    allow: &[#(#allow),*],
                    max_leaked_bytes: #max,
                    warmup: #warmup,
                    window: #window,
                },
                move || #ret #block,
            )
        }
        #beside
    }
}

/// The bytes a size text (`"1 MiB"`) says, for a constant's initializer: the one size
/// parser (`tensor_lifetime_report::size::parse_size_const`), evaluated by the compiler,
/// and spanned at the text, so that a bad size is a compile error there with the
/// parser's message.
fn size_in_bytes(text: &LitStr) -> TokenStream {
    quote_spanned! {text.span()=>
        match ::tensor_lifetime::__private::parse_size_const(#text) {
            ::core::result::Result::Ok(__tl_bytes) => __tl_bytes,
            ::core::result::Result::Err(__tl_error) => ::core::panic!("{}", __tl_error.message()),
        }
    }
}

/// A leak test is called by the test harness: no arguments, no generics, not `async`.
fn check_test_fn(func: &ItemFn, errors: &mut Errors) {
    let sig = &func.sig;
    if let Some(asyncness) = &sig.asyncness {
        errors.push(syn::Error::new_spanned(
            asyncness,
            "`#[leak_test]` cannot be used on an async fn; call `tensor_lifetime::check_leaks` inside your runtime's test instead",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            "a `#[leak_test]` function cannot be generic",
        ));
    }
    if !sig.inputs.is_empty() {
        errors.push(syn::Error::new_spanned(
            &sig.inputs,
            "a `#[leak_test]` function takes no arguments",
        ));
    }
    for attr in &func.attrs {
        if attr.path().is_ident("test") {
            errors.push(syn::Error::new_spanned(
                attr,
                "`#[leak_test]` already makes this function a test: remove `#[test]`",
            ));
        }
    }
}

fn with_errors(input: TokenStream, errors: Errors) -> TokenStream {
    match errors.finish() {
        Ok(()) => input,
        Err(e) => {
            let err = e.into_compile_error();
            quote!(#input #err)
        }
    }
}

/// The error for an attribute on the wrong kind of item, spanned at its keyword and name.
fn wrong_item(item: &Item, attribute: &str, expected: &str) -> syn::Error {
    fn pair(a: &impl ToTokens, b: &impl ToTokens) -> TokenStream {
        quote!(#a #b)
    }
    let (what, span): (&str, TokenStream) = match item {
        Item::Struct(i) => ("a struct", pair(&i.struct_token, &i.ident)),
        Item::Enum(i) => ("an enum", pair(&i.enum_token, &i.ident)),
        Item::Union(i) => ("a union", pair(&i.union_token, &i.ident)),
        Item::Trait(i) => ("a trait", pair(&i.trait_token, &i.ident)),
        Item::Mod(i) => ("a module", pair(&i.mod_token, &i.ident)),
        Item::Const(i) => ("a const", pair(&i.const_token, &i.ident)),
        Item::Static(i) => ("a static", pair(&i.static_token, &i.ident)),
        Item::Type(i) => ("a type alias", pair(&i.type_token, &i.ident)),
        Item::Use(i) => ("a use declaration", i.to_token_stream()),
        Item::Impl(i) => ("an impl block", pair(&i.impl_token, &i.self_ty)),
        // syn keeps `fn f();` (a trait method's signature) as verbatim tokens.
        Item::Verbatim(tokens) if syn::parse2::<syn::TraitItemFn>(tokens.clone()).is_ok() => {
            ("a function without a body", tokens.clone())
        }
        other => ("this item", other.to_token_stream()),
    };
    syn::Error::new_spanned(
        span,
        format!("`{attribute}` applies to {expected}, not to {what}"),
    )
}

fn is_track_attr(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "track")
}

/// The last path segment of an impl's self type (`Trainer` for `Trainer<B>`).
fn type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        syn::Type::Group(g) => type_name(&g.elem),
        syn::Type::Paren(p) => type_name(&p.elem),
        _ => None,
    }
}

/// Instruments one function body in place (nothing for a `const fn`: probes are not
/// `const`); `owner` is what the impl or trait around it says.
fn instrument_fn(function: String, owner: &Owner, sig: &syn::Signature, block: &mut Block) {
    if sig.constness.is_some() {
        return;
    }
    let facts = FnFacts::new(function, owner, sig, block);
    instrument::instrument(&facts, sig, block);
}

#[cfg(test)]
mod tests;
