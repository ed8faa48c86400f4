//! The allowed edges: the `## Layers` section of docs/architecture.md.
//!
//! Per crate, a heading `### `crates/NAME`` and a table whose rows are
//! `| `room` | `other`, `other` |` (a room, then the rooms it may use; `—` for none;
//! further columns are free text). A room is a module path (`tracker::sweep`) and covers
//! its submodules unless one of them is a room of its own; `crate` in the second column
//! is the crate root.

use anyhow::{bail, Result};

/// The page's Layers section, one table per crate.
#[derive(Debug, Default)]
pub struct Layers {
    pub tables: Vec<Table>,
}

/// One crate's rooms.
#[derive(Debug)]
pub struct Table {
    /// The crate's folder (`crates/tensor-lifetime`).
    pub dir: String,
    /// Line of the `###` heading (1-based).
    pub line: usize,
    pub rows: Vec<Row>,
}

/// `| room | may use |`.
#[derive(Debug)]
pub struct Row {
    pub room: String,
    pub may_use: Vec<String>,
    /// Line in the page (1-based) and the row as written, for messages.
    pub line: usize,
    pub text: String,
}

impl Layers {
    /// Reads the `## Layers` section of `page` (fails when there is none).
    pub fn parse(page: &str) -> Result<Layers> {
        let mut layers = Layers::default();
        let mut inside = false;
        let mut found = false;
        for (i, line) in page.lines().enumerate() {
            let line_no = i + 1;
            if let Some(h) = line.strip_prefix("## ") {
                inside = h.trim() == "Layers";
                found |= inside;
                continue;
            }
            if !inside {
                continue;
            }
            if let Some(h) = line.strip_prefix("### ") {
                layers.tables.push(Table {
                    dir: first_code(h)
                        .unwrap_or(h.trim())
                        .trim_end_matches('/')
                        .to_string(),
                    line: line_no,
                    rows: Vec::new(),
                });
                continue;
            }
            let Some(row) = parse_row(line, line_no) else {
                continue;
            };
            match layers.tables.last_mut() {
                Some(t) => t.rows.push(row),
                None => bail!(
                    "docs/architecture.md:{line_no}: a table row before any \
                     `### crate` heading of the Layers section"
                ),
            }
        }
        if !found {
            bail!("docs/architecture.md has no `## Layers` section");
        }
        Ok(layers)
    }

    pub fn table(&self, dir: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.dir == dir)
    }
}

impl Table {
    /// The row of `room`.
    pub fn row(&self, room: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.room == room)
    }
}

/// A table row's room and rooms it may use; `None` for other lines, the header and the
/// separator.
fn parse_row(line: &str, line_no: usize) -> Option<Row> {
    let inner = line.trim().strip_prefix('|')?;
    let mut cells = inner.split('|').map(str::trim);
    let room = unquote(cells.next()?);
    let may = cells.next().unwrap_or("");
    if room.is_empty() || room == "room" || room.starts_with("---") {
        return None;
    }
    let may_use = may
        .split(',')
        .map(unquote)
        .filter(|s| !s.is_empty() && !matches!(s.as_str(), "—" | "-" | "nothing"))
        .collect();
    Some(Row {
        room,
        may_use,
        line: line_no,
        text: line.trim().to_string(),
    })
}

fn unquote(cell: &str) -> String {
    cell.trim().trim_matches('`').trim().to_string()
}

/// The first `code` span of a heading.
fn first_code(s: &str) -> Option<&str> {
    let start = s.find('`')? + 1;
    let len = s[start..].find('`')?;
    Some(&s[start..start + len])
}
