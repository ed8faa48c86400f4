//! The pieces generated code is made of: sites (a `static` `Site` per probed place, its
//! kind and role hint) and the hygienic locals the rewrite introduces.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};

/// What a site records (`SiteKind` in the runtime).
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Binding,
    Assignment,
    Store,
    Loop,
}

impl Kind {
    fn ident(self) -> Ident {
        let name = match self {
            Kind::Binding => "Binding",
            Kind::Assignment => "Assignment",
            Kind::Store => "Store",
            Kind::Loop => "Loop",
        };
        Ident::new(name, Span::call_site())
    }
}

/// `&'static Site` for the user's token at `span` in `function`: a `static` in a block,
/// with `file!()`/`line!()`/`column!()` spanned at that token so they name its place;
/// `extra` is a builder call appended (`.evicted_at(..)`, `.fills(..)`, a role).
pub(super) fn site(
    function: &str,
    span: Span,
    label: &str,
    kind: Kind,
    extra: TokenStream,
) -> TokenStream {
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

/// `.with_role(Role::X)` for a site of role `role` (a `Role` variant's name).
pub(super) fn role_tokens(role: Option<&str>) -> TokenStream {
    match role {
        Some(role) => {
            let ident = Ident::new(role, Span::call_site());
            quote!(.with_role(::tensor_lifetime::__private::Role::#ident))
        }
        None => TokenStream::new(),
    }
}

/// A generated local, invisible to user code (`Span::mixed_site`).
pub(super) fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}
