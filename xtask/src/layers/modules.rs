//! A crate's module tree and the paths between its modules, read from the sources.
//!
//! The tree is what the `mod` declarations say, from `lib.rs` down (folders, `mod.rs`,
//! `#[path]` and `#[cfg_attr(.., path = ..)]`, inline modules); an item or module under
//! `#[cfg(test)]` is skipped, since tests may reach anywhere. A reference is every path
//! that starts with `crate`, `super`, `self` or a child module's name: in `use` items, in
//! code (types, expressions, patterns, bounds) and in the tokens of macro calls and
//! `macro_rules!` bodies (`$crate::..` counts as `crate::..`). Comments and string
//! literals are no tokens, so they never count. `pub(in path)` is a visibility, no use.
//!
//! Where a reference lands: the deepest module its segments name. A name a module imports
//! with a private `use` is followed to where it comes from (the import is that module's own
//! business); a `pub` re-export is the re-exporting module's API and is not followed,
//! except at the crate root, which is no room: its re-exports are the public API list.

use anyhow::{bail, Context, Result};
use proc_macro2::{Spacing, TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::visit::{self, Visit};

/// A module path inside its crate, segments without `crate` (`[]` is the crate root).
pub type ModPath = Vec<String>;

/// How a module path is written in messages and in the table: `tracker::sweep`, `crate`.
pub fn show(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

/// One crate's modules and the uses between them.
#[derive(Debug)]
pub struct CrateTree {
    /// The crate's folder relative to the workspace root (`crates/tensor-lifetime`).
    pub dir: String,
    /// Every module (not under `#[cfg(test)]`) with the files it is read from.
    pub modules: BTreeMap<ModPath, Vec<PathBuf>>,
    /// Every reference from one module to another (itself excluded), in source order,
    /// one per line and target.
    pub edges: Vec<Edge>,
}

/// A reference from module `from` to module `to`, at `file:line`.
#[derive(Debug, Clone)]
pub struct Edge {
    pub from: ModPath,
    pub to: ModPath,
    /// Relative to the workspace root.
    pub file: PathBuf,
    pub line: usize,
}

impl Edge {
    /// Source order, then the modules.
    fn key(&self) -> (&PathBuf, usize, &ModPath, &ModPath) {
        (&self.file, self.line, &self.from, &self.to)
    }
}

/// A `use` leaf: the name it brings in, the path it names, whether it is re-exported.
#[derive(Debug)]
struct Import {
    segs: Vec<String>,
    public: bool,
}

/// A path as written, before the tree is known.
#[derive(Debug)]
struct RawRef {
    module: ModPath,
    segs: Vec<String>,
    file: PathBuf,
    line: usize,
    /// A macro call's path (`crate::site!`): its last segment is a macro.
    is_macro: bool,
}

/// What one walk over a crate's files collects.
#[derive(Debug, Default)]
struct Collected {
    modules: BTreeMap<ModPath, Vec<PathBuf>>,
    children: BTreeMap<ModPath, BTreeSet<String>>,
    imports: BTreeMap<ModPath, BTreeMap<String, Import>>,
    /// `#[macro_export]` macros (named `crate::name!` anywhere) and their modules.
    exported_macros: BTreeMap<String, ModPath>,
    refs: Vec<RawRef>,
}

/// Reads the crate in `root/dir` from `src/lib.rs`.
pub fn read_crate(root: &Path, dir: &str) -> Result<CrateTree> {
    let mut c = Collected::default();
    let lib = root.join(dir).join("src/lib.rs");
    // (module, file, folder of its `mod x;` files)
    let mut queue = vec![(
        ModPath::new(),
        lib.clone(),
        lib.parent().unwrap().to_path_buf(),
    )];
    while let Some((module, file, child_dir)) = queue.pop() {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let ast = syn::parse_file(&text)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", file.display(), e.span().start().line))?;
        let rel = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
        c.modules
            .entry(module.clone())
            .or_default()
            .push(rel.clone());
        let mut v = Collector {
            c: &mut c,
            module,
            file: rel,
            file_dir: file.parent().unwrap().to_path_buf(),
            child_dir,
            inline_depth: 0,
            queue: &mut queue,
            error: None,
        };
        v.visit_file(&ast);
        if let Some(e) = v.error {
            return Err(e);
        }
    }
    for files in c.modules.values_mut() {
        files.sort();
    }
    let mut edges = Vec::new();
    for r in &c.refs {
        if let Some(to) = c.resolve_ref(r) {
            if to != r.module {
                edges.push(Edge {
                    from: r.module.clone(),
                    to,
                    file: r.file.clone(),
                    line: r.line,
                });
            }
        }
    }
    // One edge per line: `use crate::a::{x, y}` is one use of `a`.
    edges.sort_by(|a, b| a.key().cmp(&b.key()));
    edges.dedup_by(|a, b| a.key() == b.key());
    Ok(CrateTree {
        dir: dir.to_string(),
        modules: c.modules,
        edges,
    })
}

impl Collected {
    /// Where a reference lands; a macro's path names the macro's module: the one that
    /// defines it for an exported macro (`crate::name!`), else the path's modules.
    fn resolve_ref(&self, r: &RawRef) -> Option<ModPath> {
        if !r.is_macro {
            return self.resolve(&r.module, &r.segs, 0);
        }
        match &r.segs[..] {
            [root, name] if root == "crate" && self.exported_macros.contains_key(name) => {
                Some(self.exported_macros[name].clone())
            }
            [.., _] => self.resolve(&r.module, &r.segs[..r.segs.len() - 1], 0),
            [] => None,
        }
    }

    /// The module that `segs`, written in `module`, lands in (`None`: outside the crate).
    fn resolve(&self, module: &ModPath, segs: &[String], depth: usize) -> Option<ModPath> {
        self.resolve_full(module, segs, depth).map(|(m, _)| m)
    }

    /// As `resolve`, and whether every segment named a module (the path is a module).
    fn resolve_full(
        &self,
        module: &ModPath,
        segs: &[String],
        depth: usize,
    ) -> Option<(ModPath, bool)> {
        if depth > 16 {
            return None;
        }
        let mut cur = module.clone();
        let mut rest = segs;
        match segs.first().map(String::as_str) {
            Some("crate") => {
                cur.clear();
                rest = &segs[1..];
            }
            Some("self") => rest = &segs[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    cur.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) if self.is_child(&cur, first) => {}
            Some(first) if depth > 0 && self.import(&cur, first).is_some() => {}
            _ => return None,
        }
        while let Some(seg) = rest.first() {
            if self.is_child(&cur, seg) {
                cur.push(seg.clone());
                rest = &rest[1..];
                continue;
            }
            match self.import(&cur, seg) {
                Some(imp) if !imp.public || cur.is_empty() => {
                    let (target, is_module) = self.resolve_full(&cur, &imp.segs, depth + 1)?;
                    if !is_module {
                        return Some((target, false));
                    }
                    cur = target;
                    rest = &rest[1..];
                }
                _ => return Some((cur, false)),
            }
        }
        Some((cur, true))
    }

    fn is_child(&self, module: &ModPath, name: &str) -> bool {
        self.children.get(module).is_some_and(|c| c.contains(name))
    }

    fn import(&self, module: &ModPath, name: &str) -> Option<&Import> {
        self.imports.get(module).and_then(|m| m.get(name))
    }
}

/// The walk over one file's syntax.
struct Collector<'a> {
    c: &'a mut Collected,
    module: ModPath,
    /// Relative to the workspace root, for messages.
    file: PathBuf,
    /// The folder of the file (where `#[path]` is relative to).
    file_dir: PathBuf,
    /// The folder a `mod x;` here finds `x.rs` or `x/mod.rs` in.
    child_dir: PathBuf,
    inline_depth: usize,
    queue: &'a mut Vec<(ModPath, PathBuf, PathBuf)>,
    error: Option<anyhow::Error>,
}

impl Collector<'_> {
    fn add_ref(&mut self, segs: Vec<String>, line: usize, is_macro: bool) {
        self.c.refs.push(RawRef {
            module: self.module.clone(),
            segs,
            file: self.file.clone(),
            line,
            is_macro,
        });
    }

    /// `mod name;`: the files that hold it (every `path` its attributes give, else the
    /// usual `name.rs` / `name/mod.rs`) and the folder of its own children.
    fn module_files(&self, m: &syn::ItemMod) -> Result<Vec<(PathBuf, PathBuf)>> {
        let name = m.ident.to_string();
        let base = if self.inline_depth > 0 {
            &self.child_dir
        } else {
            &self.file_dir
        };
        let mut out = Vec::new();
        let mut plain_path = false;
        for attr in &m.attrs {
            let (path, conditional) = match path_attr(attr) {
                Some(p) => p,
                None => continue,
            };
            plain_path |= !conditional;
            let file = base.join(path);
            let dir = file.parent().unwrap().to_path_buf();
            out.push((file, dir));
        }
        if !plain_path {
            let flat = self.child_dir.join(format!("{name}.rs"));
            let nested = self.child_dir.join(&name).join("mod.rs");
            if flat.exists() {
                out.push((flat, self.child_dir.join(&name)));
            } else if nested.exists() {
                out.push((nested, self.child_dir.join(&name)));
            } else {
                bail!(
                    "{}:{}: no file for `mod {name};` ({} or {})",
                    self.file.display(),
                    m.span().start().line,
                    flat.display(),
                    nested.display()
                );
            }
        }
        Ok(out)
    }
}

/// `#[path = "p"]` (`false`) or `#[cfg_attr(cond, path = "p")]` (`true`).
fn path_attr(attr: &syn::Attribute) -> Option<(String, bool)> {
    let lit = |meta: &syn::Meta| match meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    };
    if attr.path().is_ident("path") {
        return lit(&attr.meta).map(|p| (p, false));
    }
    if attr.path().is_ident("cfg_attr") {
        let metas = attr.meta.require_list().ok().and_then(metas)?;
        return metas.iter().skip(1).find_map(lit).map(|p| (p, true));
    }
    None
}

/// The comma-separated metas of `name(a, b = "c", ..)`.
fn metas(list: &syn::MetaList) -> Option<Vec<syn::Meta>> {
    list.parse_args_with(syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
        .ok()
        .map(|ms| ms.into_iter().collect())
}

/// Whether the attributes put the item under `#[cfg(test)]` (or `all(test, ..)`).
fn cfg_test(attrs: &[syn::Attribute]) -> bool {
    fn needs_test(meta: &syn::Meta) -> bool {
        match meta {
            syn::Meta::Path(p) => p.is_ident("test"),
            syn::Meta::List(l) if l.path.is_ident("all") => {
                metas(l).is_some_and(|ms| ms.iter().any(needs_test))
            }
            _ => false,
        }
    }
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Meta>().is_ok_and(|m| needs_test(&m))
    })
}

/// The leaves of a `use` tree: (path, name it brings in or `None` for a glob, line).
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push(leaf(prefix, &n.ident, &n.ident)),
        syn::UseTree::Rename(r) => out.push(leaf(prefix, &r.ident, &r.rename)),
        syn::UseTree::Glob(g) => out.push(UseLeaf {
            segs: prefix.clone(),
            name: None,
            line: g.star_token.span.start().line,
        }),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix, out);
            }
        }
    }
}

struct UseLeaf {
    segs: Vec<String>,
    name: Option<String>,
    line: usize,
}

fn leaf(prefix: &[String], ident: &syn::Ident, name: &syn::Ident) -> UseLeaf {
    let mut segs = prefix.to_vec();
    // `use a::{self}` names `a` itself.
    if ident != "self" {
        segs.push(ident.to_string());
    }
    let name = if name == "self" {
        prefix.last().cloned()
    } else {
        Some(name.to_string())
    };
    UseLeaf {
        segs,
        name,
        line: ident.span().start().line,
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return visit::visit_item(self, item),
        };
        if !cfg_test(attrs) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let skip = match item {
            syn::ImplItem::Fn(f) => cfg_test(&f.attrs),
            syn::ImplItem::Const(c) => cfg_test(&c.attrs),
            _ => false,
        };
        if !skip {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let name = m.ident.to_string();
        let mut path = self.module.clone();
        path.push(name.clone());
        self.c
            .children
            .entry(self.module.clone())
            .or_default()
            .insert(name.clone());
        for attr in &m.attrs {
            self.visit_attribute(attr);
        }
        match &m.content {
            Some((_, items)) => {
                self.c.modules.entry(path.clone()).or_default();
                let parent = std::mem::replace(&mut self.module, path);
                let dir = self.child_dir.clone();
                self.child_dir = dir.join(&name);
                self.inline_depth += 1;
                for item in items {
                    self.visit_item(item);
                }
                self.inline_depth -= 1;
                self.child_dir = dir;
                self.module = parent;
            }
            None => match self.module_files(m) {
                Ok(files) => {
                    for (file, dir) in files {
                        self.queue.push((path.clone(), file, dir));
                    }
                }
                Err(e) => self.error = self.error.take().or(Some(e)),
            },
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let public = !matches!(u.vis, syn::Visibility::Inherited);
        let mut leaves = Vec::new();
        use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
        if u.leading_colon.is_some() {
            return;
        }
        for l in leaves {
            if let Some(name) = &l.name {
                self.c
                    .imports
                    .entry(self.module.clone())
                    .or_default()
                    .insert(
                        name.clone(),
                        Import {
                            segs: l.segs.clone(),
                            public,
                        },
                    );
            }
            self.add_ref(l.segs, l.line, false);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() >= 2 {
            let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.add_ref(segs, p.span().start().line, false);
        }
        visit::visit_path(self, p);
    }

    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}

    fn visit_item_macro(&mut self, m: &'ast syn::ItemMacro) {
        if let Some(name) = &m.ident {
            if m.attrs.iter().any(|a| a.path().is_ident("macro_export")) {
                self.c
                    .exported_macros
                    .insert(name.to_string(), self.module.clone());
            }
        }
        visit::visit_item_macro(self, m);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let p = &m.path;
        if p.leading_colon.is_none() && p.segments.len() >= 2 {
            let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.add_ref(segs, p.span().start().line, true);
        }
        self.scan_tokens(m.tokens.clone());
    }
}

impl Collector<'_> {
    /// The paths inside a macro's tokens: an identifier followed by `::` chains, not
    /// itself after `::` (`$crate::x` counts as `crate::x`).
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tts: Vec<TokenTree> = tokens.into_iter().collect();
        let is_colons = |i: usize| {
            matches!((tts.get(i), tts.get(i + 1)),
                (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                    if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
        };
        let mut i = 0;
        while i < tts.len() {
            match &tts[i] {
                TokenTree::Group(g) => {
                    self.scan_tokens(g.stream());
                }
                TokenTree::Ident(id) if !(i >= 2 && is_colons(i - 2)) && is_colons(i + 1) => {
                    let line = id.span().start().line;
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while is_colons(j) {
                        match tts.get(j + 2) {
                            Some(TokenTree::Ident(next)) => segs.push(next.to_string()),
                            _ => break,
                        }
                        j += 3;
                    }
                    let is_macro =
                        matches!(tts.get(j), Some(TokenTree::Punct(p)) if p.as_char() == '!');
                    self.add_ref(segs, line, is_macro);
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}
