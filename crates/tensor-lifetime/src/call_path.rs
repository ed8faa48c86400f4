//! Call paths: which `#[track]`ed functions were on the stack when a tensor was created.
//!
//! Every tracked function (with a body the macro instruments, not `async`) starts with
//! [`enter`], which moves this thread's *current node* to the child of the current node
//! for its function, and returns a guard that moves it back when the function returns or
//! unwinds. Nothing is unwound or symbolized: a node is a `(parent, function)` pair,
//! interned once per process and leaked (there are as many as distinct paths in the
//! program; recursion deeper than [`MAX_DEPTH`] stays at the node of that depth). A probe
//! reads the current node's id (one thread-local load) into its entry; a record keeps it;
//! a sweep summary lists the paths of a site's survivors, and the tracker declares each
//! path once in the event log ([`Event::CallPath`]) before a summary refers to it.
//!
//! The fast path of [`enter`] is a thread-local load, one atomic load (the function's
//! cached child: the node made last for it, valid when its parent is the current node)
//! and a thread-local store; the guard's drop is one store. A function reached from a
//! new parent takes a global lock once per (parent, function) pair to intern the node.
//!
//! The `line` of a call path's frame is the line of the function's definition (the call
//! line is not known without unwinding).
//!
//! [`Event::CallPath`]: tensor_lifetime_report::Event::CallPath

// why: a function's cached node is an atomic pointer to a leaked, immutable node.
#![allow(unsafe_code)]

use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::OnceLock;
use tensor_lifetime_report::CallFrame;

/// Paths deeper than this share the node of this depth.
pub const MAX_DEPTH: u32 = 64;

/// A `#[track]`ed function: its name (`Type::method` in an impl) and place. The macro
/// emits one `static` per function.
#[derive(Debug)]
pub struct FnSite {
    pub function: &'static str,
    pub file: &'static str,
    pub line: u32,
    /// The node made last for this function (valid when its parent is the current node).
    last: AtomicPtr<CallNode>,
}

impl FnSite {
    pub const fn new(function: &'static str, file: &'static str, line: u32) -> FnSite {
        FnSite {
            function,
            file,
            line,
            last: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

/// One call path: a function called with `parent` on the stack (none: outermost).
#[derive(Debug)]
pub(crate) struct CallNode {
    pub(crate) id: u32,
    parent: Option<&'static CallNode>,
    function: &'static FnSite,
    depth: u32,
}

thread_local! {
    static CURRENT: Cell<Option<&'static CallNode>> = const { Cell::new(None) };
}

/// Every node, by id - 1, and the nodes by (parent, function) address.
struct Nodes {
    by_id: Vec<&'static CallNode>,
    by_pair: HashMap<(usize, usize), &'static CallNode>,
}

/// How many nodes exist (read without the lock at every iteration end).
static COUNT: AtomicU32 = AtomicU32::new(0);

fn nodes() -> &'static Mutex<Nodes> {
    static NODES: OnceLock<Mutex<Nodes>> = OnceLock::new();
    NODES.get_or_init(|| {
        Mutex::new(Nodes {
            by_id: Vec::new(),
            by_pair: HashMap::new(),
        })
    })
}

/// Restores the thread's previous node when the tracked function returns or unwinds.
#[must_use]
#[derive(Debug)]
pub struct CallGuard {
    previous: Option<&'static CallNode>,
}

impl Drop for CallGuard {
    #[inline]
    fn drop(&mut self) {
        let previous = self.previous;
        let _ = CURRENT.try_with(|c| c.set(previous));
    }
}

/// Enters tracked function `site` on this thread (see the module docs).
#[inline]
pub fn enter(site: &'static FnSite) -> CallGuard {
    let previous = CURRENT.try_with(|c| c.get()).unwrap_or(None);
    let cached = site.last.load(Ordering::Acquire);
    // SAFETY: only `child` stores into `FnSite::last`, and only pointers of nodes it
    // leaked (`Box::leak`): never freed, never mutated, published with `Release` and read
    // with `Acquire`, so a non-null pointer is a valid `&'static CallNode`.
    let node = match unsafe { cached.as_ref() } {
        Some(n) if same(n.parent, previous) => n,
        _ => child(previous, site),
    };
    let _ = CURRENT.try_with(|c| c.set(Some(node)));
    CallGuard { previous }
}

#[inline]
fn same(a: Option<&'static CallNode>, b: Option<&'static CallNode>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => std::ptr::eq(a, b),
        _ => false,
    }
}

/// The node of `site` called under `parent`: interned (slow path, a global lock).
#[cold]
#[inline(never)]
fn child(parent: Option<&'static CallNode>, site: &'static FnSite) -> &'static CallNode {
    let depth = parent.map_or(0, |p| p.depth + 1);
    if depth >= MAX_DEPTH {
        if let Some(p) = parent {
            return p;
        }
    }
    let key = (
        parent.map_or(0, |p| p as *const CallNode as usize),
        site as *const FnSite as usize,
    );
    let mut nodes = nodes().lock();
    let node = match nodes.by_pair.get(&key) {
        Some(n) => *n,
        None => {
            let id = nodes.by_id.len() as u32 + 1;
            let node: &'static CallNode = Box::leak(Box::new(CallNode {
                id,
                parent,
                function: site,
                depth,
            }));
            nodes.by_id.push(node);
            nodes.by_pair.insert(key, node);
            COUNT.store(id, Ordering::Release);
            node
        }
    };
    site.last
        .store(node as *const CallNode as *mut CallNode, Ordering::Release);
    node
}

/// The id of this thread's current call path (0: no tracked function on the stack).
#[inline]
pub(crate) fn current() -> u32 {
    CURRENT
        .try_with(|c| c.get().map_or(0, |n| n.id))
        .unwrap_or(0)
}

/// How many paths exist (ids are `1..=count`).
pub(crate) fn count() -> u32 {
    COUNT.load(Ordering::Acquire)
}

/// The frames of path `id`, outermost first (empty for 0 or an unknown id).
pub(crate) fn frames(id: u32) -> Vec<CallFrame> {
    let node = {
        let nodes = nodes().lock();
        match id.checked_sub(1).and_then(|i| nodes.by_id.get(i as usize)) {
            Some(n) => *n,
            None => return Vec::new(),
        }
    };
    let mut out = Vec::with_capacity(node.depth as usize + 1);
    let mut at = Some(node);
    while let Some(n) = at {
        out.push(CallFrame {
            function: n.function.function.to_string(),
            file: n.function.file.to_string(),
            line: n.function.line,
        });
        at = n.parent;
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    static OUTER: FnSite = FnSite::new("outer", "a.rs", 1);
    static HELPER: FnSite = FnSite::new("helper", "a.rs", 9);
    static OTHER: FnSite = FnSite::new("other", "a.rs", 5);

    fn names(id: u32) -> Vec<String> {
        frames(id).into_iter().map(|f| f.function).collect()
    }

    #[test]
    fn a_helper_called_from_two_places_has_two_paths() {
        assert_eq!(current(), 0);
        let (a, b);
        {
            let _o = enter(&OUTER);
            let _h = enter(&HELPER);
            a = current();
        }
        {
            let _o = enter(&OTHER);
            let _h = enter(&HELPER);
            b = current();
            assert_eq!(names(b), ["other", "helper"]);
        }
        assert_eq!(current(), 0);
        assert_ne!(a, b);
        assert_eq!(names(a), ["outer", "helper"]);
        // Again from the first place: the same path as before.
        let _o = enter(&OUTER);
        let _h = enter(&HELPER);
        assert_eq!(current(), a);
    }

    #[test]
    fn deep_recursion_stops_making_nodes() {
        static REC: FnSite = FnSite::new("rec", "a.rs", 20);
        fn rec(n: u32) -> u32 {
            let _g = enter(&REC);
            if n == 0 {
                current()
            } else {
                rec(n - 1)
            }
        }
        let deep = rec(200);
        assert_eq!(frames(deep).len(), MAX_DEPTH as usize);
        assert_eq!(rec(300), deep);
    }
}
