//! Small questions about syntax: places, patterns, probe calls, awaits.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use quote::ToTokens;
use syn::visit::Visit;
use syn::{BinOp, Expr, ExprMethodCall, Item, Pat};

/// A place expression (a local, `self`, fields, indexing and dereferences of those).
pub(super) fn is_place(e: &Expr) -> bool {
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

pub(super) fn is_self(e: &Expr) -> bool {
    matches!(e, Expr::Path(p) if p.path.is_ident("self"))
}

/// A call of one of our own probes (`::tensor_lifetime::__private::tagged(..)`).
pub(super) fn is_probe_call(c: &syn::ExprCall) -> bool {
    matches!(&*c.func, Expr::Path(p)
        if p.path.leading_colon.is_some()
            && p.path.segments.first().is_some_and(|s| s.ident == "tensor_lifetime"))
}

/// A struct field's value that may hold a tensor not tagged before: not a named place
/// (tagged where it was bound), a literal, or a closure (whose signature a generic
/// wrapper would stop inferring from the field's type).
pub(super) fn worth_tagging(expr: &Expr) -> bool {
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
pub(super) fn pat_idents(pat: &Pat, out: &mut Vec<syn::Ident>) {
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
pub(super) fn let_patterns<'a>(cond: &'a Expr, out: &mut Vec<&'a Pat>) {
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

pub(super) fn is_assign_op(op: &BinOp) -> bool {
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
pub(super) fn is_pure_place(expr: &Expr) -> bool {
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
pub(super) fn store_place(left: &Expr) -> Option<Expr> {
    match left {
        Expr::Field(_) => Some(left.clone()),
        Expr::Index(i) => Some((*i.expr).clone()),
        Expr::Paren(p) => store_place(&p.expr),
        Expr::Group(g) => store_place(&g.expr),
        _ => None,
    }
}

/// The simple places of a destructuring assignment `(a, b) = ..`.
pub(super) fn destructured_places(left: &Expr, out: &mut Vec<Expr>) {
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
pub(super) fn holder(receiver: &Expr) -> Expr {
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
pub(super) fn diverges(expr: &Expr) -> bool {
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
pub(super) fn contains_await(expr: &Expr) -> bool {
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
pub(super) fn compact(tokens: &impl ToTokens) -> String {
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
