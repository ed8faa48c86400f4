//! Who keeps a survivor alive: as the tracker sees it, by site id ([`HolderSpec`], in
//! the event log), and as reports show it, by place ([`HolderRef`]).

use super::site::location;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Who keeps a survivor alive, as far as the tracker can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HolderSpec {
    /// The survivor went through this store site (`self.cache.push(t)`).
    Store { site: u32 },
    /// The survivor is a node of the autograd graph of a survivor born at `site`.
    Graph { site: u32 },
    /// The survivor shares its storage with a survivor born at `site`.
    View { site: u32 },
    /// Nothing the tracker saw holds it (a global, a clone outside tracked code...).
    Unknown,
}

/// One holder and how many of a site's survivors it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderCount {
    #[serde(flatten)]
    pub holder: HolderSpec,
    pub count: u64,
}

/// How a holder keeps survivors alive (the kinds of [`HolderSpec`]); in
/// JSON `store`, `graph`, `view` or `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HolderKind {
    /// The survivors went through a store site (`self.cache.push(t)`).
    Store,
    /// They are nodes of the autograd graph of a survivor of the holding site.
    Graph,
    /// They share their storage with a survivor of the holding site.
    View,
    /// Nothing the tracker saw holds them.
    Unknown,
}

/// Who holds survivors of a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderRef {
    pub kind: HolderKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The receiver text of a store (`self.cache`), or the label of the holding site.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Survivors held this way.
    pub count: u64,
}

impl fmt::Display for HolderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = match (&self.file, self.line) {
            (Some(file), Some(line)) => format!(" at {}", location(file, line)),
            _ => String::new(),
        };
        let label = self.label.as_deref().unwrap_or("?");
        match self.kind {
            HolderKind::Store => write!(f, "stored into `{label}`{at}"),
            HolderKind::Graph => write!(f, "held by the autograd graph of `{label}`{at}"),
            HolderKind::View => write!(f, "shares storage with `{label}`{at}"),
            HolderKind::Unknown => write!(
                f,
                "no holder seen (a variable outside the loop, a global, or untracked code)"
            ),
        }
    }
}
