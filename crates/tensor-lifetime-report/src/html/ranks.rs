//! The page of several ranks merged: the single-run page of one rank (the one with the
//! most leaks, the lowest such rank on a tie) with the merged findings, and a section
//! before its timeline with every rank: live bytes at the ends of the outermost loop's
//! iterations, one line per rank, and a table of the ranks with their findings.

use super::{esc, render, HtmlOptions, PALETTE};
use crate::ranks::{MergedReport, RankLog};
use crate::report::Report;
use crate::size::format_bytes;
use crate::timeline::Timeline;
use std::fmt::Write as _;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 70.0;
const BOTTOM: f64 = 30.0;
const TOP: f64 = 10.0;

/// The page: `timeline` is rank `shown_rank`'s; `report` the merged findings as one
/// report ([`MergedReport::combined`]).
pub fn render_ranks(
    timeline: &Timeline,
    merged: &MergedReport,
    shown_rank: u32,
    opts: &HtmlOptions,
) -> String {
    let report: Report = merged.combined();
    let page = render(timeline, &report, opts);
    let section = ranks_section(merged, shown_rank);
    let marker = "<section id=\"timeline-section\">";
    match page.find(marker) {
        Some(at) => format!("{}{section}{}", &page[..at], &page[at..]),
        None => page,
    }
}

fn diverges(merged: &MergedReport, rank: u32) -> bool {
    merged.findings.iter().any(|f| {
        f.finding.kind == crate::report::FindingKind::RankDivergence && f.ranks.contains(&rank)
    })
}

fn ranks_section(merged: &MergedReport, shown_rank: u32) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<section id=\"ranks-section\"><h2>Ranks</h2>\n<p>{} ranks of {} merged; the timeline \
         below is rank {shown_rank}'s. Live bytes at the end of each iteration of the \
         outermost loop, per rank:</p>\n",
        merged.ranks.len(),
        merged.world_size
    );
    ranks_chart(&mut out, merged);
    out.push_str(
        "<table id=\"ranks\" class=\"sortable\"><thead><tr><th>rank</th><th>log</th>\
         <th>host</th><th>findings</th><th>leaks</th><th>live now</th><th>peak</th>\
         <th>growth / iteration</th><th>its findings</th></tr></thead><tbody>\n",
    );
    for r in &merged.ranks {
        rank_row(&mut out, merged, r);
    }
    out.push_str("</tbody></table></section>\n");
    out
}

fn rank_row(out: &mut String, merged: &MergedReport, r: &RankLog) {
    let rank = r.rank.unwrap_or(0);
    let class = if r.report.has_leaks() || diverges(merged, rank) {
        " class=\"leaking\""
    } else {
        ""
    };
    let growth = match r.growth {
        Some(g) if g < 0 => format!("-{}", format_bytes(g.unsigned_abs())),
        Some(g) => format!("+{}", format_bytes(g as u64)),
        None => "-".to_string(),
    };
    let mut own: Vec<String> = merged
        .findings
        .iter()
        .filter(|f| f.ranks.contains(&rank))
        .map(|f| {
            let what = if f.finding.is_leak() {
                "leak"
            } else {
                f.finding.kind.as_str()
            };
            if f.finding.site.line > 0 {
                format!(
                    "{what} `{}` {}",
                    f.finding.site.label,
                    f.finding.site.location()
                )
            } else {
                format!("{what} {}", f.finding.site.label)
            }
        })
        .collect();
    if own.is_empty() {
        own.push("none".to_string());
    }
    let _ = writeln!(
        out,
        "<tr{class} data-rank=\"{rank}\"><td>{rank}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        esc(&r.name),
        esc(r.host.as_deref().unwrap_or("")),
        r.report.findings.len(),
        r.report.leaks().count(),
        esc(&format_bytes(r.report.live_bytes)),
        esc(&format_bytes(r.report.peak_live_bytes)),
        esc(&growth),
        own.iter().map(|s| esc(s)).collect::<Vec<_>>().join("<br>"),
    );
}

fn ranks_chart(out: &mut String, merged: &MergedReport) {
    let max_x = merged
        .ranks
        .iter()
        .map(|r| r.series.count)
        .max()
        .unwrap_or(0)
        .max(2)
        - 1;
    let max_y = merged
        .ranks
        .iter()
        .flat_map(|r| r.series.points.iter().map(|p| p.1))
        .max()
        .unwrap_or(0)
        .max(1);
    let x = |i: u64| LEFT + (WIDTH - LEFT - 10.0) * i as f64 / max_x as f64;
    let y = |b: u64| TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - b as f64 / max_y as f64);
    let _ = write!(
        out,
        "<svg id=\"ranks-chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" \
         height=\"{HEIGHT}\" role=\"img\" aria-label=\"live bytes per rank\">\n\
         <line x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>\n\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{}\" stroke=\"#888\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\">{}</text>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\">0 B</text>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\">iteration {}</text>\n",
        HEIGHT - BOTTOM,
        WIDTH - 10.0,
        HEIGHT - BOTTOM,
        HEIGHT - BOTTOM,
        LEFT - 4.0,
        TOP + 10.0,
        esc(&format_bytes(max_y)),
        LEFT - 4.0,
        HEIGHT - BOTTOM,
        WIDTH - 10.0,
        HEIGHT - 8.0,
        max_x,
    );
    for (i, r) in merged.ranks.iter().enumerate() {
        let rank = r.rank.unwrap_or(0);
        let apart = r.report.has_leaks() || diverges(merged, rank);
        let color = PALETTE[i % PALETTE.len()];
        let width = if apart { 3 } else { 1 };
        let points: Vec<String> = r
            .series
            .points
            .iter()
            .map(|&(i, b)| format!("{:.1},{:.1}", x(i), y(b)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline class=\"rank-line\" data-rank=\"{rank}\" fill=\"none\" stroke=\"{color}\" \
             stroke-width=\"{width}\" points=\"{}\"><title>rank {rank}</title></polyline>",
            points.join(" ")
        );
    }
    out.push_str("</svg>\n");
}
