//! The judgement: a crate's uses between modules against its table of rooms.
//!
//! An edge `a -> b` between modules is a use of room(b) by room(a), room(m) being the
//! longest room that is `m` or a module above it (the crate root is `crate`, no room).
//! A use is allowed when both are one room, when the user is the crate root or a room
//! above the used one (a module may use the modules it declares), or when the user's row
//! names the used room. Every use between two rooms, allowed or not, is an edge of the
//! room graph, and a cycle in it fails as well.

use super::modules::{show, CrateTree, Edge, ModPath};
use super::table::{Row, Table};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write;

const PAGE: &str = "docs/architecture.md";

/// The rooms of one crate: table rows, or (without a table) every module its own.
pub struct Rooms {
    rooms: Vec<ModPath>,
}

impl Rooms {
    /// The table's rooms (a row for the root, an error of its own, is left out).
    pub fn from_table(table: &Table) -> Rooms {
        Rooms {
            rooms: table
                .rows
                .iter()
                .map(|r| split(&r.room))
                .filter(|r| !r.is_empty())
                .collect(),
        }
    }

    pub fn every_module(tree: &CrateTree) -> Rooms {
        Rooms {
            rooms: tree
                .modules
                .keys()
                .filter(|m| !m.is_empty())
                .cloned()
                .collect(),
        }
    }

    /// The rooms' names, `crate` (the root) first.
    pub fn names(&self) -> Vec<String> {
        let mut names = vec!["crate".to_string()];
        names.extend(self.rooms.iter().map(|r| show(r)));
        names
    }

    /// The room of module `m` (`crate` for the root), `None` when no room covers it.
    pub fn of(&self, m: &[String]) -> Option<String> {
        if m.is_empty() {
            return Some("crate".to_string());
        }
        self.rooms
            .iter()
            .filter(|r| m.starts_with(r))
            .max_by_key(|r| r.len())
            .map(|r| show(r))
    }

    /// The uses between rooms, each with its sites in source order.
    pub fn graph<'t>(
        &self,
        tree: &'t CrateTree,
    ) -> BTreeMap<String, BTreeMap<String, Vec<&'t Edge>>> {
        let mut g: BTreeMap<String, BTreeMap<String, Vec<&Edge>>> = BTreeMap::new();
        for e in &tree.edges {
            if let (Some(a), Some(b)) = (self.of(&e.from), self.of(&e.to)) {
                if a != b {
                    g.entry(a).or_default().entry(b).or_default().push(e);
                }
            }
        }
        g
    }
}

fn split(room: &str) -> ModPath {
    if room == "crate" {
        return Vec::new();
    }
    room.split("::").map(str::to_string).collect()
}

/// Every problem of one crate against its table, as messages (empty: it passes).
pub fn check_crate(tree: &CrateTree, table: Option<&Table>) -> Vec<String> {
    let Some(table) = table else {
        return vec![format!(
            "{}: no table in {PAGE}'s Layers section (a heading `### `{}`` and rows \
             `| room | may use |`)",
            tree.dir, tree.dir
        )];
    };
    let mut problems = table_problems(tree, table);
    let rooms = Rooms::from_table(table);
    for (m, files) in &tree.modules {
        if !m.is_empty() && rooms.of(m).is_none() {
            problems.push(format!(
                "{}: module `{}` ({}) is in no room of the table ({PAGE}:{})",
                tree.dir,
                show(m),
                files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                table.line
            ));
        }
    }
    let graph = rooms.graph(tree);
    for (a, uses) in &graph {
        // The root may use every room; every other room has its row.
        let Some(row) = table.row(a) else { continue };
        for (b, sites) in uses {
            if !allowed(row, b) {
                problems.push(forbidden(tree, row, b, sites));
            }
        }
    }
    problems.extend(cycles(&tree.dir, &graph));
    problems
}

/// Rows naming no module, rooms twice, or a room to use that is no room.
fn table_problems(tree: &CrateTree, table: &Table) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for row in &table.rows {
        let room = split(&row.room);
        if room.is_empty() {
            problems.push(format!(
                "{PAGE}:{}: the crate root is no room: {}",
                row.line, row.text
            ));
        } else if !tree.modules.contains_key(&room) {
            problems.push(format!(
                "{PAGE}:{}: room `{}` is no module of {} (a stale row): {}",
                row.line, row.room, tree.dir, row.text
            ));
        }
        if !seen.insert(&row.room) {
            problems.push(format!(
                "{PAGE}:{}: room `{}` has two rows",
                row.line, row.room
            ));
        }
        for used in &row.may_use {
            if used != "crate" && table.row(used).is_none() {
                problems.push(format!(
                    "{PAGE}:{}: `{used}`, which room `{}` may use, is no room of the table",
                    row.line, row.room
                ));
            }
        }
    }
    problems
}

/// Whether the room of `row` may use room `b` (another room): a room nested in it, or
/// one its row names.
fn allowed(row: &Row, b: &str) -> bool {
    b.strip_prefix(row.room.as_str())
        .is_some_and(|rest| rest.starts_with("::"))
        || row.may_use.iter().any(|u| u == b)
}

/// The message of room `a`'s uses of room `b`, which its row does not allow.
fn forbidden(tree: &CrateTree, row: &Row, b: &str, sites: &[&Edge]) -> String {
    let mut s = format!(
        "{}: room `{}` may not use room `{b}`; the row\n    {PAGE}:{}: {}\n  \
         would have to name `{b}`. The uses:",
        tree.dir, row.room, row.line, row.text
    );
    for e in sites {
        let _ = write!(s, "\n    {}", site(e));
    }
    s
}

/// `file:line: a::x -> b::y`.
pub fn site(e: &Edge) -> String {
    format!(
        "{}:{}: {} -> {}",
        e.file.display(),
        e.line,
        show(&e.from),
        show(&e.to)
    )
}

type Graph<'t> = BTreeMap<String, BTreeMap<String, Vec<&'t Edge>>>;

/// One message per cycle: for each strongly connected set of rooms, shortest cycles
/// until every edge inside the set is in one of them.
fn cycles(dir: &str, graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for scc in strongly_connected(graph) {
        if scc.len() < 2 {
            continue;
        }
        let mut covered = BTreeSet::new();
        for a in &scc {
            for b in graph[a].keys().filter(|b| scc.contains(*b)) {
                if covered.contains(&(a.clone(), b.clone())) {
                    continue;
                }
                let mut cycle = vec![a.clone()];
                cycle.extend(shortest_path(graph, &scc, b, a));
                let mut s = format!("{dir}: a cycle between rooms: {}", cycle.join(" -> "));
                for w in cycle.windows(2) {
                    covered.insert((w[0].clone(), w[1].clone()));
                    let _ = write!(
                        s,
                        "\n    {} -> {}: {}",
                        w[0],
                        w[1],
                        site(graph[&w[0]][&w[1]][0])
                    );
                }
                out.push(s);
            }
        }
    }
    out
}

/// The rooms from `from` to `to` (both included), inside `within`.
fn shortest_path(graph: &Graph, within: &BTreeSet<String>, from: &str, to: &str) -> Vec<String> {
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = BTreeSet::from([from]);
    while let Some(n) = queue.pop_front() {
        if n == to {
            break;
        }
        for m in graph.get(n).into_iter().flat_map(|u| u.keys()) {
            if within.contains(m) && seen.insert(m.as_str()) {
                prev.insert(m, n);
                queue.push_back(m);
            }
        }
    }
    let mut path = vec![to.to_string()];
    let mut n = to;
    while n != from {
        n = prev[n];
        path.push(n.to_string());
    }
    path.reverse();
    path
}

/// Tarjan's strongly connected components of the room graph.
fn strongly_connected(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct Tarjan<'g, 't> {
        graph: &'g Graph<'t>,
        index: BTreeMap<&'g str, (usize, usize)>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<BTreeSet<String>>,
    }
    impl<'g> Tarjan<'g, '_> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, (i, i));
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flat_map(|u| u.keys()) {
                let low = if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    self.index[w.as_str()].1
                } else if self.on_stack.contains(w.as_str()) {
                    self.index[w.as_str()].0
                } else {
                    continue;
                };
                let e = self.index.get_mut(v).unwrap();
                e.1 = e.1.min(low);
            }
            let (idx, low) = self.index[v];
            if idx == low {
                let mut scc = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                self.out.push(scc);
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out.sort();
    t.out
}
