//! The post-mortem: what was live at one moment (an out-of-memory error, or when asked),
//! by creation site, role and holder; the largest tensors; the sites that grew most; and
//! what each device says of its memory.
//!
//! The tracker fills it (`tensor_lifetime::post_mortem()`); this crate gives it its JSON
//! shape (also the `post_mortem` event of the log) and its text.

use super::fields::is_false;
use super::holder::HolderRef;
use super::roles::{format_call_path, CallFrame, Role, RoleSplit};
use super::site::SiteRef;
use super::sweep::MemorySample;
use crate::size::format_bytes;
use crate::size::group_digits as group;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What was live at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PostMortem {
    /// Why it was written: `out of memory: <the error>`, or `requested`.
    pub reason: String,
    pub live_tensors: u64,
    /// Each storage counted once.
    pub live_bytes: u64,
    /// The creation sites holding the most bytes, the most first.
    pub by_site: Vec<SiteBytes>,
    /// Live tensors and bytes by role (`temporary` is empty: nothing here has died).
    pub by_role: RoleSplit,
    /// Who holds the live bytes (store sites, autograd graphs, views, nothing seen).
    pub by_holder: Vec<HolderBytes>,
    /// The largest live tensors.
    pub largest: Vec<TensorInfo>,
    /// The sites whose survivors grew most per iteration (from the judgement).
    pub grew_most: Vec<Growth>,
    /// What the devices say of their memory (pool and free memory on CUDA; absent on
    /// the CPU).
    pub devices: Vec<DeviceMemory>,
    /// The counts and bytes are estimates from the sampled mode's records, one tensor per
    /// `sample_interval` bytes on average, each scaled by the inverse of its probability
    /// (the largest tensors are real ones, among those sampled).
    #[serde(default, skip_serializing_if = "is_false")]
    pub estimated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_interval: Option<u64>,
}

impl PostMortem {
    /// Marks the figures as estimates from a sample taken every `interval` bytes on
    /// average (the tracker's sampled mode).
    pub fn mark_estimated(&mut self, interval: u64) {
        self.estimated = true;
        self.sample_interval = Some(interval);
    }
}

/// Live bytes of one creation site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteBytes {
    pub site: SiteRef,
    pub role: Role,
    pub bytes: u64,
    pub tensors: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_path: Vec<CallFrame>,
}

/// Live bytes of one holder (`count`: its tensors).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HolderBytes {
    #[serde(flatten)]
    pub holder: HolderRef,
    pub bytes: u64,
}

/// One live tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorInfo {
    pub site: SiteRef,
    pub role: Role,
    /// Its storage's bytes.
    pub bytes: u64,
    pub shape: Vec<usize>,
    pub dtype: String,
    pub device: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_path: Vec<CallFrame>,
}

/// A site whose survivors grew, from the judgement's findings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Growth {
    pub site: SiteRef,
    #[serde(rename = "loop")]
    pub loop_name: String,
    pub bytes: u64,
    pub bytes_per_iteration: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_path: Vec<CallFrame>,
}

/// One device's memory, as far as it says: the tracked bytes and, on CUDA, the pool and
/// the device (`device_used`, `device_total`; free is their difference).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceMemory {
    pub device: String,
    #[serde(flatten)]
    pub memory: MemorySample,
}

impl DeviceMemory {
    /// Free device memory, when the device says.
    pub fn device_free(&self) -> Option<u64> {
        let m = &self.memory;
        m.device_total
            .zip(m.device_used)
            .map(|(t, u)| t.saturating_sub(u))
    }
}

impl PostMortem {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a post-mortem always serializes")
    }

    /// The site holding the most bytes.
    pub fn largest_site(&self) -> Option<&SiteBytes> {
        self.by_site.first()
    }
}

/// `` src/a.rs:12 `feats` (other), created in train → Model::features ``
fn origin(site: &SiteRef, role: Role, path: &[CallFrame]) -> String {
    let mut out = format!("{} `{}` ({role})", site.location(), site.label);
    if !path.is_empty() {
        out.push_str(&format!(", created in {}", format_call_path(path)));
    }
    out
}

impl fmt::Display for PostMortem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "tensor-lifetime post-mortem ({}): {} live tensors, {}",
            self.reason,
            group(self.live_tensors),
            format_bytes(self.live_bytes)
        )?;
        if self.estimated {
            writeln!(
                f,
                "  {}",
                super::sampling::estimate_sentence(self.sample_interval)
            )?;
        }
        for d in &self.devices {
            let m = &d.memory;
            write!(f, "  {}: tracked {}", d.device, format_bytes(m.tracked))?;
            if let (Some(used), Some(reserved)) = (m.pool_used, m.pool_reserved) {
                write!(
                    f,
                    ", pool used {}, reserved {}",
                    format_bytes(used),
                    format_bytes(reserved)
                )?;
            }
            if let (Some(free), Some(total)) = (d.device_free(), m.device_total) {
                write!(
                    f,
                    ", device free {} of {}",
                    format_bytes(free),
                    format_bytes(total)
                )?;
            }
            writeln!(f)?;
        }
        writeln!(f, "  by role: {}", self.by_role)?;
        writeln!(f, "  by site (most bytes first):")?;
        for s in &self.by_site {
            writeln!(
                f,
                "    {:>10}  {} tensors  {}",
                format_bytes(s.bytes),
                group(s.tensors),
                origin(&s.site, s.role, &s.call_path)
            )?;
        }
        if !self.by_holder.is_empty() {
            writeln!(f, "  by holder:")?;
            for h in &self.by_holder {
                writeln!(
                    f,
                    "    {:>10}  {} ({} tensors)",
                    format_bytes(h.bytes),
                    h.holder,
                    group(h.holder.count)
                )?;
            }
        }
        if !self.largest.is_empty() {
            writeln!(f, "  largest tensors:")?;
            for t in &self.largest {
                writeln!(
                    f,
                    "    {:>10}  {:?} {} on {}  {}",
                    format_bytes(t.bytes),
                    t.shape,
                    t.dtype,
                    t.device,
                    origin(&t.site, t.role, &t.call_path)
                )?;
            }
        }
        if !self.grew_most.is_empty() {
            writeln!(f, "  grew most:")?;
            for g in &self.grew_most {
                let mut at = format!("{} `{}`", g.site.location(), g.site.label);
                if !g.call_path.is_empty() {
                    at.push_str(&format!(", created in {}", format_call_path(&g.call_path)));
                }
                writeln!(
                    f,
                    "    +{}/iteration  {at} in loop {} ({} now)",
                    format_bytes(g.bytes_per_iteration),
                    g.loop_name,
                    format_bytes(g.bytes),
                )?;
            }
        }
        Ok(())
    }
}
