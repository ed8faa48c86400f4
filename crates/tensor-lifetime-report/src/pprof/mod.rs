//! The live tensors as a pprof profile (`go tool pprof`, Grafana Pyroscope, speedscope).
//!
//! A [`LiveProfile`] is what was live at one moment, grouped by creation site, call path,
//! role, device and holder ([`LiveGroup`]), and what was born over the run by site
//! ([`Allocated`]). [`LiveProfile::encode`] writes it as the gzipped protocol buffer of
//! pprof's `profile.proto` (`proto/profile.proto`, upstream's, vendored; the messages in
//! `proto.rs` are prost-build's output for it, checked by `tests/pprof_proto.rs`):
//!
//! - sample types `inuse_space`/`bytes`, `inuse_objects`/`count` (the default, the live
//!   tensors: each storage counted once, for its oldest tensor) and
//!   `alloc_space`/`bytes`, `alloc_objects`/`count` (every tensor born over the run, its
//!   own bytes);
//! - a stack per sample: the creation site as the leaf, a function named
//!   `` `x` (src/data.rs:30) `` (variable and place, with its file and line), under one
//!   location per `#[track]`ed function of the call path that created it;
//! - labels `role`, `device`, `holder` (who keeps it alive), `site` and `variable`.
//!
//! The tracker builds it in process (`tensor_lifetime::write_pprof`); [`LiveReplay`]
//! builds it from an event log, at its end, its peak or an iteration end.

// Generated, compared with prost-build's output by a test: formatted as generated.
#[rustfmt::skip]
#[allow(clippy::all, missing_debug_implementations)]
mod proto;
mod replay;

pub use replay::{At, LiveReplay};

use crate::model::SiteRef;
use crate::roles::{CallFrame, Role};
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;
use std::collections::HashMap;
use std::io::Write;

/// Live tensors of one creation site, call path, role, device and holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveGroup {
    pub site: SiteRef,
    /// The `#[track]`ed functions that created them, outermost first.
    pub call_path: Vec<CallFrame>,
    pub role: Role,
    /// `cpu`, `cuda:0`...
    pub device: String,
    /// Who keeps them alive, as the report says it (`stored into `self.cache` at ...`).
    pub holder: String,
    /// Their storages' bytes, each storage counted once.
    pub bytes: u64,
    pub tensors: u64,
}

/// The tensors born at one site over the run (dead or alive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocated {
    pub site: SiteRef,
    pub call_path: Vec<CallFrame>,
    /// Their own bytes (a view's, not its storage's).
    pub bytes: u64,
    pub tensors: u64,
}

impl Allocated {
    /// What every site of `catalog` made so far, by site, with the call path `path` gives
    /// each site: the profile's allocated samples, from a log or in process alike.
    pub fn by_site(
        catalog: &crate::analysis::Catalog,
        path: impl Fn(u32) -> Vec<CallFrame>,
    ) -> Vec<Allocated> {
        let mut births: Vec<_> = catalog.births_by_site().collect();
        births.sort_unstable_by_key(|(site, _)| *site);
        births
            .into_iter()
            .map(|(site, b)| Allocated {
                site: catalog.site_ref(site),
                call_path: path(site),
                bytes: b.bytes,
                tensors: b.tensors,
            })
            .collect()
    }
}

/// What was live at one moment and what was born until then.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveProfile {
    pub live: Vec<LiveGroup>,
    pub allocated: Vec<Allocated>,
    /// The moment, in nanoseconds since the Unix epoch (0: unknown).
    pub time_unix_ns: i64,
    /// From the run's start to the moment.
    pub duration_ns: i64,
    /// Lines shown by `pprof -comments` (what the profile is of).
    pub comments: Vec<String>,
}

impl LiveProfile {
    /// Live bytes in the profile.
    pub fn live_bytes(&self) -> u64 {
        self.live.iter().map(|g| g.bytes).sum()
    }

    /// The gzipped `profile.proto` message that pprof reads.
    pub fn encode(&self) -> Vec<u8> {
        let bytes = Encoder::default().profile(self).encode_to_vec();
        let mut gz = GzEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::default());
        gz.write_all(&bytes).expect("writing to memory");
        gz.finish().expect("writing to memory")
    }
}

/// The string table, functions and locations of one profile being built.
#[derive(Default)]
struct Encoder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<proto::Function>,
    locations: Vec<proto::Location>,
    /// A location per (function name, file, line): one function each.
    location_ids: HashMap<(String, String, u32), u64>,
}

/// The profile's mapping: one, saying that the functions, files and lines are known (so
/// pprof tries no symbolization).
const MAPPING: u64 = 1;

impl Encoder {
    /// The string's index in the table (index 0 is the empty string, as pprof requires).
    fn string(&mut self, s: &str) -> i64 {
        if self.strings.is_empty() {
            self.strings.push(String::new());
            self.string_ids.insert(String::new(), 0);
        }
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn location(&mut self, name: &str, file: &str, line: u32) -> u64 {
        let key = (name.to_string(), file.to_string(), line);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let id = self.locations.len() as u64 + 1;
        let function = proto::Function {
            id,
            name: self.string(name),
            system_name: self.string(name),
            filename: self.string(file),
            start_line: i64::from(line),
        };
        self.functions.push(function);
        self.locations.push(proto::Location {
            id,
            mapping_id: MAPPING,
            address: 0,
            line: vec![proto::Line {
                function_id: id,
                line: i64::from(line),
                column: 0,
            }],
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }

    /// The stack of a tensor born at `site` by `path`: the site first (the leaf).
    fn stack(&mut self, site: &SiteRef, path: &[CallFrame]) -> Vec<u64> {
        let leaf = format!("`{}` ({})", site.label, site.location());
        let mut ids = vec![self.location(&leaf, &site.file, site.line)];
        for f in path.iter().rev() {
            ids.push(self.location(&f.function, &f.file, f.line));
        }
        ids
    }

    fn label(&mut self, key: &str, value: &str) -> proto::Label {
        proto::Label {
            key: self.string(key),
            str: self.string(value),
            num: 0,
            num_unit: 0,
        }
    }

    fn site_labels(&mut self, site: &SiteRef) -> Vec<proto::Label> {
        vec![
            self.label("site", &site.location()),
            self.label("variable", &site.label),
        ]
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }

    fn profile(mut self, p: &LiveProfile) -> proto::Profile {
        let sample_type = vec![
            self.value_type("inuse_space", "bytes"),
            self.value_type("inuse_objects", "count"),
            self.value_type("alloc_space", "bytes"),
            self.value_type("alloc_objects", "count"),
        ];
        let default_sample_type = self.string("inuse_space");
        let mut sample = Vec::with_capacity(p.live.len() + p.allocated.len());
        for g in &p.live {
            let location_id = self.stack(&g.site, &g.call_path);
            let mut label = self.site_labels(&g.site);
            label.push(self.label("role", g.role.as_str()));
            label.push(self.label("device", &g.device));
            label.push(self.label("holder", &g.holder));
            sample.push(proto::Sample {
                location_id,
                value: vec![saturate(g.bytes), saturate(g.tensors), 0, 0],
                label,
            });
        }
        for a in &p.allocated {
            let location_id = self.stack(&a.site, &a.call_path);
            let label = self.site_labels(&a.site);
            sample.push(proto::Sample {
                location_id,
                value: vec![0, 0, saturate(a.bytes), saturate(a.tensors)],
                label,
            });
        }
        let comment = p.comments.iter().map(|c| self.string(c)).collect();
        let mapping = vec![proto::Mapping {
            id: MAPPING,
            filename: self.string("tensor-lifetime"),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            ..proto::Mapping::default()
        }];
        proto::Profile {
            sample_type,
            sample,
            mapping,
            location: self.locations,
            function: self.functions,
            string_table: self.strings,
            time_nanos: p.time_unix_ns,
            duration_nanos: p.duration_ns,
            comment,
            default_sample_type,
            ..proto::Profile::default()
        }
    }
}

fn saturate(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::GzDecoder;
    use std::io::Read;

    fn site(label: &str, line: u32) -> SiteRef {
        SiteRef {
            file: "src/data.rs".into(),
            line,
            column: 9,
            function: "Dataset::batch".into(),
            label: label.into(),
        }
    }

    fn decode(bytes: &[u8]) -> proto::Profile {
        let mut raw = Vec::new();
        GzDecoder::new(bytes).read_to_end(&mut raw).expect("gzip");
        proto::Profile::decode(raw.as_slice()).expect("a profile message")
    }

    #[test]
    fn a_live_group_is_a_sample_with_its_stack_leaf_first_and_its_labels() {
        let path = vec![
            CallFrame {
                function: "train".into(),
                file: "src/main.rs".into(),
                line: 10,
            },
            CallFrame {
                function: "Dataset::batch".into(),
                file: "src/data.rs".into(),
                line: 25,
            },
        ];
        let profile = LiveProfile {
            live: vec![LiveGroup {
                site: site("x", 30),
                call_path: path.clone(),
                role: Role::Input,
                device: "cpu".into(),
                holder: "stored into `self.cache`".into(),
                bytes: 1 << 20,
                tensors: 4,
            }],
            allocated: vec![Allocated {
                site: site("x", 30),
                call_path: path,
                bytes: 5 << 20,
                tensors: 20,
            }],
            ..LiveProfile::default()
        };
        let p = decode(&profile.encode());
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(p.string_table[0], "");
        let types: Vec<_> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(
            types,
            [
                ("inuse_space", "bytes"),
                ("inuse_objects", "count"),
                ("alloc_space", "bytes"),
                ("alloc_objects", "count")
            ]
        );
        assert_eq!(s(p.default_sample_type), "inuse_space");
        assert_eq!(p.sample[0].value, [1 << 20, 4, 0, 0]);
        assert_eq!(p.sample[1].value, [0, 0, 5 << 20, 20]);
        // Both samples share the stack: three locations, the site first.
        assert_eq!(p.sample[0].location_id, p.sample[1].location_id);
        let names: Vec<&str> = p.sample[0]
            .location_id
            .iter()
            .map(|id| {
                let loc = &p.location[*id as usize - 1];
                let f = &p.function[loc.line[0].function_id as usize - 1];
                s(f.name)
            })
            .collect();
        assert_eq!(names, ["`x` (src/data.rs:30)", "Dataset::batch", "train"]);
        let labels: Vec<_> = p.sample[0]
            .label
            .iter()
            .map(|l| (s(l.key), s(l.str)))
            .collect();
        assert_eq!(
            labels,
            [
                ("site", "src/data.rs:30"),
                ("variable", "x"),
                ("role", "input"),
                ("device", "cpu"),
                ("holder", "stored into `self.cache`")
            ]
        );
    }
}
