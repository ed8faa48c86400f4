//! Argument parsing: `#[track]` takes none, `#[leak_test(...)]` takes options.
//!
//! Every error carries the span of the offending token; independent errors are combined so
//! that the user sees all of them in one compile.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr, Token};

/// Checks that `#[track]` was given no arguments.
pub(crate) fn parse_track_args(args: TokenStream) -> syn::Result<()> {
    if args.is_empty() {
        Ok(())
    } else {
        Err(syn::Error::new_spanned(
            args,
            "`#[track]` takes no arguments",
        ))
    }
}

/// The options of `#[leak_test(...)]`, checked at compile time.
#[derive(Debug, Default)]
pub(crate) struct LeakTestArgs {
    /// `allow = ["label", "src/file.rs", "src/file.rs:12"]`.
    pub(crate) allow: Vec<LitStr>,
    /// `max_leaked_bytes = "1 MiB"` (or an integer).
    pub(crate) max_leaked_bytes: MaxLeakedBytes,
    /// `warmup = 2`.
    pub(crate) warmup: Option<u64>,
    /// `window = 4`.
    pub(crate) window: Option<u64>,
}

/// `max_leaked_bytes`: a number of bytes, or a size text. The text is parsed by the
/// compiler, in a constant the expansion makes (`expand::size_in_bytes`) with the
/// runtime's parser: this crate keeps no parser of its own.
#[derive(Debug)]
pub(crate) enum MaxLeakedBytes {
    /// An integer literal, or nothing (0: no tolerance).
    Bytes(u64),
    /// A string literal (`"1 MiB"`).
    Text(LitStr),
}

impl Default for MaxLeakedBytes {
    fn default() -> Self {
        MaxLeakedBytes::Bytes(0)
    }
}

const OPTIONS: &str = "`allow`, `max_leaked_bytes`, `warmup` or `window`";

impl LeakTestArgs {
    /// Parses `allow = [..], max_leaked_bytes = "..", warmup = N, window = N` (any order,
    /// each at most once). The errors go to `errors`; the options that parsed are
    /// returned anyway (a size text is still checked then).
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> LeakTestArgs {
        let mut out = LeakTestArgs::default();
        let options = match parse_options.parse2(args) {
            Ok(options) => options,
            Err(e) => {
                errors.push(e);
                return out;
            }
        };
        let mut seen: Vec<String> = Vec::new();
        for (path, value) in options {
            let name = path_name(&path);
            if !is_known(&name) {
                errors.push(syn::Error::new_spanned(
                    &path,
                    format!("unknown option `{name}`, expected {OPTIONS}"),
                ));
                continue;
            }
            let value = match value {
                Value::Expr(expr) => expr,
                Value::Missing(at) => {
                    errors.push(syn::Error::new_spanned(
                        at,
                        format!("option `{name}` needs a value: `{name} = ...`"),
                    ));
                    continue;
                }
            };
            if seen.contains(&name) {
                errors.push(syn::Error::new_spanned(
                    &path,
                    format!("option `{name}` is given twice"),
                ));
                continue;
            }
            seen.push(name.clone());
            let result = match name.as_str() {
                "allow" => parse_allow(&value).map(|v| out.allow = v),
                "max_leaked_bytes" => parse_bytes(&value).map(|v| out.max_leaked_bytes = v),
                "warmup" => parse_count(&value, "warmup").map(|v| out.warmup = Some(v)),
                _ => parse_count(&value, "window").map(|v| out.window = Some(v)),
            };
            if let Err(e) = result {
                errors.push(e);
            }
        }
        out
    }
}

/// An option's value: `name = expr`, or missing (`name`, `name =`, `name(..)`), with the
/// tokens to point at.
enum Value {
    Expr(Expr),
    Missing(TokenStream),
}

/// `name = value, ...`. Syntax errors other than a missing value stop the parse (the
/// rest cannot be trusted).
fn parse_options(input: ParseStream) -> syn::Result<Vec<(syn::Path, Value)>> {
    let mut options = Vec::new();
    while !input.is_empty() {
        let path = input.call(syn::Path::parse_mod_style)?;
        let value = if input.peek(Token![=]) {
            let eq: Token![=] = input.parse()?;
            if input.is_empty() || input.peek(Token![,]) {
                Value::Missing(quote::quote!(#path #eq))
            } else {
                Value::Expr(input.parse()?)
            }
        } else if input.peek(syn::token::Paren) || input.peek(syn::token::Bracket) {
            let group: proc_macro2::Group = input.parse()?;
            Value::Missing(quote::quote!(#path #group))
        } else {
            Value::Missing(path.to_token_stream())
        };
        options.push((path, value));
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(options)
}

fn is_known(name: &str) -> bool {
    matches!(name, "allow" | "max_leaked_bytes" | "warmup" | "window")
}

fn path_name(path: &syn::Path) -> String {
    path.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

fn lit(expr: &Expr) -> Option<&Lit> {
    match expr {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        Expr::Group(g) => lit(&g.expr),
        _ => None,
    }
}

/// `["a", "b"]` (or a single string).
fn parse_allow(value: &Expr) -> syn::Result<Vec<LitStr>> {
    let elems: Vec<&Expr> = match value {
        Expr::Array(array) => array.elems.iter().collect(),
        other if matches!(lit(other), Some(Lit::Str(_))) => vec![other],
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "expected a list of labels or files: `allow = [\"cache\", \"src/data.rs\"]`",
            ))
        }
    };
    let mut errors = Errors::default();
    let mut out = Vec::new();
    for elem in elems {
        match lit(elem) {
            Some(Lit::Str(s)) if !s.value().is_empty() => out.push(s.clone()),
            Some(Lit::Str(s)) => errors.push(syn::Error::new(s.span(), "empty entry in `allow`")),
            _ => errors.push(syn::Error::new_spanned(
                elem,
                "expected a string literal (a label, a file or `file:line`)",
            )),
        }
    }
    errors.finish()?;
    Ok(out)
}

/// `"1 MiB"` or an integer number of bytes.
fn parse_bytes(value: &Expr) -> syn::Result<MaxLeakedBytes> {
    match lit(value) {
        Some(Lit::Str(s)) => Ok(MaxLeakedBytes::Text(s.clone())),
        Some(Lit::Int(i)) => i.base10_parse::<u64>().map(MaxLeakedBytes::Bytes),
        _ => Err(syn::Error::new(
            value.span(),
            "expected a size such as `\"1 MiB\"` or a number of bytes",
        )),
    }
}

/// A non-negative integer literal.
fn parse_count(value: &Expr, name: &str) -> syn::Result<u64> {
    match lit(value) {
        Some(Lit::Int(i)) => i.base10_parse::<u64>(),
        _ => Err(syn::Error::new(
            value.span(),
            format!("expected a number of iterations: `{name} = 2`"),
        )),
    }
}

/// Collects independent errors into one (`syn::Error::combine`).
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn has_errors(&self) -> bool {
        self.0.is_some()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    /// The options, or every error.
    fn parse(args: TokenStream) -> syn::Result<LeakTestArgs> {
        let mut errors = Errors::default();
        let args = LeakTestArgs::parse(args, &mut errors);
        errors.finish().map(|()| args)
    }

    fn size_text(args: &LeakTestArgs) -> Option<String> {
        match &args.max_leaked_bytes {
            MaxLeakedBytes::Text(text) => Some(text.value()),
            MaxLeakedBytes::Bytes(_) => None,
        }
    }

    #[test]
    fn parses_all_options() {
        let args = parse(quote!(
            allow = ["cache", "src/x.rs"],
            max_leaked_bytes = "1 MiB",
            warmup = 2,
            window = 4
        ))
        .unwrap();
        let allow: Vec<String> = args.allow.iter().map(|s| s.value()).collect();
        assert_eq!(allow, ["cache", "src/x.rs"]);
        // Its value (1 << 20) is the report crate's parser's (`size.rs` there).
        assert_eq!(size_text(&args).as_deref(), Some("1 MiB"));
        assert_eq!(args.warmup, Some(2));
        assert_eq!(args.window, Some(4));
        let args = parse(quote!(max_leaked_bytes = 1_024)).unwrap();
        assert!(matches!(args.max_leaked_bytes, MaxLeakedBytes::Bytes(1024)));
    }

    #[test]
    fn empty_options_are_the_defaults() {
        let args = parse(TokenStream::new()).unwrap();
        assert!(args.allow.is_empty());
        assert!(matches!(args.max_leaked_bytes, MaxLeakedBytes::Bytes(0)));
        assert_eq!((args.warmup, args.window), (None, None));
    }

    /// A bad size text is the compiler's error, in the same compile as these
    /// (`tests/ui/leak_test_bad_size_among_others.rs`): the text is kept for it.
    #[test]
    fn combines_independent_errors() {
        let mut errors = Errors::default();
        let args = LeakTestArgs::parse(
            quote!(alow = ["x"], max_leaked_bytes = "1 XB", warmup = "two"),
            &mut errors,
        );
        let err = errors.finish().unwrap_err();
        let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("unknown option `alow`"));
        assert!(messages[1].contains("warmup = 2"));
        assert_eq!(size_text(&args).as_deref(), Some("1 XB"));
    }

    #[test]
    fn rejects_duplicates_and_track_args() {
        assert!(parse(quote!(warmup = 1, warmup = 2)).is_err());
        assert!(parse_track_args(quote!(name = "x")).is_err());
        assert!(parse_track_args(TokenStream::new()).is_ok());
    }
}
