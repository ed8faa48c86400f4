//! `layers` on a small fixture workspace in a temporary folder: a table that passes, then
//! a forbidden use, a cycle, a stale row, a module in no room and a file the page does not
//! name, each failing with its message, all in one run.

use super::check;
use super::check::site;
use super::modules::{read_crate, show};
use std::path::{Path, PathBuf};

/// A workspace in a temporary folder, removed on drop.
struct Fixture {
    root: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let root = std::env::temp_dir().join(format!("xtask-layers-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let f = Fixture { root };
        for (path, text) in PASSING {
            f.write(path, text);
        }
        f
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Replaces `from` by `to` in the file at `path`.
    fn edit(&self, path: &str, from: &str, to: &str) {
        let text = std::fs::read_to_string(self.root.join(path)).unwrap();
        assert!(text.contains(from), "{path} has no {from:?}");
        self.write(path, &text.replacen(from, to, 1));
    }

    fn problems(&self) -> Vec<String> {
        check(&self.root).unwrap()
    }

    fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

const PAGE: &str = "\
# Fixture

```
crates/fix/src/
  lib.rs        the module list; util.rs: small helpers
  store/        the store
    shard.rs
  walk.rs, top.rs
```

## Layers

### `crates/fix`

| room | may use |
|---|---|
| `util` | — |
| `store` | `util` |
| `walk` | `store`, `util` |
| `top` | `walk` |
";

const PASSING: &[(&str, &str)] = &[
    ("docs/architecture.md", PAGE),
    (
        "crates/fix/src/lib.rs",
        "//! fixture\npub mod store;\npub mod top;\nmod util;\npub mod walk;\n\
         pub use store::Store;\n",
    ),
    (
        "crates/fix/src/store/mod.rs",
        "mod shard;\nuse crate::util::tiny;\npub struct Store(shard::Shard);\n\
         pub fn make() -> Store { tiny(); Store(self::shard::Shard) }\n",
    ),
    ("crates/fix/src/store/shard.rs", "pub struct Shard;\n"),
    (
        "crates/fix/src/walk.rs",
        "use crate::Store;\npub fn walk(_: &Store) {\n    crate::util::tiny();\n}\n\
         pub(in crate::walk) fn private() {}\n",
    ),
    (
        "crates/fix/src/top.rs",
        "pub fn run() {\n    let s = todo!();\n    super::walk::walk(&s);\n}\n",
    ),
    (
        "crates/fix/src/util.rs",
        "/// Not `crate::walk::walk` (a comment).\n\
         pub fn tiny() {\n    let _ = \"crate::top::run\";\n}\n\
         #[cfg(test)]\nmod tests {\n    use crate::top::run;\n}\n",
    ),
];

#[test]
fn a_table_that_fits_passes() {
    let f = Fixture::new("passes");
    assert_eq!(f.problems(), Vec::<String>::new());
}

#[test]
fn uses_are_read_from_code_use_items_and_macros_not_from_comments_strings_or_tests() {
    let f = Fixture::new("reads");
    f.edit(
        "crates/fix/src/top.rs",
        "}\n",
        "}\nmacro_rules! m { () => { $crate::util::tiny() }; }\n\
         pub fn again() { println!(\"{:?}\", crate::store::make().0); }\n",
    );
    let tree = read_crate(f.root(), "crates/fix").unwrap();
    let edges: Vec<String> = tree.edges.iter().map(site).collect();
    assert_eq!(
        edges,
        [
            // `pub use store::Store` at the root; `self::shard` is a submodule.
            "crates/fix/src/lib.rs:6: crate -> store",
            "crates/fix/src/store/mod.rs:2: store -> util",
            "crates/fix/src/store/mod.rs:3: store -> store::shard",
            "crates/fix/src/store/mod.rs:4: store -> store::shard",
            "crates/fix/src/top.rs:3: top -> walk",
            "crates/fix/src/top.rs:5: top -> util",
            "crates/fix/src/top.rs:6: top -> store",
            // `crate::Store` is the root's re-export of `store::Store`.
            "crates/fix/src/walk.rs:1: walk -> store",
            "crates/fix/src/walk.rs:3: walk -> util",
        ]
    );
    let modules: Vec<String> = tree.modules.keys().map(|m| show(m)).collect();
    assert_eq!(
        modules,
        ["crate", "store", "store::shard", "top", "util", "walk"]
    );
}

#[test]
fn a_forbidden_use_fails_with_its_site_and_the_row_to_change() {
    let f = Fixture::new("forbidden");
    f.edit(
        "crates/fix/src/top.rs",
        "}\n",
        "}\npub fn store() -> crate::store::Store {\n    super::store::make()\n}\n\
         use crate::store::{make as _, Store as _};\n",
    );
    assert_eq!(
        f.problems(),
        [
            "crates/fix: room `top` may not use room `store`; the row\n    \
          docs/architecture.md:20: | `top` | `walk` |\n  \
          would have to name `store`. The uses:\n    \
          crates/fix/src/top.rs:5: top -> store\n    \
          crates/fix/src/top.rs:6: top -> store\n    \
          crates/fix/src/top.rs:8: top -> store"
        ]
    );
}

#[test]
fn a_cycle_between_rooms_fails_with_every_edge_in_a_printed_cycle() {
    let f = Fixture::new("cycle");
    f.edit(
        "crates/fix/src/util.rs",
        "pub fn tiny",
        "use crate::walk::walk;\npub fn tiny",
    );
    f.edit(
        "docs/architecture.md",
        "| `util` | — |",
        "| `util` | `walk` |",
    );
    assert_eq!(
        f.problems(),
        [
            "crates/fix: a cycle between rooms: store -> util -> walk -> store\n    \
             store -> util: crates/fix/src/store/mod.rs:2: store -> util\n    \
             util -> walk: crates/fix/src/util.rs:2: util -> walk\n    \
             walk -> store: crates/fix/src/walk.rs:1: walk -> store",
            "crates/fix: a cycle between rooms: walk -> util -> walk\n    \
             walk -> util: crates/fix/src/walk.rs:3: walk -> util\n    \
             util -> walk: crates/fix/src/util.rs:2: util -> walk",
        ]
    );
}

#[test]
fn stale_rows_and_tables_a_module_in_no_room_and_an_unnamed_file_all_fail_in_one_run() {
    let f = Fixture::new("stale");
    f.edit(
        "docs/architecture.md",
        "| `top` | `walk` |",
        "| `top` | `walk` |\n| `gone` | `top` |\n\n### `crates/gone`\n\n| room | may use |\n",
    );
    f.edit(
        "crates/fix/src/lib.rs",
        "mod util;",
        "mod util;\nmod extra;",
    );
    f.write("crates/fix/src/extra.rs", "pub fn nothing() {}\n");
    f.write(
        "crates/fix/src/notes.txt",
        "not a module, still a source file\n",
    );
    f.write("xtask/src/main.rs", "fn main() {}\n");
    assert_eq!(
        f.problems(),
        [
            "docs/architecture.md:23: `crates/gone` is no crate with a src/lib.rs (a stale table)",
            "docs/architecture.md:21: room `gone` is no module of crates/fix (a stale row): \
             | `gone` | `top` |",
            "crates/fix: module `extra` (crates/fix/src/extra.rs) is in no room of the table \
             (docs/architecture.md:13)",
            "docs/architecture.md names no source file of these (see its Layers section for how \
             a tree names a file):\n    \
             crates/fix/src/extra.rs\n    \
             crates/fix/src/notes.txt\n    \
             xtask/src/main.rs",
        ]
    );
    // Named in the tree, and by full paths in prose.
    f.edit(
        "docs/architecture.md",
        "  walk.rs, top.rs\n",
        "  walk.rs, top.rs\n  extra.rs\n```\n\n\
         `crates/fix/src/notes.txt` and `xtask/src/main.rs`.\n\n```\n",
    );
    assert_eq!(f.problems().len(), 3);
}

#[test]
fn the_tree_follows_path_attributes_and_inline_modules() {
    let f = Fixture::new("tree");
    f.edit(
        "crates/fix/src/store/mod.rs",
        "mod shard;",
        "mod shard;\n#[cfg_attr(not(feature = \"gpu\"), path = \"no_gpu.rs\")]\nmod gpu;",
    );
    f.write(
        "crates/fix/src/store/gpu.rs",
        "pub fn on() { super::make(); }\n",
    );
    f.write(
        "crates/fix/src/store/no_gpu.rs",
        "pub mod inner {\n    pub fn off() { super::super::super::util::tiny(); }\n}\n",
    );
    let tree = read_crate(f.root(), "crates/fix").unwrap();
    let gpu: Vec<String> = tree.modules[&vec!["store".to_string(), "gpu".to_string()]]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(
        gpu,
        [
            "crates/fix/src/store/gpu.rs",
            "crates/fix/src/store/no_gpu.rs"
        ]
    );
    let from_gpu: Vec<String> = tree
        .edges
        .iter()
        .filter(|e| {
            e.from
                .starts_with(&["store".to_string(), "gpu".to_string()])
        })
        .map(site)
        .collect();
    assert_eq!(
        from_gpu,
        [
            "crates/fix/src/store/gpu.rs:1: store::gpu -> store",
            "crates/fix/src/store/no_gpu.rs:2: store::gpu::inner -> util",
        ]
    );
}

#[test]
fn a_tree_names_files_through_folder_lines_and_continued_descriptions() {
    let f = Fixture::new("tree-names");
    let tree = "\
```
crates/fix/src/
  lib.rs        the module list
  store/        the store, its mod.rs; a description that goes on
                over a second line naming shard.rs (inside store/)
  walk.rs       the walk, going on
                over a line naming top.rs and util.rs (siblings)
```
";
    f.edit(
        "docs/architecture.md",
        &PAGE[..PAGE.find("\n## Layers").unwrap()],
        tree,
    );
    assert_eq!(f.problems(), Vec::<String>::new());
    // `shard.rs` on a line of its own at the folder's depth is no longer inside it.
    f.edit(
        "docs/architecture.md",
        "                over a second line naming shard.rs (inside store/)\n",
        "  shard.rs\n",
    );
    assert_eq!(
        f.problems(),
        ["docs/architecture.md names no source file of these \
          (see its Layers section for how a tree names a file):\n    \
          crates/fix/src/store/shard.rs"]
    );
}

#[test]
fn the_graph_lists_every_room_and_its_uses() {
    let f = Fixture::new("graph");
    assert_eq!(
        super::graph(f.root()).unwrap(),
        "### `crates/fix`\n\n| room | uses |\n|---|---|\n\
         | `crate` | `store` |\n\
         | `util` | — |\n\
         | `store` | `util` |\n\
         | `walk` | `store`, `util` |\n\
         | `top` | `walk` |\n\n"
    );
}
