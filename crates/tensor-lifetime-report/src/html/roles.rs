//! The chart by role, beside the chart by site: live bytes at each iteration end stacked
//! by role (parameter, gradient, optimizer state, activation, input, other), from the
//! `roles` of the log's iteration ends (`roles.rs`); absent for a log without them.

use super::chart::stacked_svg;
use super::{esc, Series, PALETTE};
use crate::roles::Role;
use crate::size::format_bytes;
use crate::timeline::Timeline;
use std::fmt::Write as _;

/// Writes the chart by role and its legend, when the log has roles.
pub(super) fn role_chart(out: &mut String, timeline: &Timeline) {
    if timeline.points.iter().all(|p| p.roles == [0; 6]) {
        return;
    }
    let series: Vec<Series> = Role::ALL[..6]
        .iter()
        .enumerate()
        .map(|(i, role)| Series {
            name: role.as_str().to_string(),
            site: None,
            color: PALETTE[i],
            values: timeline.points.iter().map(|p| p.roles[i]).collect(),
            leak: false,
        })
        .collect();
    out.push_str("<h3>Live bytes by role</h3>\n");
    stacked_svg(
        out,
        ("roles", "live bytes over time, stacked by role"),
        timeline,
        &series,
        &[],
    );
    out.push_str("<ul class=\"legend\" id=\"role-legend\">");
    for s in series.iter().rev() {
        let peak = s.values.iter().max().copied().unwrap_or(0);
        let _ = write!(
            out,
            "<li><span class=\"swatch\" style=\"background:{}\"></span>{} \
             <span class=\"peak\">peak {}</span></li>",
            s.color,
            esc(&s.name),
            esc(&format_bytes(peak))
        );
    }
    out.push_str("</ul>\n");
}
