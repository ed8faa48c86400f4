//! A Chrome Trace Event file of a run, for ui.perfetto.dev and chrome://tracing.
//!
//! The JSON object format: `{"traceEvents":[...],"displayTimeUnit":"ms"}` with
//!
//! - `M` metadata events naming the process and its threads;
//! - `C` counter events: `live bytes` and `live tensors` at each iteration end, and per
//!   device `pool used (DEV)`, `pool reserved (DEV)`, `device used (DEV)` from memory
//!   samples (one counter per name, each with a single series, so the tracks are not
//!   stacked on each other; a value equal to the counter's last one is left out, as a
//!   counter holds its value until the next);
//! - `X` complete events: one per loop iteration (`'epoch #3`) and one per loop run,
//!   on the thread that ran the loop, so nested loops nest;
//! - an `i` instant event (process scope, category `sampling`) where the log says the
//!   process samples its tensors: the counters after it are estimates;
//! - `i` instant events (global scope) for the report's findings, at the iteration end
//!   where the judging loop reached the finding's iteration with the finding's survivors
//!   (or at the end of the trace when no such point is seen).
//!
//! Times are microseconds (`ts`, `dur`) written with nanosecond decimals from the events'
//! `t_ns`, so nothing is rounded and nested slices stay nested.
//!
//! [`TraceWriter`] streams: each event is written as it is applied, so memory is bounded by
//! the open loop frames, threads and sites. Findings come from a [`crate::Report`] made
//! before (a first pass over the log through [`crate::Analysis`]).

use crate::event::{Event, MemorySample, SiteInfo, SiteSweep};
use crate::report::Finding;
use crate::size::format_bytes;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{self, Write};

/// The process id used when the log has no header.
const DEFAULT_PID: u32 = 1;

#[derive(Debug)]
struct Frame {
    name: String,
    site: u32,
    tid: u32,
    start_ns: u64,
    /// End of the frame's last iteration: the next one's slice starts no earlier.
    last_end_ns: u64,
    /// Start of the first loop opened in the running iteration: its slice starts no
    /// later.
    first_child_ns: Option<u64>,
}

/// An iteration end, as its slice shows it.
#[derive(Debug)]
struct IterationSlice {
    t_ns: u64,
    frame: u64,
    iteration: u64,
    duration_ns: u64,
    live_tensors: u64,
    live_bytes: u64,
}

#[derive(Debug)]
struct PendingFinding {
    finding: Finding,
    written: bool,
}

/// Writes a trace while events are applied. See the module docs.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    first: bool,
    pid: u32,
    process_named: bool,
    /// Set by [`TraceWriter::begin_process`]: the process's name, and its pid is kept
    /// whatever the log's header says.
    process_label: Option<String>,
    threads: HashMap<u64, u32>,
    sites: HashMap<u32, SiteInfo>,
    frames: HashMap<u64, Frame>,
    findings: Vec<PendingFinding>,
    t_last: u64,
    written: u64,
    /// The last value written per counter: a counter is a step function, so a repeated
    /// value adds nothing and is left out.
    counters: HashMap<String, u64>,
}

fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

impl<W: Write> TraceWriter<W> {
    /// Starts the trace; `findings` become instant events.
    pub fn new(mut out: W, findings: &[Finding]) -> io::Result<Self> {
        out.write_all(b"{\"traceEvents\":[\n")?;
        Ok(TraceWriter {
            out,
            first: true,
            pid: DEFAULT_PID,
            process_named: false,
            process_label: None,
            threads: HashMap::new(),
            sites: HashMap::new(),
            frames: HashMap::new(),
            findings: findings
                .iter()
                .map(|f| PendingFinding {
                    finding: f.clone(),
                    written: false,
                })
                .collect(),
            t_last: 0,
            written: 0,
            counters: HashMap::new(),
        })
    }

    /// Trace events written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes one trace event: `ph`, `name`, `ts` (ns) and the rest as JSON fields.
    fn emit(&mut self, ph: &str, name: &str, ts_ns: u64, tid: u32, rest: &str) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.written += 1;
        write!(
            self.out,
            "{{\"ph\":\"{ph}\",\"name\":{},\"pid\":{},\"tid\":{tid},\"ts\":{}{rest}}}",
            Value::from(name),
            self.pid,
            micros(ts_ns)
        )
    }

    fn name_process(&mut self) -> io::Result<()> {
        if !self.process_named {
            self.process_named = true;
            let name = match &self.process_label {
                Some(label) => label.clone(),
                None => format!("tensor-lifetime (pid {})", self.pid),
            };
            let args = json!({ "name": name });
            self.emit("M", "process_name", 0, 0, &format!(",\"args\":{args}"))?;
        }
        Ok(())
    }

    fn tid(&mut self, thread: u64) -> io::Result<u32> {
        if let Some(t) = self.threads.get(&thread) {
            return Ok(*t);
        }
        self.name_process()?;
        let tid = self.threads.len() as u32 + 1;
        self.threads.insert(thread, tid);
        let args = json!({ "name": format!("thread {thread}") });
        self.emit("M", "thread_name", 0, tid, &format!(",\"args\":{args}"))?;
        Ok(tid)
    }

    fn counter(&mut self, name: &str, arg: &str, ts_ns: u64, value: u64) -> io::Result<()> {
        if self.counters.get(name) == Some(&value) {
            return Ok(());
        }
        self.counters.insert(name.to_string(), value);
        self.name_process()?;
        self.emit(
            "C",
            name,
            ts_ns,
            0,
            &format!(",\"args\":{{\"{arg}\":{value}}}"),
        )
    }

    fn site_text(&self, id: u32) -> String {
        match self.sites.get(&id) {
            Some(s) => format!("`{}` {}", s.label, s.location()),
            None => format!("site #{id}"),
        }
    }

    /// Applies one event.
    pub fn apply(&mut self, event: &Event) -> io::Result<()> {
        if let Some(t_ns) = event.t_ns() {
            self.t_last = self.t_last.max(t_ns);
        }
        match event {
            Event::Header { pid, .. } => self.header(*pid),
            Event::Site { id, info } => {
                self.sites.insert(*id, info.clone());
                Ok(())
            }
            Event::LoopStart {
                t_ns,
                frame,
                site,
                name,
                thread,
                parent,
                ..
            } => {
                if let Some(p) = parent.and_then(|p| self.frames.get_mut(&p)) {
                    p.first_child_ns = Some(p.first_child_ns.map_or(*t_ns, |c| c.min(*t_ns)));
                }
                self.loop_start(*t_ns, *frame, *site, name, *thread)
            }
            Event::IterationEnd {
                t_ns,
                frame,
                iteration,
                duration_ns,
                live_tensors,
                live_bytes,
                sites,
                roles,
            } => {
                self.counter("live bytes", "bytes", *t_ns, *live_bytes)?;
                self.counter("live tensors", "tensors", *t_ns, *live_tensors)?;
                // A counter per role: live bytes at the iteration end (`temporary`: those
                // born and dead within it), each present once a split was seen.
                if !roles.is_empty() {
                    let split = crate::roles::RoleSplit::at_end(roles);
                    for role in crate::roles::Role::ALL {
                        let name = format!("bytes: {role}");
                        self.counter(&name, "bytes", *t_ns, split.get(role).bytes)?;
                    }
                }
                let end = IterationSlice {
                    t_ns: *t_ns,
                    frame: *frame,
                    iteration: *iteration,
                    duration_ns: *duration_ns,
                    live_tensors: *live_tensors,
                    live_bytes: *live_bytes,
                };
                self.iteration_end(&end, sites)
            }
            Event::LoopEnd {
                t_ns,
                frame,
                iterations,
            } => self.loop_end(*t_ns, *frame, *iterations),
            Event::Memory {
                t_ns,
                device,
                sample,
            } => self.memory(*t_ns, device, sample),
            Event::Sampling { interval } => self.sampling(*interval),
            Event::Born { .. } | Event::Stored { .. } | Event::Dropped { .. } => Ok(()),
            Event::Alias { .. } | Event::CallPath { .. } | Event::PostMortem { .. } => Ok(()),
        }
    }

    /// The process samples from here on: an instant event (process scope) that says
    /// its counters are estimates, in the report's words.
    fn sampling(&mut self, interval: u64) -> io::Result<()> {
        self.name_process()?;
        let args = json!({ "estimated": true, "sample_interval": interval });
        let name = crate::model::estimate_sentence(Some(interval));
        let rest = format!(",\"s\":\"p\",\"cat\":\"sampling\",\"args\":{args}");
        self.emit("i", &name, self.t_last, 0, &rest)
    }

    fn header(&mut self, pid: u32) -> io::Result<()> {
        if !self.process_named && self.process_label.is_none() {
            self.pid = pid;
        }
        self.name_process()
    }

    fn loop_start(
        &mut self,
        t_ns: u64,
        frame: u64,
        site: u32,
        name: &str,
        thread: u64,
    ) -> io::Result<()> {
        let tid = self.tid(thread)?;
        let name = if name.is_empty() {
            format!("loop {}", self.site_text(site))
        } else {
            name.to_string()
        };
        self.frames.insert(
            frame,
            Frame {
                name,
                site,
                tid,
                start_ns: t_ns,
                last_end_ns: t_ns,
                first_child_ns: None,
            },
        );
        Ok(())
    }

    /// The iteration's slice, then the findings judged at its end.
    fn iteration_end(&mut self, end: &IterationSlice, sites: &[SiteSweep]) -> io::Result<()> {
        let Some(f) = self.frames.get_mut(&end.frame) else {
            return Ok(());
        };
        let (name, tid, loop_site) = (f.name.clone(), f.tid, f.site);
        // Iteration slices of a frame follow each other and hold the loops opened in
        // them: a start measured a little before the previous iteration's end, or a
        // little after an inner loop's start (clocks read at different points, a
        // stamp placed by the drain's clock), would break the nesting trace viewers
        // need, so it is clamped.
        let start = end
            .t_ns
            .saturating_sub(end.duration_ns)
            .max(f.last_end_ns)
            .min(f.first_child_ns.take().unwrap_or(u64::MAX))
            .min(end.t_ns);
        f.last_end_ns = f.last_end_ns.max(end.t_ns);
        let args = json!({
            "loop": name,
            "iteration": end.iteration,
            "live_tensors": end.live_tensors,
            "live_bytes": end.live_bytes,
            "survivors": self.survivors_by_site(sites),
        });
        self.emit(
            "X",
            &format!("{name} #{}", end.iteration),
            start,
            tid,
            &format!(
                ",\"dur\":{},\"cat\":\"iteration\",\"args\":{args}",
                micros(end.t_ns - start)
            ),
        )?;
        self.findings_judged_at(end, &name, loop_site, sites)
    }

    /// The 10 sites with the most surviving bytes, as `site: "N tensors, B"`.
    fn survivors_by_site(&self, sites: &[SiteSweep]) -> serde_json::Map<String, Value> {
        let mut survivors: Vec<_> = sites.iter().filter(|s| s.survivors > 0).collect();
        survivors.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
        let mut by_site = serde_json::Map::new();
        for s in survivors.iter().take(10) {
            by_site.insert(
                self.site_text(s.site),
                json!(format!(
                    "{} tensors, {}",
                    s.survivors,
                    format_bytes(s.bytes)
                )),
            );
        }
        by_site
    }

    /// Writes the findings judged by this loop at this iteration with these survivors.
    fn findings_judged_at(
        &mut self,
        end: &IterationSlice,
        loop_name: &str,
        loop_site: u32,
        sites: &[SiteSweep],
    ) -> io::Result<()> {
        let loop_info = self.sites.get(&loop_site).cloned();
        for i in 0..self.findings.len() {
            let p = &self.findings[i];
            if p.written || p.finding.iteration != end.iteration {
                continue;
            }
            let loop_matches = match (&p.finding.loop_site, &loop_info) {
                (Some(a), Some(b)) => a.refers_to(b),
                _ => p.finding.loop_name == loop_name,
            };
            let site_matches = sites.iter().any(|s| {
                s.survivors == p.finding.survivors
                    && self
                        .sites
                        .get(&s.site)
                        .is_some_and(|info| p.finding.site.refers_to(info))
            });
            if loop_matches && site_matches {
                self.write_finding(i, end.t_ns)?;
            }
        }
        Ok(())
    }

    fn loop_end(&mut self, t_ns: u64, frame: u64, iterations: u64) -> io::Result<()> {
        let Some(f) = self.frames.remove(&frame) else {
            return Ok(());
        };
        let args = json!({ "iterations": iterations });
        self.emit(
            "X",
            &format!("loop {}", f.name),
            f.start_ns,
            f.tid,
            &format!(
                ",\"dur\":{},\"cat\":\"loop\",\"args\":{args}",
                micros(t_ns.saturating_sub(f.start_ns))
            ),
        )
    }

    fn memory(&mut self, t_ns: u64, device: &str, sample: &MemorySample) -> io::Result<()> {
        for (what, value) in [
            ("pool used", sample.pool_used),
            ("pool reserved", sample.pool_reserved),
            ("device used", sample.device_used),
        ] {
            if let Some(v) = value {
                self.counter(&format!("{what} ({device})"), "bytes", t_ns, v)?;
            }
        }
        Ok(())
    }

    fn write_finding(&mut self, index: usize, ts_ns: u64) -> io::Result<()> {
        self.findings[index].written = true;
        let f = &self.findings[index].finding;
        let tag = if f.is_leak() { "LEAK" } else { f.kind.as_str() };
        let name = format!("{tag} `{}` {}", f.site.label, f.site.location());
        let holders: Vec<String> = f
            .holders
            .iter()
            .map(|h| format!("{h} ({})", h.count))
            .collect();
        let args = json!({
            "kind": f.kind.as_str(),
            "leak": f.is_leak(),
            "site": f.site.location(),
            "label": f.site.label,
            "loop": f.loop_name,
            "iteration": f.iteration,
            "survivors": f.survivors,
            "bytes": f.bytes,
            "bytes_per_iteration": f.bytes_per_iteration,
            "refcount": f.refcount,
            "holders": holders,
            "hint": f.hint,
        });
        self.name_process()?;
        self.emit(
            "i",
            &name,
            ts_ns,
            0,
            &format!(",\"s\":\"g\",\"cat\":\"finding\",\"args\":{args}"),
        )
    }

    /// Ends the process written so far and starts another, for the log of another rank
    /// in the same trace: its events go to process `pid` named `name`, its `findings`
    /// become its instants. Threads, loops and counters start afresh.
    pub fn begin_process(
        &mut self,
        pid: u32,
        name: String,
        findings: &[Finding],
    ) -> io::Result<()> {
        self.close_process()?;
        self.pid = pid;
        self.process_named = false;
        self.process_label = Some(name);
        self.threads.clear();
        self.sites.clear();
        self.counters.clear();
        self.t_last = 0;
        self.findings = findings
            .iter()
            .map(|f| PendingFinding {
                finding: f.clone(),
                written: false,
            })
            .collect();
        Ok(())
    }

    /// Writes the findings not placed yet (at the last time seen) and closes the JSON.
    pub fn finish(mut self) -> io::Result<W> {
        self.close_process()?;
        self.out.write_all(b"\n],\"displayTimeUnit\":\"ms\"}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// The findings not placed yet and the loops still open, at the last time seen.
    fn close_process(&mut self) -> io::Result<()> {
        for i in 0..self.findings.len() {
            if !self.findings[i].written {
                self.write_finding(i, self.t_last)?;
            }
        }
        // Loops still open when the log ended (a crashed run): up to the last time seen.
        let mut open: Vec<(u64, Frame)> = self.frames.drain().collect();
        open.sort_by_key(|(id, _)| *id);
        for (_, f) in open {
            let dur = micros(self.t_last.saturating_sub(f.start_ns));
            self.emit(
                "X",
                &format!("loop {} (running)", f.name),
                f.start_ns,
                f.tid,
                &format!(",\"dur\":{dur},\"cat\":\"loop\"",),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_keep_nanoseconds() {
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(5), "0.005");
    }
}
