//! Code generation: the rewrite of a function body into one that calls the probes of
//! `::tensor_lifetime::__private`.
//!
//! What is rewritten (everything else is left as written):
//!
//! | user code | becomes |
//! |---|---|
//! | `let PAT = EXPR;` (also `let ... else`) | the same `let`, then `tag(&ident, SITE)` per identifier of `PAT` |
//! | `place = EXPR` | `place = tagged(EXPR, SITE)` (the value is tagged on its way in) |
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
//! Not rewritten: nested items (they are not part of the annotated code), `const`
//! contexts and `const fn`s, macro invocations (their tokens are not Rust syntax to us),
//! and in `async` code the loops that `.await` (a loop scope is a thread-local guard and
//! must not be held across a suspension point).

use crate::attr::{self, Errors, LeakTestArgs};
use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use std::collections::BTreeMap;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::{self, VisitMut};
use syn::{
    parse_quote, Attribute, BinOp, Block, Expr, ExprMethodCall, ImplItem, Item, ItemFn, Pat,
    ReturnType, Stmt, TraitItem,
};

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
            instrument_fn(name, None, &Evictions::default(), &f.sig, &mut f.block);
        }
        Item::Impl(imp) => {
            let self_name = type_name(&imp.self_ty);
            // `self.buffer.pop_front()` in one method bounds `self.buffer.push_back(..)`
            // in another.
            let shared = Evictions::of_self(imp.items.iter().filter_map(|i| match i {
                ImplItem::Fn(f) => Some(&f.block),
                _ => None,
            }));
            for impl_item in &mut imp.items {
                if let ImplItem::Fn(f) = impl_item {
                    // The impl's attribute covers its methods: a method's own `#[track]`
                    // would instrument it twice.
                    f.attrs.retain(|a| !is_track_attr(a));
                    let name = match &self_name {
                        Some(ty) => format!("{ty}::{}", f.sig.ident),
                        None => f.sig.ident.to_string(),
                    };
                    instrument_fn(name, self_name.clone(), &shared, &f.sig, &mut f.block);
                }
            }
        }
        // A trait's default methods (the others have no body).
        Item::Trait(tr) => {
            let trait_name = tr.ident.to_string();
            let shared = Evictions::of_self(tr.items.iter().filter_map(|i| match i {
                TraitItem::Fn(f) => f.default.as_ref(),
                _ => None,
            }));
            for trait_item in &mut tr.items {
                if let TraitItem::Fn(f) = trait_item {
                    f.attrs.retain(|a| !is_track_attr(a));
                    if let Some(block) = &mut f.default {
                        let name = format!("{trait_name}::{}", f.sig.ident);
                        instrument_fn(name, None, &shared, &f.sig, block);
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
    let options = match LeakTestArgs::parse(args) {
        Ok(options) => options,
        Err(e) => {
            errors.push(e);
            LeakTestArgs::default()
        }
    };
    let mut func = match syn::parse2::<Item>(input.clone()) {
        Ok(Item::Fn(func)) => func,
        Ok(other) => {
            errors.push(wrong_item(&other, "#[leak_test]", "a function"));
            return with_errors(input, errors);
        }
        Err(e) => {
            errors.push(e);
            return with_errors(input, errors);
        }
    };
    check_test_fn(&func, &mut errors);
    if let Err(e) = errors.finish() {
        let err = e.into_compile_error();
        // The function is not a test now: keep it (so the rest of the file still checks)
        // without a dead-code warning on top of the error.
        return quote!(#[allow(dead_code)] #func #err);
    }
    if !tracking {
        return quote!(#[::core::prelude::v1::test] #func);
    }
    let name = func.sig.ident.to_string();
    instrument_fn(
        name.clone(),
        None,
        &Evictions::default(),
        &func.sig,
        &mut func.block,
    );
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
    let max = options.max_leaked_bytes;
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
/// `const`). `self_type` names `Self` in struct literals; `shared` are the evictions of
/// `self.` containers seen in the other methods of the same impl or trait.
fn instrument_fn(
    function: String,
    self_type: Option<String>,
    shared: &Evictions,
    sig: &syn::Signature,
    block: &mut Block,
) {
    if sig.constness.is_some() {
        return;
    }
    let mut evictions = Evictions::of(block);
    evictions.merge(shared);
    let mut v = Instrument {
        function,
        in_async: sig.asyncness.is_some(),
        self_type,
        evictions,
        returned: returned_locals(block),
    };
    v.visit_block_mut(block);
}

#[derive(Clone, Copy)]
enum Kind {
    Binding,
    Assignment,
    Store,
    Loop,
}

impl Kind {
    fn ident(self) -> proc_macro2::Ident {
        let name = match self {
            Kind::Binding => "Binding",
            Kind::Assignment => "Assignment",
            Kind::Store => "Store",
            Kind::Loop => "Loop",
        };
        proc_macro2::Ident::new(name, Span::call_site())
    }
}

/// The body rewriter (see the module docs).
struct Instrument {
    /// The enclosing function's name, for every site in it (closures included).
    function: String,
    /// Inside an `async fn` or `async` block (loops that await get no scope).
    in_async: bool,
    /// The impl's type, for `Self { .. }` in struct-literal labels.
    self_type: Option<String>,
    /// Containers the code trims, by receiver text: their stores are bounded.
    evictions: Evictions,
    /// Locals the function returns (`Ok(heads)`): a loop filling one builds a value.
    returned: Vec<String>,
}

/// A generated local, invisible to user code (`Span::mixed_site`).
fn local(name: &str) -> proc_macro2::Ident {
    proc_macro2::Ident::new(name, Span::mixed_site())
}

impl Instrument {
    /// `&'static Site` for the user's token at `span`: a `static` in a block, with
    /// `file!()`/`line!()`/`column!()` spanned at that token so they name its place.
    fn site(&self, span: Span, label: &str, kind: Kind) -> TokenStream {
        self.site_with(span, label, kind, TokenStream::new())
    }

    /// A site with a builder call appended (`.evicted_at(..)`, `.fills(..)`).
    fn site_with(&self, span: Span, label: &str, kind: Kind, extra: TokenStream) -> TokenStream {
        let function = &self.function;
        let kind = kind.ident();
        let file = quote_spanned!(span=> ::core::file!());
        let line = quote_spanned!(span=> ::core::line!());
        let column = quote_spanned!(span=> ::core::column!());
        let module = quote_spanned!(span=> ::core::module_path!());
        quote! {{
            static __TL_SITE: ::tensor_lifetime::__private::Site =
                ::tensor_lifetime::__private::Site::new(
                    #file, #line, #column, #module, #function, #label,
                    ::tensor_lifetime::__private::SiteKind::#kind,
                ) #extra;
            &__TL_SITE
        }}
    }

    /// A store site into `label`; bounded (`.evicted_at(line, call)`) when the code also
    /// trims that container.
    fn store_site(&self, span: Span, label: &str) -> TokenStream {
        match self.evictions.0.get(label) {
            Some((at, call)) => {
                let line = quote_spanned!(*at=> ::core::line!());
                self.site_with(span, label, Kind::Store, quote!(.evicted_at(#line, #call)))
            }
            None => self.site(span, label, Kind::Store),
        }
    }

    /// `tag(&ident, SITE);` for each identifier bound by `pat`.
    fn binding_tags(&self, pat: &Pat, cfgs: &[&Attribute]) -> Vec<Stmt> {
        let mut idents = Vec::new();
        pat_idents(pat, &mut idents);
        idents
            .into_iter()
            .map(|ident| {
                let label = ident.to_string();
                let label = label.strip_prefix("r#").unwrap_or(&label);
                let site = self.site(ident.span(), label, Kind::Binding);
                parse_quote! {
                    #(#cfgs)*
                    ::tensor_lifetime::__private::tag(&#ident, #site);
                }
            })
            .collect()
    }

    /// `place = value`, `place op= value`.
    fn assignment(&mut self, expr: &mut Expr) {
        match expr {
            Expr::Assign(a) => {
                if diverges(&a.right) {
                    return;
                }
                if let Some(receiver) = store_place(&a.left) {
                    let site = self.store_site(a.left.span(), &compact(&receiver));
                    let right = &a.right;
                    a.right = parse_quote!(::tensor_lifetime::__private::stored(#right, #site));
                    return;
                }
                if matches!(&*a.left, Expr::Tuple(_) | Expr::Array(_)) {
                    // Destructuring assignment: tag each simple place afterwards.
                    let mut places = Vec::new();
                    destructured_places(&a.left, &mut places);
                    if places.is_empty() {
                        return;
                    }
                    let tags: Vec<TokenStream> = places
                        .iter()
                        .map(|p| {
                            let site = self.site(p.span(), &compact(p), Kind::Assignment);
                            quote!(::tensor_lifetime::__private::tag(&#p, #site);)
                        })
                        .collect();
                    let assign = expr.clone();
                    *expr = parse_quote!({ #assign; #(#tags)* });
                    return;
                }
                let site = self.site(a.left.span(), &compact(&a.left), Kind::Assignment);
                let right = &a.right;
                a.right = parse_quote!(::tensor_lifetime::__private::tagged(#right, #site));
            }
            Expr::Binary(b) if is_assign_op(&b.op) && is_pure_place(&b.left) => {
                let place = b.left.clone();
                let site = self.site(place.span(), &compact(&place), Kind::Assignment);
                let assign = expr.clone();
                *expr = parse_quote!({
                    #assign;
                    ::tensor_lifetime::__private::tag(&#place, #site);
                });
            }
            _ => {}
        }
    }

    /// Stores into containers through their methods.
    fn method_store(&mut self, expr: &mut Expr) {
        let Expr::MethodCall(call) = expr else {
            return;
        };
        let method = call.method.to_string();
        let value_arg = match (method.as_str(), call.args.len()) {
            ("push" | "push_back" | "push_front" | "insert", 1) => Some(0),
            ("insert", 2) => Some(1),
            ("or_insert", 1) => match &*call.receiver {
                Expr::MethodCall(entry) if entry.method == "entry" => Some(0),
                _ => None,
            },
            ("extend" | "append", 1) => {
                if is_pure_place(&call.receiver) {
                    let receiver = call.receiver.clone();
                    let label = compact(&holder(&receiver));
                    let site = self.store_site(call.method.span(), &label);
                    let result = local("__tl_result");
                    *expr = parse_quote!({
                        #[allow(clippy::let_unit_value)]
                        let #result = #expr;
                        ::tensor_lifetime::__private::store(&#receiver, #site);
                        #result
                    });
                }
                return;
            }
            _ => None,
        };
        let Some(index) = value_arg else {
            return;
        };
        let receiver: &Expr = match (&*call.receiver, method.as_str()) {
            (Expr::MethodCall(entry), "or_insert") => &entry.receiver,
            (receiver, _) => receiver,
        };
        let label = compact(&holder(receiver));
        let site = self.store_site(call.method.span(), &label);
        let arg = &mut call.args[index];
        if diverges(arg) {
            return;
        }
        // The tensors inside a value of a user type (`Transition::new(state, ..)`,
        // `Box::new(Head { tril })`) are stored too: named ones are probed by reference
        // before the value is built (they are moved into it), new ones in place.
        let site_var = local("__tl_site");
        let mut before = Vec::new();
        if inner_stores(arg, &site_var, &mut before) || !before.is_empty() {
            *arg = parse_quote!({
                let #site_var: &'static ::tensor_lifetime::__private::Site = #site;
                #(::tensor_lifetime::__private::store(&#before, #site_var);)*
                ::tensor_lifetime::__private::stored(#arg, #site_var)
            });
        } else {
            *arg = parse_quote!(::tensor_lifetime::__private::stored(#arg, #site));
        }
    }

    /// `Type { field: EXPR }`: the field's value is tagged at the field (label
    /// `Type.field`), so a tensor that only ever lives in a struct is seen. Named values
    /// (`Head { tril }`) were tagged where they were bound.
    fn struct_fields(&mut self, expr: &mut Expr) {
        let Expr::Struct(st) = expr else {
            return;
        };
        let ty = st
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default();
        let ty = match (ty.as_str(), &self.self_type) {
            ("Self", Some(own)) => own.clone(),
            _ => ty,
        };
        for field in st.fields.iter_mut() {
            if !worth_tagging(&field.expr) {
                continue;
            }
            let member = match &field.member {
                syn::Member::Named(ident) => ident.to_string(),
                syn::Member::Unnamed(index) => index.index.to_string(),
            };
            let label = format!("{ty}.{member}");
            let site = self.site(field.expr.span(), &label, Kind::Binding);
            let value = &field.expr;
            field.expr = parse_quote!(::tensor_lifetime::__private::tagged(#value, #site));
            field.colon_token.get_or_insert_with(Default::default);
        }
    }

    /// `for`, `while`, `loop`: a loop scope around, an iteration guard inside.
    fn instrument_loop(&mut self, expr: &mut Expr) {
        // A labeled loop (`'epoch`, `'step`) is named as a phase of a run: never taken
        // for a construction loop.
        let labeled = match &*expr {
            Expr::ForLoop(f) => f.label.is_some(),
            Expr::While(w) => w.label.is_some(),
            Expr::Loop(l) => l.label.is_some(),
            _ => false,
        };
        let fills = fills_returned(expr, &self.returned).filter(|_| !labeled);
        visit_mut::visit_expr_mut(self, expr);
        if self.in_async && contains_await(expr) {
            return;
        }
        let scope = local("__tl_loop");
        let iter = local("__tl_iter");
        let (label, keyword_span) = match &*expr {
            Expr::ForLoop(f) => (&f.label, f.for_token.span),
            Expr::While(w) => (&w.label, w.while_token.span),
            Expr::Loop(l) => (&l.label, l.loop_token.span),
            _ => return,
        };
        let (name, span) = match label {
            Some(l) => (l.name.to_string(), l.name.apostrophe),
            None => (String::new(), keyword_span),
        };
        let site = match fills {
            Some(holder) => self.site_with(span, &name, Kind::Loop, quote!(.fills(#holder))),
            None => self.site(span, &name, Kind::Loop),
        };
        // A label now also names the loop scope: it is used even if no `break` names it.
        let allow = label.as_ref().map(|_| quote!(#[allow(unused_labels)]));
        let enter = quote!(let #scope = ::tensor_lifetime::__private::enter_loop(#site););
        let begin = quote!(let #iter = #scope.iteration(););
        *expr = match &*expr {
            Expr::ForLoop(f) => {
                let (attrs, label, pat, iterable, body) =
                    (&f.attrs, &f.label, &f.pat, &f.expr, &f.body);
                let item = local("__tl_item");
                let value = local("__tl_value");
                let tags = self.binding_tags(pat, &[]);
                parse_quote!({
                    #enter
                    #(#attrs)* #allow #label for #item in #iterable {
                        #begin
                        let #value = #item;
                        let #pat = #value;
                        #(#tags)*
                        #body;
                    }
                })
            }
            Expr::While(w) => {
                let (attrs, label, cond, body) = (&w.attrs, &w.label, &w.cond, &w.body);
                let mut tags = Vec::new();
                let mut pats = Vec::new();
                let_patterns(cond, &mut pats);
                for pat in pats {
                    tags.extend(self.binding_tags(pat, &[]));
                }
                parse_quote!({
                    #enter
                    #(#attrs)* #allow #label while #cond {
                        #begin
                        #(#tags)*
                        #body;
                    }
                })
            }
            Expr::Loop(l) => {
                let (attrs, label, body) = (&l.attrs, &l.label, &l.body);
                parse_quote!({
                    #enter
                    #(#attrs)* #allow #label loop {
                        #begin
                        #body;
                    }
                })
            }
            _ => return,
        };
    }
}

impl VisitMut for Instrument {
    fn visit_block_mut(&mut self, block: &mut Block) {
        let stmts = std::mem::take(&mut block.stmts);
        for mut stmt in stmts {
            match &mut stmt {
                Stmt::Local(local) => {
                    if let Some(init) = &mut local.init {
                        self.visit_expr_mut(&mut init.expr);
                        if let Some((_, diverge)) = &mut init.diverge {
                            self.visit_expr_mut(diverge);
                        }
                        // A `#[cfg]`'d-out binding has nothing to tag.
                        let cfgs: Vec<&Attribute> = local
                            .attrs
                            .iter()
                            .filter(|a| a.path().is_ident("cfg"))
                            .collect();
                        let tags = self.binding_tags(&local.pat, &cfgs);
                        block.stmts.push(stmt);
                        block.stmts.extend(tags);
                        continue;
                    }
                }
                Stmt::Expr(expr, _) => self.visit_expr_mut(expr),
                Stmt::Item(_) | Stmt::Macro(_) => {}
            }
            block.stmts.push(stmt);
        }
    }

    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        match expr {
            Expr::ForLoop(_) | Expr::While(_) | Expr::Loop(_) => self.instrument_loop(expr),
            Expr::Closure(c) => {
                let outer = std::mem::replace(&mut self.in_async, c.asyncness.is_some());
                self.visit_expr_mut(&mut c.body);
                self.in_async = outer;
            }
            Expr::Async(a) => {
                let outer = std::mem::replace(&mut self.in_async, true);
                self.visit_block_mut(&mut a.block);
                self.in_async = outer;
            }
            // `const { .. }` is evaluated at compile time.
            Expr::Const(_) => {}
            Expr::Assign(a) => {
                self.visit_expr_mut(&mut a.right);
                self.assignment(expr);
            }
            Expr::Binary(b) if is_assign_op(&b.op) => {
                self.visit_expr_mut(&mut b.right);
                self.assignment(expr);
            }
            Expr::MethodCall(call) => {
                visit_mut::visit_expr_method_call_mut(self, call);
                self.method_store(expr);
            }
            Expr::Struct(st) => {
                visit_mut::visit_expr_struct_mut(self, st);
                self.struct_fields(expr);
            }
            // `if let P = e { .. }`: P's bindings are tagged at the start of the branch.
            Expr::If(i) => {
                visit_mut::visit_expr_if_mut(self, i);
                let mut pats = Vec::new();
                let_patterns(&i.cond, &mut pats);
                let tags: Vec<Stmt> = pats
                    .into_iter()
                    .flat_map(|p| self.binding_tags(p, &[]))
                    .collect();
                i.then_branch.stmts.splice(0..0, tags);
            }
            // A `match` arm's bindings are tagged before its body.
            Expr::Match(m) => {
                visit_mut::visit_expr_match_mut(self, m);
                for arm in &mut m.arms {
                    let tags = self.binding_tags(&arm.pat, &[]);
                    if tags.is_empty() || diverges(&arm.body) {
                        continue;
                    }
                    let body = &arm.body;
                    arm.body = Box::new(parse_quote!({ #(#tags)* #body }));
                    arm.comma.get_or_insert_with(Default::default);
                }
            }
            Expr::Repeat(r) => self.visit_expr_mut(&mut r.expr),
            _ => visit_mut::visit_expr_mut(self, expr),
        }
    }

    // Nested items are not part of the annotated code.
    fn visit_item_mut(&mut self, _: &mut Item) {}
    // Patterns and types hold no runtime code (only constants).
    fn visit_pat_mut(&mut self, _: &mut Pat) {}
    fn visit_type_mut(&mut self, _: &mut syn::Type) {}
    fn visit_macro_mut(&mut self, _: &mut syn::Macro) {}
}

/// Methods that take elements out of a container: a container the code trims with one
/// of them is bounded.
const EVICTING: &[&str] = &[
    "pop_front",
    "pop_back",
    "pop",
    "pop_first",
    "pop_last",
    "truncate",
    "remove",
    "remove_entry",
    "swap_remove",
    "drain",
    "clear",
    "retain",
    "retain_mut",
    "split_off",
];

/// Containers that tracked code trims, by receiver text (`self.buffer`, as store labels
/// spell it): the first trimming call's span (its line is named) and what it is.
#[derive(Default, Clone)]
struct Evictions(BTreeMap<String, (Span, String)>);

impl Evictions {
    /// The trims in one body.
    fn of(block: &Block) -> Evictions {
        struct Finder(Evictions);
        impl<'a> Visit<'a> for Finder {
            fn visit_expr_method_call(&mut self, call: &'a ExprMethodCall) {
                let method = call.method.to_string();
                if EVICTING.contains(&method.as_str()) {
                    self.0
                        .note(compact(&holder(&call.receiver)), call.method.span(), method);
                }
                syn::visit::visit_expr_method_call(self, call);
            }
            fn visit_expr_assign(&mut self, a: &'a syn::ExprAssign) {
                // `self.buffer = VecDeque::new()`: a new container replaces the old.
                if is_pure_place(&a.left) && is_new_container(&a.right) {
                    let call = format!("= {}", compact(&a.right));
                    self.0.note(compact(&a.left), a.left.span(), call);
                }
                syn::visit::visit_expr_assign(self, a);
            }
            fn visit_expr_call(&mut self, c: &'a syn::ExprCall) {
                // `mem::take(&mut self.buffer)`, `mem::replace(&mut v, ..)`.
                if let (Expr::Path(p), Some(Expr::Reference(r))) = (&*c.func, c.args.first()) {
                    let name = p.path.segments.last().map(|s| s.ident.to_string());
                    if r.mutability.is_some()
                        && matches!(name.as_deref(), Some("take" | "replace"))
                        && is_pure_place(&r.expr)
                    {
                        let call = compact(&c.func);
                        self.0.note(compact(&r.expr), c.func.span(), call);
                    }
                }
                syn::visit::visit_expr_call(self, c);
            }
            fn visit_item(&mut self, _: &'a Item) {}
        }
        let mut finder = Finder(Evictions::default());
        finder.visit_block(block);
        finder.0
    }

    /// The trims of `self.` containers in the methods of one impl or trait.
    fn of_self<'a>(blocks: impl Iterator<Item = &'a Block>) -> Evictions {
        let mut all = Evictions::default();
        for block in blocks {
            let found = Evictions::of(block);
            for (label, at) in found.0 {
                if label.starts_with("self.") {
                    all.0.entry(label).or_insert(at);
                }
            }
        }
        all
    }

    fn note(&mut self, label: String, span: Span, call: String) {
        self.0.entry(label).or_insert((span, call));
    }

    fn merge(&mut self, other: &Evictions) {
        for (label, at) in &other.0 {
            self.0.entry(label.clone()).or_insert_with(|| at.clone());
        }
    }
}

/// `Vec::new()`, `VecDeque::with_capacity(n)`, `Default::default()`, `vec![]`.
fn is_new_container(expr: &Expr) -> bool {
    match expr {
        Expr::Call(c) => match &*c.func {
            Expr::Path(p) => {
                p.path.segments.len() > 1
                    && p.path.segments.last().is_some_and(|s| {
                        ["new", "with_capacity", "default"]
                            .iter()
                            .any(|n| s.ident == n)
                    })
            }
            _ => false,
        },
        Expr::Macro(m) => m.mac.path.is_ident("vec") && m.mac.tokens.is_empty(),
        _ => false,
    }
}

/// The locals a function returns, at value positions of its tail expression and its
/// `return`s: `heads` in `Ok(heads)`, `Self { layers }`, `(heads, n)`, `Model::new(heads)`.
fn returned_locals(block: &Block) -> Vec<String> {
    fn names(expr: &Expr, out: &mut Vec<String>) {
        match expr {
            Expr::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
                let name = p.path.segments[0].ident.to_string();
                if name != "self" && !name.starts_with(|c: char| c.is_uppercase()) {
                    out.push(name);
                }
            }
            Expr::Call(c) => c.args.iter().for_each(|a| names(a, out)),
            Expr::Struct(s) => s.fields.iter().for_each(|f| names(&f.expr, out)),
            Expr::Tuple(t) => t.elems.iter().for_each(|e| names(e, out)),
            Expr::Paren(p) => names(&p.expr, out),
            Expr::Group(g) => names(&g.expr, out),
            Expr::Return(r) => r.expr.iter().for_each(|e| names(e, out)),
            _ => {}
        }
    }
    struct Returns<'b>(&'b mut Vec<String>);
    impl<'a> Visit<'a> for Returns<'_> {
        fn visit_expr_return(&mut self, r: &'a syn::ExprReturn) {
            if let Some(e) = &r.expr {
                names(e, self.0);
            }
        }
        fn visit_expr_closure(&mut self, _: &'a syn::ExprClosure) {}
        fn visit_expr_async(&mut self, _: &'a syn::ExprAsync) {}
        fn visit_item(&mut self, _: &'a Item) {}
    }
    let mut out = Vec::new();
    if let Some(Stmt::Expr(tail, None)) = block.stmts.last() {
        names(tail, &mut out);
    }
    Returns(&mut out).visit_block(block);
    out
}

/// The returned local a loop stores into (`heads.push(..)` with `heads` returned), if any.
fn fills_returned(expr: &Expr, returned: &[String]) -> Option<String> {
    struct Finder<'b> {
        returned: &'b [String],
        found: Option<String>,
    }
    impl<'a> Visit<'a> for Finder<'_> {
        fn visit_expr_method_call(&mut self, call: &'a ExprMethodCall) {
            let storing = [
                "push",
                "push_back",
                "push_front",
                "insert",
                "extend",
                "append",
            ];
            if self.found.is_none() && storing.iter().any(|m| call.method == m) {
                let receiver = compact(&holder(&call.receiver));
                if self.returned.contains(&receiver) {
                    self.found = Some(receiver);
                }
            }
            syn::visit::visit_expr_method_call(self, call);
        }
        fn visit_item(&mut self, _: &'a Item) {}
    }
    if returned.is_empty() {
        return None;
    }
    let mut finder = Finder {
        returned,
        found: None,
    };
    finder.visit_expr(expr);
    finder.found
}

/// In a stored value of a user type, the tensors inside: named places (`state` in
/// `Transition::new(state, a)`, `tril` in `Head { tril }`) go to `before` (probed by
/// reference before the value is built), computed values (`Tensor::new(..)?`, a field
/// already tagged) are wrapped in place in `stored(.., site)`. Returns whether it wrapped
/// any.
fn inner_stores(expr: &mut Expr, site: &proc_macro2::Ident, before: &mut Vec<Expr>) -> bool {
    fn value(e: &mut Expr, site: &proc_macro2::Ident, before: &mut Vec<Expr>) -> bool {
        match e {
            Expr::Path(_) | Expr::Field(_) if is_pure_place(e) && !is_self(e) => {
                before.push(e.clone());
                false
            }
            Expr::Reference(r) if is_pure_place(&r.expr) && !is_self(&r.expr) => {
                before.push((*r.expr).clone());
                false
            }
            Expr::Call(c) if is_probe_call(c) => wrap(e, site),
            Expr::Call(_)
            | Expr::Struct(_)
            | Expr::Tuple(_)
            | Expr::Array(_)
            | Expr::Paren(_)
            | Expr::Group(_) => inner_stores(e, site, before),
            Expr::Try(_) | Expr::MethodCall(_) => wrap(e, site),
            Expr::Field(_) if !is_place(e) => wrap(e, site),
            _ => false,
        }
    }
    fn wrap(e: &mut Expr, site: &proc_macro2::Ident) -> bool {
        *e = parse_quote!(::tensor_lifetime::__private::stored(#e, #site));
        true
    }
    let mut wrapped = false;
    match expr {
        Expr::Call(c) if !is_probe_call(c) => {
            for a in c.args.iter_mut() {
                wrapped |= value(a, site, before);
            }
        }
        Expr::Struct(s) => {
            for f in s.fields.iter_mut() {
                let shorthand = f.colon_token.is_none();
                wrapped |= value(&mut f.expr, site, before);
                if shorthand && !matches!(f.expr, Expr::Path(_)) {
                    f.colon_token = Some(Default::default());
                }
            }
        }
        Expr::Tuple(t) => {
            for e in t.elems.iter_mut() {
                wrapped |= value(e, site, before);
            }
        }
        Expr::Array(a) => {
            for e in a.elems.iter_mut() {
                wrapped |= value(e, site, before);
            }
        }
        Expr::Paren(p) => wrapped |= inner_stores(&mut p.expr, site, before),
        Expr::Group(g) => wrapped |= inner_stores(&mut g.expr, site, before),
        _ => {}
    }
    wrapped
}

/// A place expression (a local, `self`, fields, indexing and dereferences of those).
fn is_place(e: &Expr) -> bool {
    match e {
        Expr::Path(_) => true,
        Expr::Field(f) => is_place(&f.base),
        Expr::Index(i) => is_place(&i.expr),
        Expr::Paren(p) => is_place(&p.expr),
        Expr::Group(g) => is_place(&g.expr),
        Expr::Unary(u) => matches!(u.op, syn::UnOp::Deref(_)),
        _ => false,
    }
}

fn is_self(e: &Expr) -> bool {
    matches!(e, Expr::Path(p) if p.path.is_ident("self"))
}

/// A call of one of our own probes (`::tensor_lifetime::__private::tagged(..)`).
fn is_probe_call(c: &syn::ExprCall) -> bool {
    matches!(&*c.func, Expr::Path(p)
        if p.path.leading_colon.is_some()
            && p.path.segments.first().is_some_and(|s| s.ident == "tensor_lifetime"))
}

/// A struct field's value that may hold a tensor not tagged before: not a named place
/// (tagged where it was bound), a literal, or a closure (whose signature a generic
/// wrapper would stop inferring from the field's type).
fn worth_tagging(expr: &Expr) -> bool {
    match expr {
        // Places: moving out of one through a generic call would stop an implicit
        // reborrow of a `&mut` there. A field of a temporary (`batch()?.0`) is a value.
        Expr::Field(_) | Expr::Index(_) => !is_place(expr),
        Expr::Path(_) | Expr::Unary(_) => false,
        Expr::Lit(_) | Expr::Closure(_) | Expr::Range(_) => false,
        Expr::Reference(r) => worth_tagging(&r.expr),
        Expr::Call(c) => !c.args.iter().any(|a| matches!(a, Expr::Closure(_))),
        Expr::MethodCall(c) => !c.args.iter().any(|a| matches!(a, Expr::Closure(_))),
        e => !diverges(e),
    }
}

/// Identifiers bound by a pattern, in order (`_` and unit-like constants excluded).
fn pat_idents(pat: &Pat, out: &mut Vec<syn::Ident>) {
    match pat {
        Pat::Ident(p) => {
            let name = p.ident.to_string();
            // A bare capitalized name in a pattern is almost always a constant, a unit
            // struct or an enum variant (`None`), not a binding.
            let constant_like = p.by_ref.is_none()
                && p.mutability.is_none()
                && p.subpat.is_none()
                && name.starts_with(|c: char| c.is_uppercase());
            if !constant_like {
                out.push(p.ident.clone());
            }
            if let Some((_, sub)) = &p.subpat {
                pat_idents(sub, out);
            }
        }
        Pat::Tuple(p) => p.elems.iter().for_each(|e| pat_idents(e, out)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|e| pat_idents(e, out)),
        Pat::Struct(p) => p.fields.iter().for_each(|f| pat_idents(&f.pat, out)),
        Pat::Slice(p) => p.elems.iter().for_each(|e| pat_idents(e, out)),
        Pat::Reference(p) => pat_idents(&p.pat, out),
        Pat::Paren(p) => pat_idents(&p.pat, out),
        Pat::Type(p) => pat_idents(&p.pat, out),
        // Every alternative binds the same names.
        Pat::Or(p) => {
            if let Some(first) = p.cases.first() {
                pat_idents(first, out);
            }
        }
        _ => {}
    }
}

/// The patterns of `let` conditions (`while let P = e`, `while let P = e && let Q = f`).
fn let_patterns<'a>(cond: &'a Expr, out: &mut Vec<&'a Pat>) {
    match cond {
        Expr::Let(l) => out.push(&l.pat),
        Expr::Binary(b) if matches!(b.op, BinOp::And(_)) => {
            let_patterns(&b.left, out);
            let_patterns(&b.right, out);
        }
        Expr::Paren(p) => let_patterns(&p.expr, out),
        Expr::Group(g) => let_patterns(&g.expr, out),
        _ => {}
    }
}

fn is_assign_op(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::AddAssign(_)
            | BinOp::SubAssign(_)
            | BinOp::MulAssign(_)
            | BinOp::DivAssign(_)
            | BinOp::RemAssign(_)
            | BinOp::BitXorAssign(_)
            | BinOp::BitAndAssign(_)
            | BinOp::BitOrAssign(_)
            | BinOp::ShlAssign(_)
            | BinOp::ShrAssign(_)
    )
}

/// A place that can be named again without side effects: a local, `self`, fields and
/// dereferences of those, and indexing by a literal or a local.
fn is_pure_place(expr: &Expr) -> bool {
    match expr {
        Expr::Path(p) => {
            p.qself.is_none()
                && p.path.leading_colon.is_none()
                && p.path.segments.len() == 1
                && p.path.segments[0].arguments.is_none()
                // Capitalized: a `static` (naming it again may need `unsafe`).
                && !p.path.segments[0]
                    .ident
                    .to_string()
                    .starts_with(|c: char| c.is_uppercase())
        }
        Expr::Field(f) => is_pure_place(&f.base),
        Expr::Index(i) => {
            let simple_index = match &*i.index {
                Expr::Lit(_) => true,
                index @ Expr::Path(_) => is_pure_place(index),
                _ => false,
            };
            simple_index && is_pure_place(&i.expr)
        }
        Expr::Paren(p) => is_pure_place(&p.expr),
        Expr::Group(g) => is_pure_place(&g.expr),
        Expr::Unary(u) => matches!(u.op, syn::UnOp::Deref(_)) && is_pure_place(&u.expr),
        _ => false,
    }
}

/// For `a.b = v` and `a.b[i] = v`: the container receiving the value (`a.b`).
fn store_place(left: &Expr) -> Option<Expr> {
    match left {
        Expr::Field(_) => Some(left.clone()),
        Expr::Index(i) => Some((*i.expr).clone()),
        Expr::Paren(p) => store_place(&p.expr),
        Expr::Group(g) => store_place(&g.expr),
        _ => None,
    }
}

/// The simple places of a destructuring assignment `(a, b) = ..`.
fn destructured_places(left: &Expr, out: &mut Vec<Expr>) {
    match left {
        Expr::Tuple(t) => t.elems.iter().for_each(|e| destructured_places(e, out)),
        Expr::Array(a) => a.elems.iter().for_each(|e| destructured_places(e, out)),
        Expr::Paren(p) => destructured_places(&p.expr, out),
        e if is_pure_place(e) => out.push(e.clone()),
        _ => {}
    }
}

/// The holder a store names: the receiver without the guards in front of it
/// (`self.cache.lock().unwrap()` is `self.cache`).
fn holder(receiver: &Expr) -> Expr {
    let mut e = receiver;
    while let Expr::MethodCall(ExprMethodCall {
        receiver: inner,
        method,
        ..
    }) = e
    {
        let guard = ["lock", "write", "borrow_mut", "unwrap", "expect", "as_mut"];
        if guard.iter().any(|g| method == g) {
            e = inner;
        } else {
            break;
        }
    }
    e.clone()
}

/// An expression that never produces a value: wrapping it would only add an
/// unreachable-code warning.
fn diverges(expr: &Expr) -> bool {
    match expr {
        Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) => true,
        Expr::Macro(m) => m.mac.path.segments.last().is_some_and(|s| {
            ["panic", "todo", "unimplemented", "unreachable"]
                .iter()
                .any(|n| s.ident == n)
        }),
        _ => false,
    }
}

/// Whether `.await` appears in `expr` outside nested closures and `async` blocks.
fn contains_await(expr: &Expr) -> bool {
    struct Finder(bool);
    impl<'a> Visit<'a> for Finder {
        fn visit_expr_await(&mut self, _: &'a syn::ExprAwait) {
            self.0 = true;
        }
        fn visit_expr_closure(&mut self, _: &'a syn::ExprClosure) {}
        fn visit_expr_async(&mut self, _: &'a syn::ExprAsync) {}
        fn visit_item(&mut self, _: &'a Item) {}
        fn visit_macro(&mut self, mac: &'a syn::Macro) {
            fn has_await(tokens: TokenStream) -> bool {
                tokens.into_iter().any(|tt| match tt {
                    TokenTree::Ident(i) => i == "await",
                    TokenTree::Group(g) => has_await(g.stream()),
                    _ => false,
                })
            }
            self.0 |= has_await(mac.tokens.clone());
        }
    }
    let mut finder = Finder(false);
    finder.visit_expr(expr);
    finder.0
}

/// Source text of an expression without the spaces `to_string` puts between tokens:
/// `self.cache`, `state.best[0]`, `*out`.
fn compact(tokens: &impl ToTokens) -> String {
    fn walk(tokens: TokenStream, out: &mut String) {
        let mut prev_word = false;
        for tt in tokens {
            match tt {
                TokenTree::Group(g) => {
                    let (open, close) = match g.delimiter() {
                        Delimiter::Parenthesis => ("(", ")"),
                        Delimiter::Brace => ("{", "}"),
                        Delimiter::Bracket => ("[", "]"),
                        Delimiter::None => ("", ""),
                    };
                    out.push_str(open);
                    walk(g.stream(), out);
                    out.push_str(close);
                    prev_word = false;
                }
                TokenTree::Ident(_) | TokenTree::Literal(_) => {
                    if prev_word {
                        out.push(' ');
                    }
                    out.push_str(&tt.to_string());
                    prev_word = true;
                }
                TokenTree::Punct(p) => {
                    out.push(p.as_char());
                    if p.as_char() == ',' {
                        out.push(' ');
                    }
                    prev_word = false;
                }
            }
        }
    }
    let mut out = String::new();
    walk(tokens.to_token_stream(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(item: TokenStream) -> String {
        track(TokenStream::new(), item, true).to_string()
    }

    #[test]
    fn off_switch_returns_the_item_unchanged() {
        let item = quote!(
            fn f(v: &mut Vec<u32>) {
                let x = 1;
                for i in 0..3 {
                    v.push(i + x);
                }
            }
        );
        assert_eq!(
            track(TokenStream::new(), item.clone(), false).to_string(),
            item.to_string()
        );
        let test = leak_test(
            TokenStream::new(),
            quote!(
                fn t() {}
            ),
            false,
        )
        .to_string();
        assert_eq!(
            test,
            quote!(
                #[::core::prelude::v1::test]
                fn t() {}
            )
            .to_string()
        );
    }

    #[test]
    fn tags_each_binding_of_a_pattern() {
        let out = expand(quote!(
            fn f() {
                let (a, Foo { b, .. }, _, None) = make();
            }
        ));
        assert!(out.contains("tag (& a"), "{out}");
        assert!(out.contains("tag (& b"), "{out}");
        assert!(!out.contains("tag (& None"), "{out}");
        assert!(!out.contains("tag (& _"), "{out}");
    }

    #[test]
    fn store_labels_name_the_receiver() {
        let out = expand(quote!(
            fn f(&mut self, t: Tensor) {
                self.cache.lock().unwrap().push(t);
                self.best = Some(t);
            }
        ));
        assert!(out.contains("\"self.cache\""), "{out}");
        assert!(out.contains("\"self.best\""), "{out}");
        assert!(out.contains("stored"), "{out}");
    }

    #[test]
    fn loops_get_a_scope_and_keep_their_label() {
        let out = expand(quote!(
            fn f() {
                'epoch: for e in 0..3 {
                    continue 'epoch;
                }
            }
        ));
        assert!(out.contains("enter_loop"), "{out}");
        assert!(out.contains("'epoch : for __tl_item"), "{out}");
        assert!(out.contains("\"'epoch\""), "{out}");
    }

    #[test]
    fn const_fn_and_nested_items_are_left_alone() {
        let item = quote!(
            const fn f() -> u32 {
                let x = 1;
                x
            }
        );
        assert_eq!(expand(item.clone()), item.to_string());
        let out = expand(quote!(
            fn g() {
                fn inner() {
                    let y = 2;
                }
            }
        ));
        assert!(!out.contains("tag"), "{out}");
    }

    #[test]
    fn awaiting_loops_in_async_code_get_no_scope() {
        let out = expand(quote!(
            async fn f() {
                for i in 0..3 {
                    step(i).await;
                }
                for j in 0..3 {
                    let k = j;
                }
            }
        ));
        assert_eq!(out.matches("enter_loop").count(), 1, "{out}");
    }

    #[test]
    fn wrong_items_are_named() {
        let out = expand(quote!(
            fn forward(&self) -> Tensor;
        ));
        assert!(out.contains("not to a function without a body"), "{out}");
        let out = expand(quote!(
            enum Phase {
                Train,
            }
        ));
        assert!(out.contains("not to an enum"), "{out}");
    }

    #[test]
    fn assignments_and_container_calls() {
        let out = expand(quote!(
            fn f(&mut self) {
                total = (total + loss)?;
                n += 1;
                v[next()] += 1;
                (a, b) = (b, a);
                self.cache.extend(items);
                make().extend(items);
                map.entry(k).or_insert(t);
                while let Some(batch) = rx.recv() {}
            }
        ));
        assert!(out.contains("tagged ((total + loss) ?"), "{out}");
        assert!(out.contains("tag (& n"), "{out}");
        // `v[next()]` cannot be named twice: left alone.
        assert!(out.contains("v [next ()] += 1 ;"), "{out}");
        assert!(
            out.contains("tag (& a") && out.contains("tag (& b"),
            "{out}"
        );
        assert!(out.contains("store (& self . cache"), "{out}");
        assert!(!out.contains("store (& make ()"), "{out}");
        assert!(
            out.contains("or_insert (:: tensor_lifetime :: __private :: stored (t"),
            "{out}"
        );
        assert!(out.contains("\"map\""), "{out}");
        assert!(out.contains("tag (& batch"), "{out}");
    }

    #[test]
    fn compact_text() {
        let e: Expr = syn::parse_quote!(self.cache[i].lock().unwrap());
        assert_eq!(compact(&e), "self.cache[i].lock().unwrap()");
        assert_eq!(compact(&holder(&e)), "self.cache[i]");
        let e: Expr = syn::parse_quote!(*out);
        assert_eq!(compact(&e), "*out");
    }
}
