//! Where tensors are made: a site as the macro declares it ([`SiteInfo`]) and as reports
//! show it ([`SiteRef`]), and how both name a place in the source ([`location`]).

use serde::{Deserialize, Serialize};

/// What a [`SiteInfo`] marks in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteKind {
    /// A `let` binding: the label is the variable name.
    Binding,
    /// An assignment (`x = ...`, `x += ...`): the label is the assigned place.
    Assignment,
    /// A store into a container (`self.cache.push(t)`): the label is the receiver text.
    Store,
    /// A site given explicitly through the manual API.
    Explicit,
    /// A loop (`for`, `while`, `loop`): the label is its name (`'epoch`) or empty.
    Loop,
}

impl SiteKind {
    /// The name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            SiteKind::Binding => "binding",
            SiteKind::Assignment => "assignment",
            SiteKind::Store => "store",
            SiteKind::Explicit => "explicit",
            SiteKind::Loop => "loop",
        }
    }
}

/// A static source location plus a label, as the tracker's `Site`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteInfo {
    /// Path as `file!()` gives it.
    pub file: String,
    pub line: u32,
    pub column: u32,
    /// Module path and enclosing function, e.g. `my_crate::train::run`.
    pub function: String,
    pub label: String,
    pub kind: SiteKind,
    /// What `#[track]` saw around the site in the source, when it matters to the
    /// judgement (a store whose container is trimmed, a loop that builds a returned
    /// value). Absent in logs written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<SiteNote>,
    /// The locals the value bound here is computed from, as `#[track]` read them
    /// (`let logits = model.forward(&x)?` → `["model", "x"]`): the data flow between the
    /// sites of one function. Empty when none is known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<String>,
}

/// What the macro saw around a site, beyond its place and label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub enum SiteNote {
    /// A store whose receiver the tracked code also trims (`pop_front`, `truncate`,
    /// `clear`, assigning a new container ...): the line of the first such call, in the
    /// store's file, and the call (`pop_front`). The container is bounded.
    Evicted { line: u32, call: String },
    /// A loop that fills `holder`, a local the function returns (`Ok(heads)`): the loop
    /// builds a value (a model's layers), whose tensors are its product.
    Fills { holder: String },
}

impl SiteInfo {
    /// `file:line`.
    pub fn location(&self) -> String {
        location(&self.file, self.line)
    }
}

/// `file:line`: how reports, the trace and the diff name a place in the source (the
/// `location()` of [`SiteInfo`], [`SiteRef`] and the diff's sites).
pub fn location(file: &str, line: u32) -> String {
    format!("{file}:{line}")
}

/// A site as reports show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteRef {
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub function: String,
    pub label: String,
}

impl From<&SiteInfo> for SiteRef {
    fn from(info: &SiteInfo) -> Self {
        SiteRef {
            file: info.file.clone(),
            line: info.line,
            column: info.column,
            function: info.function.clone(),
            label: info.label.clone(),
        }
    }
}

impl SiteRef {
    /// `file:line`.
    pub fn location(&self) -> String {
        location(&self.file, self.line)
    }

    /// Whether this is the site `info` declares (the same place and label).
    pub fn refers_to(&self, info: &SiteInfo) -> bool {
        self.file == info.file
            && self.line == info.line
            && self.column == info.column
            && self.label == info.label
    }
}
