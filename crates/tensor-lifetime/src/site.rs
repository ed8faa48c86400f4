//! Sites: static source locations with a label and a kind.
//!
//! The macro emits one `static Site` per instrumented place, so tagging a tensor costs no
//! allocation: a record refers to its site by a small id assigned the first time the
//! site is seen.

use std::sync::atomic::{AtomicU32, Ordering};
pub use tensor_lifetime_report::event::SiteKind;
use tensor_lifetime_report::event::{SiteInfo, SiteNote};
use tensor_lifetime_report::Role;

/// A static source location plus a label and a kind.
///
/// Made by `#[track]` or by [`site!`](crate::site!); compared by address.
#[derive(Debug)]
pub struct Site {
    pub file: &'static str,
    pub line: u32,
    pub column: u32,
    /// `module_path!()` of the code.
    pub module: &'static str,
    /// The enclosing function's name (empty when unknown).
    pub function: &'static str,
    /// Variable name, assigned place, store receiver or loop label.
    pub label: &'static str,
    pub kind: SiteKind,
    /// A store whose receiver the tracked code also trims: the trimming call's line (in
    /// `file`) and name. Set by `#[track]` ([`Site::evicted_at`]).
    pub evicted: Option<(u32, &'static str)>,
    /// A loop that fills a local the function returns: that local's name
    /// ([`Site::fills`]).
    pub fills: Option<&'static str>,
    /// The role of the tensors first seen here, when the place says it (a loop's item is
    /// an `input`, a store in an `impl Optimizer` is `optimizer_state`): set by `#[track]`
    /// ([`Site::with_role`]).
    pub role: Option<Role>,
    /// The locals the value bound here is computed from (`let logits =
    /// model.forward(&x)?` → `["model", "x"]`): set by `#[track]` ([`Site::from`]).
    pub from: &'static [&'static str],
    id: AtomicU32,
}

impl Site {
    /// A site; `const` so that it can live in a `static`.
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        file: &'static str,
        line: u32,
        column: u32,
        module: &'static str,
        function: &'static str,
        label: &'static str,
        kind: SiteKind,
    ) -> Site {
        Site {
            file,
            line,
            column,
            module,
            function,
            label,
            kind,
            evicted: None,
            fills: None,
            role: None,
            from: &[],
            id: AtomicU32::new(0),
        }
    }

    /// The same store site, whose container the code also trims at `line` with `call`.
    pub const fn evicted_at(mut self, line: u32, call: &'static str) -> Site {
        self.evicted = Some((line, call));
        self
    }

    /// The same loop site, for a loop that fills `holder`, a local the function returns.
    pub const fn fills(mut self, holder: &'static str) -> Site {
        self.fills = Some(holder);
        self
    }

    /// The same site, whose tensors have `role` (see the report crate's `roles` module).
    pub const fn with_role(mut self, role: Role) -> Site {
        self.role = Some(role);
        self
    }

    /// The same site, whose value is computed from the locals `from`.
    pub const fn from(mut self, from: &'static [&'static str]) -> Site {
        self.from = from;
        self
    }

    /// The id assigned by the tracker, 0 before the first use.
    #[inline]
    pub(crate) fn id(&self) -> u32 {
        self.id.load(Ordering::Relaxed)
    }

    pub(crate) fn set_id(&self, id: u32) {
        self.id.store(id, Ordering::Relaxed);
    }

    /// `file:line`.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    pub(crate) fn info(&self) -> SiteInfo {
        let function = if self.function.is_empty() {
            self.module.to_string()
        } else {
            format!("{}::{}", self.module, self.function)
        };
        SiteInfo {
            file: self.file.to_string(),
            line: self.line,
            column: self.column,
            function,
            label: self.label.to_string(),
            kind: self.kind,
            note: match (self.evicted, self.fills) {
                (Some((line, call)), _) => Some(SiteNote::Evicted {
                    line,
                    call: call.to_string(),
                }),
                (None, Some(holder)) => Some(SiteNote::Fills {
                    holder: holder.to_string(),
                }),
                (None, None) => None,
            },
            from: self.from.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// The site of the caller's place (`#[track_caller]` functions such as
/// [`crate::mark_role`]), made once per place and kept for the process.
pub(crate) fn caller_site(label: &'static str) -> &'static Site {
    use parking_lot::Mutex;
    use std::collections::HashMap;
    type Places = HashMap<(&'static str, u32, u32), &'static Site>;
    static SITES: Mutex<Option<Places>> = Mutex::new(None);
    let at = std::panic::Location::caller();
    let key = (at.file(), at.line(), at.column());
    let mut sites = SITES.lock();
    sites
        .get_or_insert_with(HashMap::new)
        .entry(key)
        .or_insert_with(|| {
            Box::leak(Box::new(Site::new(
                at.file(),
                at.line(),
                at.column(),
                "",
                "",
                label,
                SiteKind::Explicit,
            )))
        })
}

/// A `&'static Site` for the place where it is written.
///
/// ```
/// let site = tensor_lifetime::site!("batch");
/// assert_eq!(site.label, "batch");
/// let store = tensor_lifetime::site!(store "self.cache");
/// assert_eq!(store.kind, tensor_lifetime::SiteKind::Store);
/// ```
#[macro_export]
macro_rules! site {
    (store $label:expr) => {
        $crate::site!(@kind $crate::SiteKind::Store, $label)
    };
    (loop $label:expr) => {
        $crate::site!(@kind $crate::SiteKind::Loop, $label)
    };
    (@kind $kind:expr, $label:expr) => {{
        static __TL_SITE: $crate::Site = $crate::Site::new(
            ::core::file!(),
            ::core::line!(),
            ::core::column!(),
            ::core::module_path!(),
            "",
            $label,
            $kind,
        );
        &__TL_SITE
    }};
    ($label:expr) => {
        $crate::site!(@kind $crate::SiteKind::Explicit, $label)
    };
}
