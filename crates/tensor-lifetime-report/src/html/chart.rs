//! The timeline chart, drawn as inline SVG (it shows without scripts): live bytes at each
//! iteration end stacked by site, the pools' used and reserved lines, the ends of the
//! outermost loop's iterations; and its legend.

use super::{esc, Series};
use crate::size::format_bytes;
use crate::size::group_digits as group;
use crate::timeline::Timeline;
use std::fmt::Write as _;

// Chart geometry (SVG user units; the SVG scales to the page width).
const W: f64 = 1160.0;
const H: f64 = 440.0;
const LEFT: f64 = 84.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 32.0;
const BOTTOM: f64 = 44.0;

/// Outermost-loop iteration ends marked at most (more would be a grey band).
const MAX_MARKS: usize = 120;
/// Points marked with a dot at most (so that single iteration ends are visible).
const MAX_DOTS: usize = 60;

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

/// A pool's used or reserved bytes over time, drawn as a line.
pub(super) struct PoolLine {
    pub(super) name: String,
    /// The SVG dash pattern (`""` solid).
    pub(super) dash: &'static str,
    /// (time, bytes).
    pub(super) points: Vec<(u64, u64)>,
}

/// The lines of every device's pool that the log has samples of.
pub(super) fn pool_lines(timeline: &Timeline) -> Vec<PoolLine> {
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
            lines.push(PoolLine {
                name: format!("pool used ({device})"),
                dash: "",
                points: used,
            });
        }
        if !reserved.is_empty() {
            lines.push(PoolLine {
                name: format!("pool reserved ({device})"),
                dash: "6 4",
                points: reserved,
            });
        }
    }
    lines
}

/// From time and bytes to SVG coordinates.
struct Scale {
    t0: u64,
    t1: u64,
    ymax: f64,
    /// Bytes between the y axis's ticks.
    ystep: f64,
}

impl Scale {
    /// Time from the first event to the last; bytes from 0 to a round number above the
    /// highest stack or pool line.
    fn fit(timeline: &Timeline, series: &[Series], pools: &[PoolLine]) -> Scale {
        let stack_max = (0..timeline.points.len())
            .map(|j| {
                series
                    .iter()
                    .fold(0u64, |sum, s| sum.saturating_add(s.values[j]))
            })
            .max()
            .unwrap_or(0);
        let pool_max = pools
            .iter()
            .flat_map(|l| l.points.iter().map(|(_, b)| *b))
            .max()
            .unwrap_or(0);
        let (step, _) = byte_ticks(stack_max.max(pool_max).max(1) as f64);
        let ymax = ((stack_max.max(pool_max).max(1) as f64 / step).ceil() * step).max(step);
        Scale {
            t0: timeline.t_min,
            t1: timeline.t_max.max(timeline.t_min.saturating_add(1)),
            ymax,
            ystep: step,
        }
    }

    fn x(&self, t_ns: u64) -> f64 {
        let span = (self.t1 - self.t0).max(1) as f64;
        LEFT + (t_ns.saturating_sub(self.t0)) as f64 / span * (W - LEFT - RIGHT)
    }

    fn y(&self, bytes: f64) -> f64 {
        H - BOTTOM - bytes / self.ymax * (H - TOP - BOTTOM)
    }
}

/// Writes the chart, or a note when there is nothing to plot.
pub(super) fn chart(out: &mut String, timeline: &Timeline, series: &[Series]) {
    let pools = pool_lines(timeline);
    if timeline.points.is_empty() && pools.is_empty() {
        out.push_str(
            "<p id=\"no-data\">The log has no iteration ends and no memory samples: \
             nothing to plot.</p>\n",
        );
        return;
    }
    stacked_svg(
        out,
        ("timeline", "live bytes over time, stacked by site"),
        timeline,
        series,
        &pools,
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

/// One stacked chart as an SVG: `id` and its label; the main chart (`timeline`) also
/// has the pools' lines, the iteration marks and the hover crosshair.
pub(super) fn stacked_svg(
    out: &mut String,
    (id, label): (&str, &str),
    timeline: &Timeline,
    series: &[Series],
    pools: &[PoolLine],
) {
    let main = id == "timeline";
    let scale = Scale::fit(timeline, series, pools);
    let _ = writeln!(
        out,
        "<div class=\"chart\"><svg id=\"{id}\" viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"{label}\" data-left=\"{LEFT}\" data-right=\"{}\">",
        W - RIGHT
    );
    y_axis(out, &scale);
    x_axis(out, &scale);
    areas(out, timeline, series, &scale);
    if main {
        pool_polylines(out, pools, &scale);
        if timeline.marks.len() <= MAX_MARKS {
            marks(out, timeline, &scale);
        }
        let _ = writeln!(
            out,
            "<line id=\"crosshair\" x1=\"0\" x2=\"0\" y1=\"{TOP}\" y2=\"{:.1}\" visibility=\"hidden\"/>",
            H - BOTTOM
        );
    }
    out.push_str("</svg></div>\n");
}

/// The grid and the y axis: bytes in round binary units.
fn y_axis(out: &mut String, scale: &Scale) {
    out.push_str("<g class=\"axis y\">");
    let mut v = 0.0;
    while v <= scale.ymax + scale.ystep / 2.0 {
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
        v += scale.ystep;
    }
    out.push_str("</g>\n");
}

/// The x axis: time since the first event.
fn x_axis(out: &mut String, scale: &Scale) {
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
}

/// The stacked areas, the largest site at the bottom; dots on the points when they are
/// few.
fn areas(out: &mut String, timeline: &Timeline, series: &[Series], scale: &Scale) {
    out.push_str("<g class=\"areas\">");
    let n = timeline.points.len();
    let xs: Vec<f64> = timeline.points.iter().map(|p| scale.x(p.t_ns)).collect();
    let mut base = vec![0u64; n];
    for (i, s) in series.iter().enumerate() {
        if n == 0 {
            break;
        }
        let d = area_path(&xs, &base, &s.values, scale);
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
    if n > 0 && n <= MAX_DOTS {
        for (x, b) in xs.iter().zip(&base) {
            let _ = write!(
                out,
                "<circle class=\"dot\" cx=\"{x:.1}\" cy=\"{:.1}\" r=\"3\"/>",
                scale.y(*b as f64)
            );
        }
    }
    out.push_str("</g>\n");
}

/// The SVG path of one series stacked on `base`: along its top, then back along the base.
fn area_path(xs: &[f64], base: &[u64], values: &[u64], scale: &Scale) -> String {
    let n = xs.len();
    let mut d = String::with_capacity(n * 24);
    for j in 0..n {
        let top = base[j].saturating_add(values[j]) as f64;
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
    d
}

fn pool_polylines(out: &mut String, pools: &[PoolLine], scale: &Scale) {
    out.push_str("<g class=\"pools\">");
    for line in pools {
        let mut pts = String::new();
        for (t, v) in &line.points {
            let _ = write!(pts, "{:.1},{:.1} ", scale.x(*t), scale.y(*v as f64));
        }
        let _ = write!(
            out,
            "<polyline class=\"pool\" stroke-dasharray=\"{}\" points=\"{}\"><title>{}</title></polyline>",
            line.dash,
            pts.trim_end(),
            esc(&line.name)
        );
    }
    out.push_str("</g>\n");
}

/// The ends of the outermost loop's iterations, labelled where there is room.
fn marks(out: &mut String, timeline: &Timeline, scale: &Scale) {
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

/// The series (topmost first, as stacked) with their peaks, then the pool lines.
pub(super) fn legend(out: &mut String, timeline: &Timeline, series: &[Series]) {
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
    for line in pool_lines(timeline) {
        let _ = write!(
            out,
            "<li class=\"line\"><svg width=\"28\" height=\"10\"><line x1=\"0\" x2=\"28\" y1=\"5\" \
             y2=\"5\" stroke-dasharray=\"{}\"/></svg>{}</li>",
            line.dash,
            esc(&line.name)
        );
    }
    out.push_str("</ul>\n");
}

/// A small line of one site's live bytes over the kept points.
pub(super) fn sparkline(timeline: &Timeline, site: u32, color: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
