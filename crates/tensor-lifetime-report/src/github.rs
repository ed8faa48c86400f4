//! Findings as GitHub Actions workflow commands: one line per finding that the runner
//! turns into an annotation on the pull request's line.
//!
//! `::error file=F,line=L,col=C,title=T::MESSAGE` for a leak ([`Finding::is_leak`](crate::report::Finding::is_leak)),
//! `::warning ...` for the rest; a finding with no source line (untracked growth per
//! device, a rank's divergence) has no `file`, so it shows on the run's summary. The
//! message is the report's text of the finding. Escaping follows the runner's rules:
//! in the message `%`, `\r` and `\n` become `%25`, `%0D`, `%0A`; in a property also `:`
//! and `,` (`%3A`, `%2C`).

use crate::sarif::{has_source, level, Annotated};
use std::fmt::Write;

fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// One workflow command.
pub fn command(a: &Annotated<'_>) -> String {
    let f = a.finding;
    let mut props = String::new();
    if has_source(&f.site) {
        write!(
            props,
            "file={},line={},",
            escape_property(&f.site.file),
            f.site.line
        )
        .unwrap();
        if f.site.column > 0 {
            write!(props, "col={},", f.site.column).unwrap();
        }
    }
    let title = format!("tensor-lifetime {}: `{}`", f.kind.as_str(), f.site.label);
    write!(props, "title={}", escape_property(&title)).unwrap();
    format!("::{} {props}::{}", level(f), escape_data(a.text.trim_end()))
}

/// One line per finding.
pub fn render(findings: &[Annotated<'_>]) -> String {
    let mut out = String::new();
    for a in findings {
        out.push_str(&command(a));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Finding, FindingKind, SiteRef};

    #[test]
    fn escapes_newlines_percent_and_property_separators() {
        let f = Finding::at(
            FindingKind::Retained,
            SiteRef {
                file: "src/a,b.rs".into(),
                line: 3,
                column: 0,
                function: String::new(),
                label: "a:b".into(),
            },
        );
        let line = command(&Annotated {
            finding: &f,
            text: "50% kept\nsecond\n",
        });
        assert_eq!(
            line,
            "::warning file=src/a%2Cb.rs,line=3,title=tensor-lifetime retained%3A `a%3Ab`::50%25 kept%0Asecond"
        );
    }
}
