//! The visitor that rewrites a function body: bindings, assignments, stores and loops.

use super::containers::inner_stores;
use super::facts::FnFacts;
use super::inputs::{graph_inputs, inputs_local};
use super::origin::{checked, is_batch_call, wrap_body};
use super::sites::{self, local, role_tokens, site, Kind};
use super::syntax::{
    compact, contains_await, destructured_places, diverges, holder, is_assign_op, is_pure_place,
    let_patterns, pat_idents, store_place, worth_tagging,
};
use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{parse_quote, Attribute, Block, Expr, Item, Pat, Signature, Stmt};

/// Rewrites the body of the function `facts` describes (see the module docs of
/// `expand`), then adds its call-path guard (`origin.rs`); never called for a `const fn`.
pub(super) fn instrument(facts: &FnFacts, sig: &Signature, block: &mut Block) {
    let mut v = Instrument {
        facts,
        in_async: facts.is_async(),
        needs_task: false,
    };
    v.visit_block_mut(block);
    if v.needs_task {
        in_task(block);
    }
    wrap_body(facts.function(), sig, block);
}

/// The body rewriter: the function's facts, and where in the body the walk is.
struct Instrument<'f> {
    facts: &'f FnFacts,
    /// Inside an `async fn`, `async` block or async closure.
    in_async: bool,
    /// A loop that awaits was instrumented in the current async body: the body is
    /// wrapped in `in_task` so that its loops follow the task from thread to thread.
    needs_task: bool,
}

/// Wraps an async body in `in_task` (see [`Instrument::needs_task`]): `{ in_task(async
/// { body }).await }`. The inner block is not `move`: it borrows or moves what the body
/// uses, as the body did, and is awaited at once; its `return` and `?` end it, which
/// ends the body with the same value.
fn in_task(block: &mut Block) {
    let inner = std::mem::replace(block, parse_quote!({}));
    *block = parse_quote!({ ::tensor_lifetime::__private::in_task(async #inner).await });
}

impl Instrument<'_> {
    /// `&'static Site` for the user's token at `span` (`sites.rs`).
    fn site(&self, span: Span, label: &str, kind: Kind) -> TokenStream {
        self.site_with(span, label, kind, TokenStream::new())
    }

    /// A site with a builder call appended (`.evicted_at(..)`, `.fills(..)`).
    fn site_with(&self, span: Span, label: &str, kind: Kind, extra: TokenStream) -> TokenStream {
        site(self.facts.function(), span, label, kind, extra)
    }

    /// A store site into `label` of `value`; bounded (`.evicted_at(line, call)`) when the
    /// code also trims that container.
    fn store_site(&self, span: Span, label: &str, value: &Expr) -> TokenStream {
        let role = role_tokens(self.facts.made_here(value).then_some("OptimizerState"));
        match self.facts.eviction(label) {
            Some((at, call)) => {
                let line = quote_spanned!(*at=> ::core::line!());
                self.site_with(
                    span,
                    label,
                    Kind::Store,
                    quote!(.evicted_at(#line, #call) #role),
                )
            }
            None => self.site_with(span, label, Kind::Store, role),
        }
    }

    /// `tag(&ident, SITE);` for each identifier bound by `pat`.
    fn binding_tags(&self, pat: &Pat, cfgs: &[&Attribute]) -> Vec<Stmt> {
        self.binding_tags_as(pat, cfgs, None, None)
    }

    /// [`Instrument::binding_tags`] with sites of role `role` (a `Role` variant's name),
    /// and `tag_made(&ident, SITE, &inputs)` when the value's inputs are in the local
    /// `inputs` (`inputs.rs`); their names (`from`) go on the site (`.from(&[..])`): the
    /// data flow between sites.
    fn binding_tags_as(
        &self,
        pat: &Pat,
        cfgs: &[&Attribute],
        role: Option<&str>,
        inputs: Option<(&Ident, &[Expr])>,
    ) -> Vec<Stmt> {
        let mut role = role_tokens(role);
        if let Some((_, from)) = inputs {
            let names = from.iter().map(compact);
            role.extend(quote!(.from(&[#(#names),*])));
        }
        let inputs = inputs.map(|(name, _)| name);
        let mut idents = Vec::new();
        pat_idents(pat, &mut idents);
        idents
            .into_iter()
            .map(|ident| {
                let label = ident.to_string();
                let label = label.strip_prefix("r#").unwrap_or(&label);
                let site = self.site_with(ident.span(), label, Kind::Binding, role.clone());
                match inputs {
                    Some(inputs) => parse_quote! {
                        #(#cfgs)*
                        ::tensor_lifetime::__private::tag_made(&#ident, #site, &#inputs);
                    },
                    None => parse_quote! {
                        #(#cfgs)*
                        ::tensor_lifetime::__private::tag(&#ident, #site);
                    },
                }
            })
            .collect()
    }

    /// `place = value`, `place op= value`; `inputs`: the locals `value` is computed from
    /// (`inputs.rs`), read before it was rewritten.
    fn assignment(&mut self, expr: &mut Expr, inputs: &[Expr]) {
        match expr {
            Expr::Assign(a) => {
                if diverges(&a.right) {
                    return;
                }
                if let Some(receiver) = store_place(&a.left) {
                    let site = self.store_site(a.left.span(), &compact(&receiver), &a.right);
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
                a.right = if inputs.is_empty() {
                    parse_quote!(::tensor_lifetime::__private::tagged(#right, #site))
                } else {
                    // The inputs are read first (an argument list runs in order), before
                    // the value may move them.
                    parse_quote!(::tensor_lifetime::__private::tagged_made(
                        [#(::tensor_lifetime::__private::input(&#inputs)),*], #right, #site))
                };
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
                    let site = self.store_site(call.method.span(), &label, &call.args[0]);
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
        let site = self.store_site(call.method.span(), &label, &call.args[index]);
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
        let ty = match (ty.as_str(), self.facts.self_type()) {
            ("Self", Some(own)) => own.to_string(),
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
            let role = role_tokens(
                self.facts
                    .made_here(&field.expr)
                    .then_some("OptimizerState"),
            );
            let site = self.site_with(field.expr.span(), &label, Kind::Binding, role);
            let value = &field.expr;
            field.expr = parse_quote!(::tensor_lifetime::__private::tagged(#value, #site));
            field.colon_token.get_or_insert_with(Default::default);
        }
    }

    /// Visits the body of a closure or an `async` block (`visit`), async or not as
    /// `is_async` says, and returns whether it needs its own `in_task`; the enclosing
    /// body's state is restored after.
    fn nested_body(&mut self, is_async: bool, visit: impl FnOnce(&mut Self)) -> bool {
        let outer = std::mem::replace(&mut self.in_async, is_async);
        let outer_task = std::mem::replace(&mut self.needs_task, false);
        visit(self);
        self.in_async = outer;
        std::mem::replace(&mut self.needs_task, outer_task)
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
        let fills = self.facts.fills_returned(expr).filter(|_| !labeled);
        visit_mut::visit_expr_mut(self, expr);
        // A loop that awaits may resume on another thread: a `Send` scope, in a task.
        let awaits = self.in_async && contains_await(expr);
        self.needs_task |= awaits;
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
        let enter = if awaits {
            quote!(let #scope = ::tensor_lifetime::__private::enter_async_loop(#site);)
        } else {
            quote!(let #scope = ::tensor_lifetime::__private::enter_loop(#site);)
        };
        let begin = quote!(let #iter = #scope.iteration(););
        *expr = match &*expr {
            Expr::ForLoop(f) => {
                let (attrs, label, pat, iterable, body) =
                    (&f.attrs, &f.label, &f.pat, &f.expr, &f.body);
                let item = local("__tl_item");
                let value = local("__tl_value");
                // A loop's item is an input (in an optimizer, the parameters it walks).
                let role = (!self.facts.optimizer()).then_some("Input");
                let tags = self.binding_tags_as(pat, &[], role, None);
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

impl VisitMut for Instrument<'_> {
    fn visit_block_mut(&mut self, block: &mut Block) {
        let stmts = std::mem::take(&mut block.stmts);
        for mut stmt in stmts {
            match &mut stmt {
                Stmt::Local(local) => {
                    if let Some(init) = &mut local.init {
                        // Named before the value is rewritten: the user's own operands.
                        let inputs = graph_inputs(&init.expr, self.facts.locals());
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
                        let role = if self.facts.optimizer() {
                            self.facts.made_here(&init.expr).then_some("OptimizerState")
                        } else {
                            is_batch_call(&init.expr).then_some("Input")
                        };
                        let name = sites::local("__tl_inputs");
                        let made = (!inputs.is_empty()).then_some((&name, &inputs[..]));
                        let tags = self.binding_tags_as(&local.pat, &cfgs, role, made);
                        if made.is_some() && !tags.is_empty() {
                            block.stmts.push(inputs_local(&name, &inputs, &cfgs));
                        }
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
                if self.nested_body(c.asyncness.is_some(), |v| v.visit_expr_mut(&mut c.body)) {
                    let body = &c.body;
                    *c.body =
                        parse_quote!(::tensor_lifetime::__private::in_task(async { #body }).await);
                }
            }
            Expr::Async(a) => {
                if self.nested_body(true, |v| v.visit_block_mut(&mut a.block)) {
                    in_task(&mut a.block);
                }
            }
            // `const { .. }` is evaluated at compile time.
            Expr::Const(_) => {}
            Expr::Assign(a) => {
                let inputs = graph_inputs(&a.right, self.facts.locals());
                self.visit_expr_mut(&mut a.right);
                self.assignment(expr, &inputs);
            }
            Expr::Binary(b) if is_assign_op(&b.op) => {
                self.visit_expr_mut(&mut b.right);
                self.assignment(expr, &[]);
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
                    *arm.body = parse_quote!({ #(#tags)* #body });
                    arm.comma.get_or_insert_with(Default::default);
                }
            }
            Expr::Repeat(r) => self.visit_expr_mut(&mut r.expr),
            // `x?`: an error is looked at before it leaves (out of memory, `origin.rs`).
            Expr::Try(t) => {
                self.visit_expr_mut(&mut t.expr);
                *t.expr = checked(&t.expr);
            }
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
