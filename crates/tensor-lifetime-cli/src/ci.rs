//! The formats CI reads of a `report`: SARIF and GitHub annotations (one per finding,
//! saying when the figures are estimates) and the links Markdown gives a site.

use anyhow::Result;
use std::io::Write;
use tensor_lifetime_report::markdown::Links;
use tensor_lifetime_report::sarif::Annotated;
use tensor_lifetime_report::{github, sarif, Finding};

/// Where Markdown links a site: the repository and commit GitHub Actions names, if set.
pub(crate) fn links() -> Links {
    let var = |name: &str| std::env::var(name).ok();
    Links::github(
        var("GITHUB_SERVER_URL").as_deref(),
        var("GITHUB_REPOSITORY").as_deref(),
        var("GITHUB_SHA").as_deref(),
    )
}

/// Writes `findings` (each with its text) as a SARIF log (`sarif`) or as GitHub
/// annotations; `note`, the sentence that says the figures are estimates (a sampled
/// run's), closes each finding's text.
pub(crate) fn write_annotations<'a>(
    out: &mut impl Write,
    sarif: bool,
    findings: impl Iterator<Item = (&'a Finding, String)>,
    note: Option<String>,
) -> Result<()> {
    let texts: Vec<(&Finding, String)> = findings
        .map(|(f, text)| match &note {
            Some(note) => (f, format!("{}\n{note}\n", text.trim_end())),
            None => (f, text),
        })
        .collect();
    let annotated: Vec<Annotated> = texts
        .iter()
        .map(|(finding, text)| Annotated { finding, text })
        .collect();
    if sarif {
        writeln!(out, "{}", sarif::render(&annotated))?;
    } else {
        write!(out, "{}", github::render(&annotated))?;
    }
    Ok(())
}
