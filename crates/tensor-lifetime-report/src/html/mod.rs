//! The HTML report: one self-contained file (no network, no external scripts or styles).
//!
//! - a timeline of live bytes at each iteration end, stacked by the top sites plus
//!   "other", with the pool used and reserved of each device where the log has them and
//!   the ends of the outermost loop's iterations marked;
//! - beside it, live bytes at each iteration end stacked by role (parameter, gradient,
//!   optimizer state, activation, input, other) when the log has them (`roles.rs`);
//! - the findings table with holders and fix hints;
//! - the loops and the last memory samples;
//! - a detail per site: what it made, stored and kept, a sparkline of its live bytes, and
//!   its finding.
//!
//! The chart is drawn as inline SVG (`chart.rs`), so it shows without scripts; a small
//! inline script (`report.js`, styles in `report.css`) adds a hover read-out and sortable
//! tables. The data is a [`Timeline`], already downsampled to a few thousand points, so
//! the page stays small and light at any log length. The findings are the [`Report`]'s:
//! nothing here judges leaks.

mod chart;
mod ranks;
mod roles;

pub use ranks::render_ranks;

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

/// A site stacked in the chart (or "other"): its live bytes at each point.
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
    let estimated = report
        .estimate_note()
        .map(|note| format!("<p id=\"estimated\" class=\"meta\">{}</p>\n", esc(&note)))
        .unwrap_or_default();
    let _ = write!(
        out,
        "<header><h1>{title}</h1>\n<p id=\"summary\" class=\"{status}\">{}</p>\n{estimated}\
         <p class=\"meta\">{} events, {} iteration ends; peak live {}; {} sites</p></header>\n",
        esc(summary_line),
        group(timeline.events),
        group(timeline.iteration_ends),
        esc(&format_bytes(report.peak_live_bytes)),
        report.sites_seen,
    );

    out.push_str("<section id=\"timeline-section\"><h2>Live memory over time</h2>\n");
    chart::chart(&mut out, timeline, &series);
    chart::legend(&mut out, timeline, &series);
    roles::role_chart(&mut out, timeline);
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
                format!("{} in <code>{}</code>", i.kind.as_str(), esc(&i.function)),
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
                chart::sparkline(timeline, id, color)
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
        "pools": chart::pool_lines(timeline).into_iter().map(|l| json!({
            "name": l.name,
            "t": l.points.iter().map(|(t, _)| ms(*t)).collect::<Vec<_>>(),
            "v": l.points.iter().map(|(_, b)| *b).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// The page's styles.
const STYLE: &str = include_str!("report.css");

/// Hover read-out over the chart, legend highlighting and sortable tables. The page is
/// complete without it.
const SCRIPT: &str = include_str!("report.js");

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
}
