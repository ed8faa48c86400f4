//! Reports and diffs as GitHub-flavoured Markdown: a heading and a table that a CI job
//! appends to `$GITHUB_STEP_SUMMARY` or posts as a pull request comment. Each finding's
//! site links to its line in the repository when [`Links`] knows the repository and
//! commit (GitHub Actions sets them), else it is a plain `file:line`.

use crate::diff::{Change, Diff};
use crate::report::{Finding, Report};
use crate::size::format_bytes;
use std::fmt::Write;

/// Where a site's `file:line` links to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Links {
    /// `https://github.com/owner/repo/blob/<commit>`; none: plain paths.
    blob: Option<String>,
}

impl Links {
    /// Plain `file:line`, no links.
    pub fn none() -> Links {
        Links::default()
    }

    /// Links into a GitHub repository at a commit: the values of GitHub Actions'
    /// `GITHUB_SERVER_URL`, `GITHUB_REPOSITORY` and `GITHUB_SHA` (none if one is missing
    /// or empty).
    pub fn github(server: Option<&str>, repository: Option<&str>, commit: Option<&str>) -> Links {
        let blob = match (server, repository, commit) {
            (Some(s), Some(r), Some(c)) if !s.is_empty() && !r.is_empty() && !c.is_empty() => {
                Some(format!("{}/{r}/blob/{c}", s.trim_end_matches('/')))
            }
            _ => None,
        };
        Links { blob }
    }

    /// `` [`file:line`](url#Lline) `` or `` `file:line` ``.
    fn site(&self, file: &str, line: u32) -> String {
        let text = format!("`{}:{line}`", cell(file));
        match &self.blob {
            Some(blob) if !file.starts_with('/') && !file.starts_with('<') => {
                let path: String = file
                    .split('/')
                    .map(url_segment)
                    .collect::<Vec<_>>()
                    .join("/");
                format!("[{text}]({blob}/{path}#L{line})")
            }
            _ => text,
        }
    }
}

/// The text of a table cell: no line breaks, `|` escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// A path segment for a URL: characters outside the unreserved set percent-encoded.
fn url_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `` `x` `` with its site linked: `` [`src/a.rs:12`](...) `x` ``.
fn site_cell(links: &Links, file: &str, line: u32, label: &str) -> String {
    format!(
        "{} `{}`",
        links.site(file, line),
        cell(label).replace('`', "'")
    )
}

fn finding_row(out: &mut String, f: &Finding, links: &Links) {
    let holder = match f.holders.first() {
        Some(h) => cell(&h.to_string()),
        None => String::new(),
    };
    let growth = if f.growing {
        format!("+{}", format_bytes(f.bytes_per_iteration))
    } else {
        "—".to_string()
    };
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {growth} | {} | {holder} |",
        f.tag(),
        site_cell(links, &f.site.file, f.site.line, &f.site.label),
        f.survivors,
        format_bytes(f.bytes),
        cell(&f.loop_name),
    );
}

/// The report as Markdown: a heading with the counts, the live memory, and a table of
/// the findings (the most serious first, as the report orders them).
pub fn report(r: &Report, links: &Links) -> String {
    let leaks = r.leaks().count();
    let mut out = format!(
        "### tensor-lifetime: {}, {}\n\n",
        plural(r.findings.len(), "finding", "findings"),
        plural(leaks, "leak", "leaks")
    );
    let _ = writeln!(
        out,
        "Live at the end: {} in {} tensors (peak {}).\n",
        format_bytes(r.live_bytes),
        r.live_tensors,
        format_bytes(r.peak_live_bytes)
    );
    if let Some(note) = r.estimate_note() {
        let _ = writeln!(out, "_{}_\n", cell(&note));
    }
    if r.findings.is_empty() {
        out.push_str("No tensor outlived the iteration that made it.\n");
        return out;
    }
    out.push_str(
        "| finding | site | survivors | bytes | growth per iteration | loop | held by |\n",
    );
    out.push_str("|---|---|--:|--:|--:|---|---|\n");
    for f in &r.findings {
        finding_row(&mut out, f, links);
    }
    out
}

/// The diff as Markdown: a heading saying whether a site grew, the totals of both runs,
/// and a table of the sites, the increases first (as the diff orders them).
pub fn diff(d: &Diff, links: &Links) -> String {
    let grown = d.grown().count();
    let mut out = format!(
        "### tensor-lifetime diff: {}, {}\n\n",
        plural(d.sites.len(), "site", "sites"),
        match grown {
            0 => "none grew".to_string(),
            n => format!("{n} grew (**INCREASE**)"),
        }
    );
    out.push_str("| run | findings | leaks | live at the end | peak live |\n");
    out.push_str("|---|--:|--:|--:|--:|\n");
    for (name, t) in [("base", &d.base), ("new", &d.new)] {
        let _ = writeln!(
            out,
            "| {name}{} | {} | {} | {} | {} |",
            t.estimate_suffix(),
            t.findings,
            t.leaks,
            format_bytes(t.live_bytes),
            format_bytes(t.peak_live_bytes)
        );
    }
    if d.sites.is_empty() {
        return out;
    }
    out.push_str("\n| change | site | finding | survivors | bytes | growth per iteration |\n");
    out.push_str("|---|---|---|--:|--:|--:|\n");
    for s in &d.sites {
        let (sb, sn) = s.survivors_before_after();
        let (bb, bn) = s.bytes_before_after();
        let growth = match (&s.new, s.change) {
            (Some(n), Change::Grew) if n.bytes_per_iteration > 0 => {
                format!("+{}", format_bytes(n.bytes_per_iteration))
            }
            _ => "—".to_string(),
        };
        let change = match s.change {
            Change::Grew => format!("**{}**", s.tag()),
            _ => s.tag().to_string(),
        };
        let _ = writeln!(
            out,
            "| {change} | {} | {} | {sb} → {sn} | {} → {} | {growth} |",
            site_cell(links, &s.file, s.line, &s.label),
            cell(&s.kinds()),
            format_bytes(bb),
            format_bytes(bn),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_links_to_its_line_at_the_commit_only_when_all_three_are_known() {
        let gh = Links::github(Some("https://github.com/"), Some("o/r"), Some("abc123"));
        assert_eq!(
            gh.site("src/my data.rs", 12),
            "[`src/my data.rs:12`](https://github.com/o/r/blob/abc123/src/my%20data.rs#L12)"
        );
        assert_eq!(gh.site("/abs/a.rs", 3), "`/abs/a.rs:3`");
        let none = Links::github(Some("https://github.com"), None, Some("abc123"));
        assert_eq!(none.site("src/a.rs", 1), "`src/a.rs:1`");
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
