//! Builders of single events, for tests of the judgement: the fields a test means, the
//! rest zero or the tracker's usual value.
//!
//! ```
//! use tensor_lifetime_test_support::events::{iteration_end, loop_start, site};
//! use tensor_lifetime_report::Analysis;
//!
//! let mut a = Analysis::default();
//! a.apply(&site(0, "'loop").into());
//! a.apply(&site(1, "t").into());
//! a.apply(&loop_start(1, 0).into());
//! for i in 0..5 {
//!     a.apply(&iteration_end(1, i).site(1).survivors(i + 1).born(0, i).into());
//! }
//! assert!(a.report().has_leaks());
//! ```

use tensor_lifetime_report::event::{
    Event, HolderCount, HolderSpec, MemorySample, SiteInfo, SiteKind, SiteNote, SiteSweep,
};

/// Bytes of one survivor unless a test says otherwise ([`IterationEnd::bytes`]).
pub const SURVIVOR_BYTES: u64 = 1024;

/// A site declaration: `id` at `src/train.rs:(10 + id):5` in `train`, labelled `label`,
/// a binding ([`Site::kind`], [`Site::note`] change it).
pub fn site(id: u32, label: &str) -> Site {
    Site {
        id,
        info: SiteInfo {
            file: "src/train.rs".into(),
            line: 10 + id,
            column: 5,
            function: "train".into(),
            label: label.into(),
            kind: SiteKind::Binding,
            note: None,
            from: Vec::new(),
        },
    }
}

/// A [`site`] being built.
#[derive(Debug, Clone)]
pub struct Site {
    id: u32,
    info: SiteInfo,
}

impl Site {
    pub fn kind(mut self, kind: SiteKind) -> Self {
        self.info.kind = kind;
        self
    }

    pub fn note(mut self, note: SiteNote) -> Self {
        self.info.note = Some(note);
        self
    }
}

impl From<Site> for Event {
    fn from(s: Site) -> Event {
        Event::Site {
            id: s.id,
            info: s.info,
        }
    }
}

/// A loop frame opened: `frame` of the loop at `site`, named `loop{site}`, outermost on
/// thread 1 ([`LoopStart::parent`] nests it).
pub fn loop_start(frame: u64, site: u32) -> LoopStart {
    LoopStart(Event::LoopStart {
        t_ns: 0,
        frame,
        site,
        name: format!("loop{site}"),
        parent: None,
        parent_iteration: None,
        thread: 1,
        session: 0,
        warmup: None,
        window: None,
    })
}

/// A [`loop_start`] being built.
#[derive(Debug, Clone)]
pub struct LoopStart(Event);

impl LoopStart {
    /// Nested in iteration `iteration` of frame `frame`.
    pub fn parent(mut self, frame: u64, iteration: u64) -> Self {
        if let Event::LoopStart {
            parent,
            parent_iteration,
            ..
        } = &mut self.0
        {
            (*parent, *parent_iteration) = (Some(frame), Some(iteration));
        }
        self
    }

    pub fn name(mut self, to: &str) -> Self {
        if let Event::LoopStart { name, .. } = &mut self.0 {
            *name = to.to_string();
        }
        self
    }
}

impl From<LoopStart> for Event {
    fn from(l: LoopStart) -> Event {
        l.0
    }
}

/// The end of iteration `iteration` of `frame`, with no survivors until
/// [`IterationEnd::site`] adds a site's.
pub fn iteration_end(frame: u64, iteration: u64) -> IterationEnd {
    IterationEnd {
        t_ns: 0,
        frame,
        iteration,
        live: None,
        sites: Vec::new(),
    }
}

/// An [`iteration_end`] being built: each setter after [`IterationEnd::site`] describes
/// that site's survivors.
#[derive(Debug, Clone)]
pub struct IterationEnd {
    t_ns: u64,
    frame: u64,
    iteration: u64,
    /// Live tensors and bytes, when not the survivors' sums.
    live: Option<(u64, u64)>,
    sites: Vec<SiteSweep>,
}

impl IterationEnd {
    /// Survivors of `site` follow (refcount 1; none until [`IterationEnd::survivors`]).
    pub fn site(mut self, site: u32) -> Self {
        self.sites.push(SiteSweep {
            site,
            refcount: 1,
            ..SiteSweep::default()
        });
        self
    }

    fn last(&mut self) -> &mut SiteSweep {
        self.sites
            .last_mut()
            .expect("a survivors' setter comes after .site(id)")
    }

    /// `n` survivors of [`SURVIVOR_BYTES`] each.
    pub fn survivors(mut self, n: u64) -> Self {
        let s = self.last();
        (s.survivors, s.bytes) = (n, n * SURVIVOR_BYTES);
        self
    }

    /// Born in iterations `first..=last` of the frame, every one of them.
    pub fn born(mut self, first: u64, last: u64) -> Self {
        let s = self.last();
        s.iterations = last.saturating_sub(first) + 1;
        (s.first_iteration, s.last_iteration) = (first, last);
        self
    }

    /// The bytes the survivors keep.
    pub fn bytes(mut self, bytes: u64) -> Self {
        self.last().bytes = bytes;
        self
    }

    /// `count` of the survivors held by `holder`.
    pub fn holder(mut self, holder: HolderSpec, count: u64) -> Self {
        self.last().holders.push(HolderCount { holder, count });
        self
    }

    /// A survivor's autograd graph holds `tensors` others, of `bytes`.
    pub fn graph(mut self, tensors: u64, bytes: u64) -> Self {
        let s = self.last();
        (s.graph_tensors, s.graph_bytes) = (tensors, bytes);
        self
    }

    /// The survivors are views of `view_bytes` pinning storages of `storage_bytes`.
    pub fn views(mut self, view_bytes: u64, storage_bytes: u64) -> Self {
        let s = self.last();
        (s.view_bytes, s.view_storage_bytes) = (view_bytes, storage_bytes);
        self
    }

    /// Live tensors and bytes of the whole process (the survivors' sums otherwise).
    pub fn live(mut self, tensors: u64, bytes: u64) -> Self {
        self.live = Some((tensors, bytes));
        self
    }

    /// At `t_ns` (0 otherwise).
    pub fn at(mut self, t_ns: u64) -> Self {
        self.t_ns = t_ns;
        self
    }
}

impl From<IterationEnd> for Event {
    fn from(e: IterationEnd) -> Event {
        let (live_tensors, live_bytes) = e.live.unwrap_or_else(|| {
            e.sites
                .iter()
                .fold((0, 0), |(t, b), s| (t + s.survivors, b + s.bytes))
        });
        Event::IterationEnd {
            t_ns: e.t_ns,
            frame: e.frame,
            iteration: e.iteration,
            duration_ns: 0,
            live_tensors,
            live_bytes,
            sites: e.sites,
            roles: Vec::new(),
        }
    }
}

/// Frame `frame` closed after `iterations` iterations.
pub fn loop_end(frame: u64, iterations: u64) -> Event {
    Event::LoopEnd {
        t_ns: 0,
        frame,
        iterations,
    }
}

/// A memory sample of `device`: `tracked` bytes and a pool's `pool_used` (used and
/// reserved alike).
pub fn pool_sample(device: &str, tracked: u64, pool_used: u64) -> Event {
    Event::Memory {
        t_ns: 0,
        device: device.into(),
        sample: MemorySample {
            tracked,
            pool_used: Some(pool_used),
            pool_reserved: Some(pool_used),
            ..MemorySample::default()
        },
    }
}

/// A tensor born at `site` outside any loop: tensor 0, an `f32` on `cuda:0`, no bytes
/// and no shape until [`Born::bytes`], [`Born::shape`] say.
pub fn born(site: u32) -> Born {
    Born(Event::Born {
        t_ns: 0,
        tensor: 0,
        site,
        frame: None,
        iteration: 0,
        bytes: 0,
        storage: 0,
        shape: None,
        dtype: "f32".into(),
        device: "cuda:0".into(),
        thread: 1,
    })
}

/// A [`born`] being built.
#[derive(Debug, Clone)]
pub struct Born(Event);

impl Born {
    /// Born in iteration `iteration` of frame `frame`.
    pub fn during(mut self, frame: u64, iteration: u64) -> Self {
        if let Event::Born {
            frame: f,
            iteration: i,
            ..
        } = &mut self.0
        {
            (*f, *i) = (Some(frame), iteration);
        }
        self
    }

    /// Its storage's bytes.
    pub fn bytes(mut self, to: u64) -> Self {
        if let Event::Born { bytes, .. } = &mut self.0 {
            *bytes = to;
        }
        self
    }

    pub fn shape(mut self, to: Vec<usize>) -> Self {
        if let Event::Born { shape, .. } = &mut self.0 {
            *shape = Some(to);
        }
        self
    }
}

impl From<Born> for Event {
    fn from(b: Born) -> Event {
        b.0
    }
}
