//! The HTML report: one self-contained file (no network, no external scripts or styles).
//!
//! - a timeline of live bytes at each iteration end, stacked by the top sites plus
//!   "other", with the pool used and reserved of each device where the log has them and
//!   the ends of the outermost loop's iterations marked;
//! - the findings table with holders and fix hints;
//! - the loops and the last memory samples;
//! - a detail per site: what it made, stored and kept, a sparkline of its live bytes, and
//!   its finding.
//!
//! The chart is drawn here, as inline SVG, so it shows without scripts; a small inline
//! script adds a hover read-out and sortable tables. The data is a [`Timeline`], already
//! downsampled to a few thousand points, so the page stays small and light at any log
//! length. The findings are the [`Report`]'s: nothing here judges leaks.

use crate::event::SiteKind;
use crate::report::{Finding, Report};
use crate::size::format_bytes;
use crate::size::group_digits as group;
use crate::timeline::Timeline;
use serde_json::json;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// What to put in the page besides the data.
#[derive(Debug, Clone)]
pub struct HtmlOptions {
    /// The page title (the log's file name, say).
    pub title: String,
    /// Sites stacked separately in the timeline; the rest are "other".
    pub top_sites: usize,
    /// Per-site detail sections at most.
    pub max_site_details: usize,
}

impl Default for HtmlOptions {
    fn default() -> Self {
        HtmlOptions {
            title: "tensor-lifetime report".to_string(),
            top_sites: 8,
            max_site_details: 100,
        }
    }
}

/// Series colors (colour-blind safe, Tableau 10); "other" is grey.
pub const PALETTE: [&str; 9] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f",
];
const OTHER_COLOR: &str = "#bab0ac";

// Chart geometry (SVG user units; the SVG scales to the page width).
const W: f64 = 1160.0;
const H: f64 = 440.0;
const LEFT: f64 = 84.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 32.0;
const BOTTOM: f64 = 44.0;

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// JSON safe inside `<script>`: no `<` at all.
fn script_json(v: &serde_json::Value) -> String {
    v.to_string().replace('<', "\\u003c")
}

fn kind_name(k: SiteKind) -> &'static str {
    match k {
        SiteKind::Binding => "binding",
        SiteKind::Assignment => "assignment",
        SiteKind::Store => "store",
        SiteKind::Explicit => "explicit",
        SiteKind::Loop => "loop",
    }
}

/// A round step near `raw` in 1, 2, 5 x 10^k.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Byte ticks: a round step in the binary unit of the range.
fn byte_ticks(max: f64) -> (f64, f64) {
    let mut unit = 1.0;
    while max / unit >= 1024.0 && unit < 1024f64.powi(5) {
        unit *= 1024.0;
    }
    let step = nice_step(max / 5.0 / unit) * unit;
    (step.max(1.0), unit)
}

fn tick_label(v: f64) -> String {
    let s = format_bytes(v as u64);
    s.replace(".0 ", " ")
}

fn time_label(ms: f64, step_ms: f64) -> String {
    if step_ms >= 1000.0 {
        let digits = if step_ms % 1000.0 == 0.0 { 0 } else { 1 };
        format!("{:.*} s", digits, ms / 1000.0)
    } else if step_ms >= 1.0 {
        format!("{:.0} ms", ms)
    } else {
        format!("{:.2} ms", ms)
    }
}

struct Series {
    name: String,
    site: Option<u32>,
    color: &'static str,
    values: Vec<u64>,
    leak: bool,
}

/// Renders the page.
pub fn render(timeline: &Timeline, report: &Report, opts: &HtmlOptions) -> String {
    let finding_sites: Vec<(Option<u32>, &Finding)> = report
        .findings
        .iter()
        .map(|f| (timeline.site_id(&f.site), f))
        .collect();
    let leak_sites: BTreeSet<u32> = finding_sites
        .iter()
        .filter(|(_, f)| f.is_leak())
        .filter_map(|(s, _)| *s)
        .collect();

    let series = build_series(timeline, opts.top_sites, &leak_sites);
    let mut out = String::with_capacity(256 * 1024);
    let title = esc(&opts.title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
    );
    let summary = report.to_string();
    let summary_line = summary.lines().next().unwrap_or_default();
    let status = if report.has_leaks() {
        "leaking"
    } else {
        "clean"
    };
    let _ = write!(
        out,
        "<header><h1>{title}</h1>\n<p id=\"summary\" class=\"{status}\">{}</p>\n\
         <p class=\"meta\">{} events, {} iteration ends; peak live {}; {} sites</p></header>\n",
        esc(summary_line),
        group(timeline.events),
        group(timeline.iteration_ends),
        esc(&format_bytes(report.peak_live_bytes)),
        report.sites_seen,
    );

    out.push_str("<section id=\"timeline-section\"><h2>Live memory over time</h2>\n");
    chart(&mut out, timeline, &series);
    legend(&mut out, timeline, &series);
    out.push_str("</section>\n");

    findings_table(&mut out, &finding_sites);
    loops_and_memory(&mut out, report);
    site_details(
        &mut out,
        timeline,
        &finding_sites,
        &series,
        opts.max_site_details,
    );

    let data = chart_data(timeline, &series);
    let _ = write!(
        out,
        "<div id=\"tip\" hidden></div>\n\
         <script type=\"application/json\" id=\"tl-data\">{}</script>\n\
         <script>{SCRIPT}</script>\n</body>\n</html>\n",
        script_json(&data)
    );
    out
}

fn build_series(timeline: &Timeline, top: usize, leaks: &BTreeSet<u32>) -> Vec<Series> {
    let top_sites = timeline.top_sites(top.min(PALETTE.len()));
    let n = timeline.points.len();
    let mut series: Vec<Series> = top_sites
        .iter()
        .enumerate()
        .map(|(i, site)| {
            let name = match timeline.sites.get(site) {
                Some(info) => format!("`{}` {}", info.label, info.location()),
                None => format!("site #{site}"),
            };
            Series {
                name,
                site: Some(*site),
                color: PALETTE[i],
                values: (0..n).map(|j| timeline.site_bytes(j, *site)).collect(),
                leak: leaks.contains(site),
            }
        })
        .collect();
    let other: Vec<u64> = (0..n)
        .map(|j| {
            let shown = series
                .iter()
                .fold(0u64, |sum, s| sum.saturating_add(s.values[j]));
            timeline.points[j].live_bytes.saturating_sub(shown)
        })
        .collect();
    if other.iter().any(|v| *v > 0) || series.is_empty() {
        series.push(Series {
            name: "other".to_string(),
            site: None,
            color: OTHER_COLOR,
            values: other,
            leak: false,
        });
    }
    series
}

struct Scale {
    t0: u64,
    t1: u64,
    ymax: f64,
}

impl Scale {
    fn x(&self, t_ns: u64) -> f64 {
        let span = (self.t1 - self.t0).max(1) as f64;
        LEFT + (t_ns.saturating_sub(self.t0)) as f64 / span * (W - LEFT - RIGHT)
    }

    fn y(&self, bytes: f64) -> f64 {
        H - BOTTOM - bytes / self.ymax * (H - TOP - BOTTOM)
    }
}

/// A line over time: its name, its SVG dash pattern and its (time, bytes) points.
type Line = (String, &'static str, Vec<(u64, u64)>);

fn pool_lines(timeline: &Timeline) -> Vec<Line> {
    let mut lines = Vec::new();
    for (device, samples) in &timeline.memory {
        let used: Vec<(u64, u64)> = samples
            .iter()
            .filter_map(|m| m.pool_used.map(|v| (m.t_ns, v)))
            .collect();
        let reserved: Vec<(u64, u64)> = samples
            .iter()
            .filter_map(|m| m.pool_reserved.map(|v| (m.t_ns, v)))
            .collect();
        if !used.is_empty() {
            lines.push((format!("pool used ({device})"), "", used));
        }
        if !reserved.is_empty() {
            lines.push((format!("pool reserved ({device})"), "6 4", reserved));
        }
    }
    lines
}

fn chart(out: &mut String, timeline: &Timeline, series: &[Series]) {
    let n = timeline.points.len();
    let pools = pool_lines(timeline);
    if n == 0 && pools.is_empty() {
        out.push_str(
            "<p id=\"no-data\">The log has no iteration ends and no memory samples: \
             nothing to plot.</p>\n",
        );
        return;
    }
    let stack_max = (0..n)
        .map(|j| {
            series
                .iter()
                .fold(0u64, |sum, s| sum.saturating_add(s.values[j]))
        })
        .max()
        .unwrap_or(0);
    let pool_max = pools
        .iter()
        .flat_map(|(_, _, v)| v.iter().map(|(_, b)| *b))
        .max()
        .unwrap_or(0);
    let (step, _) = byte_ticks(stack_max.max(pool_max).max(1) as f64);
    let ymax = ((stack_max.max(pool_max).max(1) as f64 / step).ceil() * step).max(step);
    let scale = Scale {
        t0: timeline.t_min,
        t1: timeline.t_max.max(timeline.t_min.saturating_add(1)),
        ymax,
    };
    let _ = writeln!(
        out,
        "<div class=\"chart\"><svg id=\"timeline\" viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"live bytes over time, stacked by site\" data-left=\"{LEFT}\" \
         data-right=\"{}\">",
        W - RIGHT
    );
    // Grid and y axis.
    out.push_str("<g class=\"axis y\">");
    let mut v = 0.0;
    while v <= ymax + step / 2.0 {
        let y = scale.y(v);
        let _ = write!(
            out,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            esc(&tick_label(v))
        );
        v += step;
    }
    out.push_str("</g>\n");
    // x axis: seconds since the first event.
    let span_ms = (scale.t1 - scale.t0) as f64 / 1e6;
    let tstep = nice_step(span_ms / 8.0);
    out.push_str("<g class=\"axis x\">");
    let mut ms = 0.0;
    while ms <= span_ms + tstep / 1000.0 {
        let x = scale.x(scale.t0.saturating_add((ms * 1e6) as u64));
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\">{}</text>",
            H - BOTTOM,
            H - BOTTOM + 5.0,
            H - BOTTOM + 18.0,
            esc(&time_label(ms, tstep))
        );
        ms += tstep;
    }
    let _ = writeln!(
        out,
        "<text class=\"title\" x=\"{:.1}\" y=\"{:.1}\">time since the first event</text></g>",
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 6.0
    );
    // Stacked areas, the largest site at the bottom.
    out.push_str("<g class=\"areas\">");
    let xs: Vec<f64> = timeline.points.iter().map(|p| scale.x(p.t_ns)).collect();
    let mut base = vec![0u64; n];
    for (i, s) in series.iter().enumerate() {
        if n == 0 {
            break;
        }
        let mut d = String::with_capacity(n * 24);
        for j in 0..n {
            let top = base[j].saturating_add(s.values[j]) as f64;
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if j == 0 { "M" } else { "L" },
                xs[j],
                scale.y(top)
            );
        }
        for j in (0..n).rev() {
            let _ = write!(d, "L{:.1},{:.1}", xs[j], scale.y(base[j] as f64));
        }
        d.push('Z');
        let _ = write!(
            out,
            "<path class=\"area{}\" data-series=\"{i}\" fill=\"{}\" d=\"{d}\"><title>{}</title></path>",
            if s.leak { " leak" } else { "" },
            s.color,
            esc(&s.name)
        );
        for (b, v) in base.iter_mut().zip(&s.values) {
            *b = b.saturating_add(*v);
        }
    }
    if n > 0 && n <= 60 {
        // Few points: mark them, so single iteration ends are visible.
        for (x, b) in xs.iter().zip(&base) {
            let _ = write!(
                out,
                "<circle class=\"dot\" cx=\"{x:.1}\" cy=\"{:.1}\" r=\"3\"/>",
                scale.y(*b as f64)
            );
        }
    }
    out.push_str("</g>\n");
    // Pool lines.
    out.push_str("<g class=\"pools\">");
    for (name, dash, values) in &pools {
        let mut pts = String::new();
        for (t, v) in values {
            let _ = write!(pts, "{:.1},{:.1} ", scale.x(*t), scale.y(*v as f64));
        }
        let _ = write!(
            out,
            "<polyline class=\"pool\" stroke-dasharray=\"{dash}\" points=\"{}\"><title>{}</title></polyline>",
            pts.trim_end(),
            esc(name)
        );
    }
    out.push_str("</g>\n");
    // Ends of the outermost loop's iterations.
    if timeline.marks.len() <= 120 {
        out.push_str("<g class=\"marks\">");
        let mut last_label = f64::NEG_INFINITY;
        for m in &timeline.marks {
            let x = scale.x(m.t_ns);
            let name = timeline.loop_name(m.loop_index);
            let _ = write!(
                out,
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\">\
                 <title>end of {} iteration {}</title></line>",
                H - BOTTOM,
                esc(name),
                m.iteration
            );
            if x - last_label > 48.0 {
                last_label = x;
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\">{} {}</text>",
                    x - 3.0,
                    TOP - 10.0,
                    esc(name),
                    m.iteration
                );
            }
        }
        out.push_str("</g>\n");
    }
    let _ = write!(
        out,
        "<line id=\"crosshair\" x1=\"0\" x2=\"0\" y1=\"{TOP}\" y2=\"{:.1}\" visibility=\"hidden\"/>\n\
         </svg></div>\n",
        H - BOTTOM
    );
    if timeline.stride > 1 {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} iteration ends shown as {} points: each point is the iteration \
             end with the most live bytes among up to {} neighbours, so peaks are kept.</p>",
            group(timeline.iteration_ends),
            timeline.points.len(),
            timeline.stride
        );
    }
}

fn legend(out: &mut String, timeline: &Timeline, series: &[Series]) {
    out.push_str("<ul class=\"legend\" id=\"legend\">");
    for (i, s) in series.iter().enumerate().rev() {
        let peak = s.values.iter().max().copied().unwrap_or(0);
        let link = match s.site {
            Some(id) => format!("<a href=\"#site-{id}\">{}</a>", esc(&s.name)),
            None => esc(&s.name),
        };
        let _ = write!(
            out,
            "<li data-series=\"{i}\"><span class=\"swatch\" style=\"background:{}\"></span>\
             {link}{} <span class=\"peak\">peak {}</span></li>",
            s.color,
            if s.leak {
                " <span class=\"badge leak\">LEAK</span>"
            } else {
                ""
            },
            esc(&format_bytes(peak))
        );
    }
    for (name, dash, _) in pool_lines(timeline) {
        let _ = write!(
            out,
            "<li class=\"line\"><svg width=\"28\" height=\"10\"><line x1=\"0\" x2=\"28\" y1=\"5\" \
             y2=\"5\" stroke-dasharray=\"{dash}\"/></svg>{}</li>",
            esc(&name)
        );
    }
    out.push_str("</ul>\n");
}

/// The tag of the text report (`LEAK`, `GRAPH`, ...) and a CSS class for it.
fn finding_tag(f: &Finding) -> (String, &'static str) {
    let text = f.to_string();
    let tag = text.split_whitespace().next().unwrap_or("?").to_string();
    let class = if f.is_leak() { "leak" } else { f.kind.as_str() };
    (tag, class)
}

fn findings_table(out: &mut String, findings: &[(Option<u32>, &Finding)]) {
    out.push_str("<section id=\"findings-section\"><h2>Findings</h2>\n");
    if findings.is_empty() {
        out.push_str(
            "<p id=\"no-findings\">No tensor outlived the iteration that made it.</p></section>\n",
        );
        return;
    }
    out.push_str(
        "<table id=\"findings\" class=\"sortable\"><thead><tr><th>kind</th><th>site</th>\
         <th>loop</th><th class=\"num\">survivors</th><th class=\"num\">bytes</th>\
         <th class=\"num\">per iteration</th><th class=\"num\">refcount</th><th>held by</th>\
         <th>hint</th></tr></thead><tbody>\n",
    );
    for (id, f) in findings {
        let (tag, class) = finding_tag(f);
        let site = format!("`{}` {}", f.site.label, f.site.location());
        let site = match id {
            Some(id) => format!("<a href=\"#site-{id}\">{}</a>", esc(&site)),
            None => esc(&site),
        };
        let mut holders: Vec<String> = f
            .holders
            .iter()
            .map(|h| format!("{} ({} tensors)", esc(&h.to_string()), h.count))
            .collect();
        if f.graph_tensors > 0 {
            holders.push(format!(
                "its graph: {} tensors, {}",
                f.graph_tensors,
                esc(&format_bytes(f.graph_bytes))
            ));
        }
        if !f.held_sites.is_empty() {
            let held: Vec<String> = f
                .held_sites
                .iter()
                .map(|s| format!("`{}` {}", s.label, s.location()))
                .collect();
            holders.push(format!("the graph also holds {}", esc(&held.join(", "))));
        }
        let _ = writeln!(
            out,
            "<tr class=\"{class}\"><td data-v=\"{}\"><span class=\"badge {class}\">{tag}</span></td>\
             <td>{site}</td><td>{} (iteration {})</td>\
             <td class=\"num\" data-v=\"{}\">{}</td><td class=\"num\" data-v=\"{}\">{}</td>\
             <td class=\"num\" data-v=\"{}\">{}</td><td class=\"num\" data-v=\"{}\">{}</td>\
             <td>{}</td><td class=\"hint\">{}</td></tr>",
            f.kind.severity_rank(),
            esc(&f.loop_name),
            f.iteration,
            f.survivors,
            group(f.survivors),
            f.bytes,
            esc(&format_bytes(f.bytes)),
            f.bytes_per_iteration,
            if f.bytes_per_iteration > 0 {
                format!("+{}", esc(&format_bytes(f.bytes_per_iteration)))
            } else {
                "&ndash;".to_string()
            },
            f.refcount,
            f.refcount,
            holders.join("<br>"),
            esc(&f.hint)
        );
    }
    out.push_str("</tbody></table></section>\n");
}

fn loops_and_memory(out: &mut String, report: &Report) {
    out.push_str("<section id=\"loops-section\"><h2>Loops</h2>\n");
    if report.loops.is_empty() {
        out.push_str("<p>No tracked loop ran.</p>\n");
    } else {
        out.push_str(
            "<table id=\"loops\"><thead><tr><th>loop</th><th>site</th><th class=\"num\">runs</th>\
             <th class=\"num\">iterations</th><th class=\"num\">running at the end</th></tr></thead><tbody>",
        );
        for l in &report.loops {
            let site = l.site.as_ref().map(|s| s.location()).unwrap_or_default();
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td></tr>",
                esc(&l.name),
                esc(&site),
                group(l.runs),
                group(l.iterations),
                l.running
            );
        }
        out.push_str("</tbody></table>\n");
    }
    if !report.memory.is_empty() {
        out.push_str(
            "<h3>Last memory sample per device</h3><table id=\"memory\"><thead><tr><th>device</th>\
             <th class=\"num\">tracked</th><th class=\"num\">pool used</th>\
             <th class=\"num\">pool reserved</th><th class=\"num\">device used</th>\
             <th class=\"num\">device total</th><th class=\"num\">process resident</th></tr></thead><tbody>",
        );
        let opt = |v: Option<u64>| v.map_or("&ndash;".to_string(), |b| esc(&format_bytes(b)));
        for (device, m) in &report.memory {
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td></tr>",
                esc(device),
                esc(&format_bytes(m.tracked)),
                opt(m.pool_used),
                opt(m.pool_reserved),
                opt(m.device_used),
                opt(m.device_total),
                opt(m.process_resident)
            );
        }
        out.push_str("</tbody></table>\n");
    }
    out.push_str("</section>\n");
}

/// A small line of one site's live bytes over the kept points.
fn sparkline(timeline: &Timeline, site: u32, color: &str) -> String {
    const SW: f64 = 320.0;
    const SH: f64 = 40.0;
    let n = timeline.points.len();
    if n == 0 {
        return String::new();
    }
    // At most one value per horizontal unit: the maximum of its points.
    let buckets = n.min(SW as usize);
    let mut values = vec![0u64; buckets];
    for j in 0..n {
        let b = j * buckets / n;
        values[b] = values[b].max(timeline.site_bytes(j, site));
    }
    let max = values.iter().max().copied().unwrap_or(0).max(1) as f64;
    let mut pts = String::new();
    for (i, v) in values.iter().enumerate() {
        let x = if buckets == 1 {
            SW / 2.0
        } else {
            i as f64 / (buckets - 1) as f64 * SW
        };
        let _ = write!(
            pts,
            "{x:.1},{:.1} ",
            SH - 1.0 - *v as f64 / max * (SH - 2.0)
        );
    }
    format!(
        "<svg class=\"spark\" viewBox=\"0 0 {SW} {SH}\" width=\"{SW}\" height=\"{SH}\">\
         <polyline points=\"{}\" stroke=\"{color}\"/></svg>",
        pts.trim_end()
    )
}

fn site_details(
    out: &mut String,
    timeline: &Timeline,
    findings: &[(Option<u32>, &Finding)],
    series: &[Series],
    max: usize,
) {
    // Sites with findings first, then the stacked ones, then by peak live bytes.
    let mut order: Vec<u32> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |id: u32, order: &mut Vec<u32>| {
        if seen.insert(id) {
            order.push(id);
        }
    };
    for (id, _) in findings {
        if let Some(id) = id {
            push(*id, &mut order);
        }
    }
    for s in series {
        if let Some(id) = s.site {
            push(id, &mut order);
        }
    }
    let mut rest: Vec<(&u32, &crate::timeline::SiteStats)> = timeline.stats.iter().collect();
    rest.sort_by(|a, b| {
        (b.1.peak_live_bytes, b.1.born_bytes, a.0).cmp(&(a.1.peak_live_bytes, a.1.born_bytes, b.0))
    });
    for (id, _) in rest {
        push(*id, &mut order);
    }
    let total = order.len();
    out.push_str("<section id=\"sites-section\"><h2>Sites</h2>\n");
    for id in order.into_iter().take(max) {
        let info = timeline.sites.get(&id);
        let stats = timeline.stats.get(&id).cloned().unwrap_or_default();
        let color = series
            .iter()
            .find(|s| s.site == Some(id))
            .map_or("#555", |s| s.color);
        let (label, location, more) = match info {
            Some(i) => (
                i.label.clone(),
                format!("{}:{}:{}", i.file, i.line, i.column),
                format!("{} in <code>{}</code>", kind_name(i.kind), esc(&i.function)),
            ),
            None => (
                format!("site #{id}"),
                String::new(),
                "not declared in the log".into(),
            ),
        };
        let _ = write!(
            out,
            "<article class=\"site\" id=\"site-{id}\"><h3><code>`{}`</code> {}</h3>\
             <p class=\"meta\">{more}</p><dl>\
             <dt>born</dt><dd>{} tensors, {}</dd>\
             <dt>stored through</dt><dd>{}</dd>\
             <dt>peak live</dt><dd>{}</dd>\
             <dt>peak survivors</dt><dd>{}</dd>\
             <dt>live at the end</dt><dd>{}</dd></dl>{}",
            esc(&label),
            esc(&location),
            group(stats.born),
            esc(&format_bytes(stats.born_bytes)),
            group(stats.stored),
            esc(&format_bytes(stats.peak_live_bytes)),
            group(stats.peak_survivors),
            esc(&format_bytes(stats.live_bytes)),
            if stats.peak_live_bytes > 0 {
                sparkline(timeline, id, color)
            } else {
                String::new()
            }
        );
        for (_, f) in findings.iter().filter(|(s, _)| *s == Some(id)) {
            let _ = write!(out, "<pre class=\"finding\">{}</pre>", esc(&f.to_string()));
        }
        out.push_str("</article>\n");
    }
    if total > max {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} more sites are left out.</p>",
            total - max
        );
    }
    out.push_str("</section>\n");
}

fn chart_data(timeline: &Timeline, series: &[Series]) -> serde_json::Value {
    let t0 = timeline.t_min;
    let ms = |t: u64| ((t.saturating_sub(t0)) as f64 / 1e3).round() / 1e3;
    let points = &timeline.points;
    json!({
        "t0": timeline.t_min,
        "t1": timeline.t_max.max(timeline.t_min.saturating_add(1)),
        "loops": timeline.loops,
        "t": points.iter().map(|p| ms(p.t_ns)).collect::<Vec<_>>(),
        "loop": points.iter().map(|p| p.loop_index).collect::<Vec<_>>(),
        "it": points.iter().map(|p| p.iteration).collect::<Vec<_>>(),
        "n": points.iter().map(|p| p.count).collect::<Vec<_>>(),
        "live": points.iter().map(|p| p.live_bytes).collect::<Vec<_>>(),
        "series": series.iter().map(|s| json!({
            "name": s.name, "color": s.color, "v": s.values,
        })).collect::<Vec<_>>(),
        "pools": pool_lines(timeline).into_iter().map(|(name, _, v)| json!({
            "name": name,
            "t": v.iter().map(|(t, _)| ms(*t)).collect::<Vec<_>>(),
            "v": v.iter().map(|(_, b)| *b).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

const STYLE: &str = r#"
:root{--fg:#1d1d1f;--muted:#6e6e73;--line:#d9d9de;--leak:#c62828;--bg:#fff}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:0 auto;max-width:1240px;padding:16px 24px 48px}
h1{font-size:20px;margin:8px 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}h3{font-size:14px;margin:0 0 2px}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
#summary{font-weight:600;margin:4px 0}#summary.leaking{color:var(--leak)}
.meta,.note{color:var(--muted);margin:2px 0}
.chart svg{width:100%;height:auto;display:block}
.axis line{stroke:#ececf0}.axis text{fill:var(--muted);font-size:11px}.axis.y text{text-anchor:end}.axis.x text{text-anchor:middle}.axis .title{fill:var(--muted)}
.areas path{stroke:#fff;stroke-width:.4}.areas path.dim{opacity:.25}.areas .dot{fill:#333}
.pools polyline,.legend li.line line{fill:none;stroke:#222;stroke-width:1.6}
.marks line{stroke:#8e8e93;stroke-dasharray:2 3}.marks text{fill:var(--muted);font-size:10px;text-anchor:end}
#crosshair{stroke:#222;stroke-width:1}
.legend{list-style:none;padding:0;margin:8px 0;display:flex;flex-wrap:wrap;gap:4px 18px}
.legend li{display:flex;align-items:center;gap:6px;cursor:default}.legend a{color:inherit}
.swatch{width:12px;height:12px;border-radius:2px;display:inline-block}.peak{color:var(--muted)}
.badge{font-size:11px;font-weight:700;padding:1px 6px;border-radius:3px;background:#e5e5ea}
.badge.leak{background:var(--leak);color:#fff}.badge.graph_retention,.badge.view_retention,.badge.untracked_growth{background:#ef6c00;color:#fff}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);white-space:nowrap}table.sortable th{cursor:pointer}.num{text-align:right;white-space:nowrap}
td.hint{color:var(--muted)}tr.leak td:first-child{border-left:3px solid var(--leak)}
.site{border:1px solid var(--line);border-radius:6px;padding:10px 14px;margin:10px 0}.site:target{outline:2px solid #4e79a7}
.site dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0}.site dt{color:var(--muted)}.site dd{margin:0}
.spark polyline{fill:none;stroke-width:1.5}pre.finding{background:#f5f5f7;padding:8px;border-radius:4px;white-space:pre-wrap;margin:6px 0 0}
#tip{position:fixed;pointer-events:none;background:rgba(255,255,255,.97);border:1px solid #c7c7cc;border-radius:4px;padding:6px 8px;font-size:12px;box-shadow:0 2px 8px rgba(0,0,0,.15);max-width:460px}
#tip .row{display:flex;gap:6px;align-items:center}#tip .v{margin-left:auto;padding-left:12px;font-variant-numeric:tabular-nums}
"#;

/// Hover read-out over the chart, legend highlighting and sortable tables. The page is
/// complete without it.
const SCRIPT: &str = r##"
(function(){
"use strict";
var data=JSON.parse(document.getElementById("tl-data").textContent);
var svg=document.getElementById("timeline"),tip=document.getElementById("tip");
var units=["B","KiB","MiB","GiB","TiB","PiB"];
function fmt(b){var u=0;while(Math.abs(b)>=1024&&u<units.length-1){b/=1024;u++}return u?b.toFixed(1)+" "+units[u]:Math.round(b)+" B"}
function esc(s){return String(s).replace(/[&<>"]/g,function(c){return{"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]})}
function nearest(ts,t){var lo=0,hi=ts.length-1;if(hi<0)return -1;while(lo<hi){var m=(lo+hi)>>1;if(ts[m]<t)lo=m+1;else hi=m}if(lo>0&&t-ts[lo-1]<ts[lo]-t)lo--;return lo}
if(svg){
var cross=document.getElementById("crosshair"),left=+svg.dataset.left,right=+svg.dataset.right;
var span=(data.t1-data.t0)/1e6;
svg.addEventListener("mousemove",function(e){
var pt=svg.createSVGPoint();pt.x=e.clientX;pt.y=e.clientY;var p=pt.matrixTransform(svg.getScreenCTM().inverse());
if(p.x<left||p.x>right){hide();return}
var t=(p.x-left)/(right-left)*span,j=nearest(data.t,t),h="";
if(j>=0){var x=left+data.t[j]/span*(right-left);cross.setAttribute("x1",x);cross.setAttribute("x2",x);cross.setAttribute("visibility","visible");
h+="<b>"+(data.t[j]/1000).toFixed(3)+" s</b> &middot; "+esc(data.loops[data.loop[j]]||"?")+" iteration "+data.it[j]+(data.n[j]>1?" (fullest of "+data.n[j]+")":"");
h+="<div class=row>live tracked<span class=v>"+fmt(data.live[j])+"</span></div>";
for(var i=data.series.length-1;i>=0;i--){var s=data.series[i];if(!s.v[j])continue;h+="<div class=row><span class=swatch style='background:"+s.color+"'></span>"+esc(s.name)+"<span class=v>"+fmt(s.v[j])+"</span></div>"}}
data.pools.forEach(function(l){var k=nearest(l.t,t);if(k>=0)h+="<div class=row>"+esc(l.name)+"<span class=v>"+fmt(l.v[k])+"</span></div>"});
tip.innerHTML=h;tip.hidden=false;var r=tip.getBoundingClientRect();
tip.style.left=Math.min(e.clientX+14,innerWidth-r.width-8)+"px";tip.style.top=Math.min(e.clientY+14,innerHeight-r.height-8)+"px"});
function hide(){tip.hidden=true;cross.setAttribute("visibility","hidden")}
svg.addEventListener("mouseleave",hide);
var areas=svg.querySelectorAll("path.area");
document.querySelectorAll("#legend li[data-series]").forEach(function(li){
li.addEventListener("mouseenter",function(){areas.forEach(function(a){if(a.dataset.series!==li.dataset.series)a.classList.add("dim")})});
li.addEventListener("mouseleave",function(){areas.forEach(function(a){a.classList.remove("dim")})})});
}
document.querySelectorAll("table.sortable").forEach(function(tb){
tb.querySelectorAll("th").forEach(function(th,c){var asc=false;th.addEventListener("click",function(){
asc=!asc;var body=tb.tBodies[0],rows=Array.prototype.slice.call(body.rows);
rows.sort(function(a,b){var x=a.cells[c],y=b.cells[c],vx=x.dataset.v,vy=y.dataset.v;
var d=(vx!==undefined&&vy!==undefined)?(+vx)-(+vy):x.textContent.localeCompare(y.textContent);return asc?d:-d});
rows.forEach(function(r){body.appendChild(r)})})})});
document.documentElement.dataset.ready="1";
})();
"##;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Analysis;
    use crate::timeline::TimelineBuilder;

    #[test]
    fn script_data_cannot_close_the_script() {
        let v = json!({"name": "</script><script>alert(1)</script>"});
        assert!(!script_json(&v).contains('<'));
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn an_empty_log_renders_a_note_not_a_chart() {
        let t = TimelineBuilder::default().finish();
        let html = render(&t, &Analysis::default().report(), &HtmlOptions::default());
        assert!(html.contains("id=\"no-data\""));
        assert!(html.contains("id=\"no-findings\""));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(0.013), 0.02);
        let (step, unit) = byte_ticks(10.0 * 1024.0 * 1024.0);
        assert_eq!(unit, 1024.0 * 1024.0);
        assert_eq!(step, 2.0 * 1024.0 * 1024.0);
        assert_eq!(tick_label(2.0 * 1024.0 * 1024.0), "2 MiB");
    }
}
