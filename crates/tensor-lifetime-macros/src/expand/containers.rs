//! Containers in the source: the calls that trim them (evictions), the locals a
//! function returns (what a construction loop builds), and the tensors inside a stored
//! user value.

use super::syntax::{compact, holder, is_place, is_probe_call, is_pure_place, is_self};
use proc_macro2::Span;
use std::collections::BTreeMap;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{parse_quote, Block, Expr, ExprMethodCall, Item, Pat, Stmt};

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
/// The first trim of a label wins: it is the one a report names.
#[derive(Default, Clone)]
pub(super) struct Evictions(BTreeMap<String, (Span, String)>);

impl Evictions {
    /// The trims in one body.
    pub(super) fn of(block: &Block) -> Evictions {
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
    pub(super) fn of_self<'a>(blocks: impl Iterator<Item = &'a Block>) -> Evictions {
        let mut all = Evictions::default();
        for block in blocks {
            let found = Evictions::of(block);
            for (label, (span, call)) in found.0 {
                if label.starts_with("self.") {
                    all.note(label, span, call);
                }
            }
        }
        all
    }

    fn note(&mut self, label: String, span: Span, call: String) {
        self.0.entry(label).or_insert((span, call));
    }

    /// Adds the trims of `other` of containers this one does not trim.
    pub(super) fn merge(&mut self, other: &Evictions) {
        for (label, (span, call)) in &other.0 {
            if !self.0.contains_key(label) {
                self.note(label.clone(), *span, call.clone());
            }
        }
    }

    /// The first trim of the container `label`: its span and what it is.
    pub(super) fn get(&self, label: &str) -> Option<&(Span, String)> {
        self.0.get(label)
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

/// The locals a function hands out: those at value positions of its tail expression and
/// its `return`s (`heads` in `Ok(heads)`, `Self { layers }`, `(heads, n)`,
/// `Model::new(heads)`), and, repeatedly, those moved into the value of a `let` that
/// binds one of them (`blocks` in `let model = Self { blocks }; Ok(model)`).
pub(super) fn returned_locals(block: &Block) -> Vec<String> {
    fn names(expr: &Expr, out: &mut Vec<String>) {
        match expr {
            Expr::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
                let name = p.path.segments[0].ident.to_string();
                if name != "self"
                    && !name.starts_with(|c: char| c.is_uppercase())
                    && !out.contains(&name)
                {
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
    // What is moved into a returned local's value is handed out with it.
    loop {
        let before = out.len();
        for stmt in &block.stmts {
            let Stmt::Local(local) = stmt else { continue };
            let (Pat::Ident(p), Some(init)) = (&local.pat, &local.init) else {
                continue;
            };
            if out.contains(&p.ident.to_string()) {
                names(&init.expr, &mut out);
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// The construction-loop rule: the returned local a loop fills, if any. A loop fills a
/// local its function hands out ([`returned_locals`]) when its body puts values into it:
/// a storing call on it or on a field of it (`heads.push(..)`, `model.weights.insert(..)`),
/// or a builder step: the place assigned its own method call, with a part made in that
/// call (`blocks = blocks.add(Block::new(..)?)`; `total = total.add(&loss)?` adds a
/// value made before, and is an accumulation, not a build). The result is the text of
/// the place filled, as its store site is labeled.
pub(super) fn fills_returned(expr: &Expr, returned: &[String]) -> Option<String> {
    struct Finder<'b> {
        returned: &'b [String],
        found: Option<String>,
    }
    impl Finder<'_> {
        /// `place` if its root local is handed out.
        fn note(&mut self, place: &Expr) {
            let mut root = place;
            while let Expr::Field(f) = root {
                root = &f.base;
            }
            let Expr::Path(p) = root else { return };
            if self.found.is_none()
                && p.path.segments.len() == 1
                && self
                    .returned
                    .contains(&p.path.segments[0].ident.to_string())
            {
                self.found = Some(compact(place));
            }
        }
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
            if storing.iter().any(|m| call.method == m) {
                self.note(&holder(&call.receiver));
            }
            syn::visit::visit_expr_method_call(self, call);
        }
        fn visit_expr_assign(&mut self, a: &'a syn::ExprAssign) {
            if is_place(&a.left) && is_builder_step(&a.left, &a.right) {
                self.note(&a.left);
            }
            syn::visit::visit_expr_assign(self, a);
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

/// `place.method(.., part, ..)` (its `?` and parentheses aside) with a `part` made in the
/// call: a call or a method call, not a place or a reference to one.
fn is_builder_step(place: &Expr, value: &Expr) -> bool {
    fn strip(e: &Expr) -> &Expr {
        match e {
            Expr::Try(t) => strip(&t.expr),
            Expr::Paren(p) => strip(&p.expr),
            Expr::Group(g) => strip(&g.expr),
            Expr::Reference(r) => strip(&r.expr),
            _ => e,
        }
    }
    let Expr::MethodCall(call) = strip(value) else {
        return false;
    };
    compact(&*call.receiver) == compact(place)
        && call
            .args
            .iter()
            .any(|a| matches!(strip(a), Expr::Call(_) | Expr::MethodCall(_)))
}

/// In a stored value of a user type, the tensors inside: named places (`state` in
/// `Transition::new(state, a)`, `tril` in `Head { tril }`) go to `before` (probed by
/// reference before the value is built), computed values (`Tensor::new(..)?`, a field
/// already tagged) are wrapped in place in `stored(.., site)`. Returns whether it wrapped
/// any.
pub(super) fn inner_stores(
    expr: &mut Expr,
    site: &proc_macro2::Ident,
    before: &mut Vec<Expr>,
) -> bool {
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
