//! Findings as SARIF 2.1.0 (Static Analysis Results Interchange Format), the file that
//! GitHub code scanning (`github/codeql-action/upload-sarif`) and editors' SARIF viewers
//! read.
//!
//! One run of one tool (`tensor-lifetime`); one rule per [`FindingKind`], all of them
//! listed so that rule indices are stable; one result per finding: level `error` for a
//! leak ([`Finding::is_leak`]) and `warning` otherwise, the report's text of the finding as
//! its message, the creation site as the first location and the store sites that hold
//! its survivors as the next ones. A finding with no source site (untracked growth is
//! judged per device, a rank's divergence per rank) has no location.
//!
//! `crates/tensor-lifetime-cli/tests/sarif.rs` checks the output against the SARIF 2.1.0
//! JSON schema.

use crate::report::{Finding, FindingKind, SiteRef};
use serde_json::{json, Value};

/// Every kind, in the order of the rules.
pub const KINDS: [FindingKind; 8] = [
    FindingKind::Leak,
    FindingKind::GraphRetention,
    FindingKind::ViewRetention,
    FindingKind::Retained,
    FindingKind::UntrackedGrowth,
    FindingKind::ShapeChurn,
    FindingKind::RankDivergence,
    FindingKind::GrowingTensor,
];

/// A finding and the text that reports it (the text report's words for it, with the ranks
/// it occurs on when logs of several ranks were merged).
#[derive(Debug, Clone, Copy)]
pub struct Annotated<'a> {
    pub finding: &'a Finding,
    pub text: &'a str,
}

/// The title of a rule.
pub fn rule_title(kind: FindingKind) -> &'static str {
    match kind {
        FindingKind::Leak => "tensors kept across iterations keep growing",
        FindingKind::GraphRetention => "a kept tensor carries its autograd graph",
        FindingKind::ViewRetention => "small views keep large storages alive",
        FindingKind::Retained => "tensors created once and kept",
        FindingKind::UntrackedGrowth => "device memory grows beyond the tracked tensors",
        FindingKind::ShapeChurn => "a site keeps making tensors of new sizes",
        FindingKind::RankDivergence => "one rank's memory grows apart from the others",
        FindingKind::GrowingTensor => "a kept tensor is replaced by a larger one every iteration",
    }
}

/// `error` for leaks, `warning` for the rest.
pub fn level(finding: &Finding) -> &'static str {
    if finding.is_leak() {
        "error"
    } else {
        "warning"
    }
}

/// Whether a site names a source line (memory findings name a device or a rank instead).
pub fn has_source(site: &SiteRef) -> bool {
    site.line > 0 && !site.file.is_empty()
}

fn location(file: &str, line: u32, column: u32, text: String) -> Value {
    let mut region = json!({ "startLine": line });
    if column > 0 {
        region["startColumn"] = json!(column);
    }
    json!({
        "physicalLocation": {
            "artifactLocation": { "uri": file, "uriBaseId": "%SRCROOT%" },
            "region": region,
        },
        "message": { "text": text },
    })
}

fn result(a: &Annotated<'_>) -> Value {
    let f = a.finding;
    let rule_index = KINDS.iter().position(|k| *k == f.kind).unwrap_or(0);
    let mut locations = Vec::new();
    if has_source(&f.site) {
        locations.push(location(
            &f.site.file,
            f.site.line,
            f.site.column,
            format!("`{}` is created here", f.site.label),
        ));
    }
    for h in &f.holders {
        if let (Some(file), Some(line)) = (&h.file, h.line) {
            if line > 0 {
                locations.push(location(file, line, 0, h.to_string()));
            }
        }
    }
    let mut r = json!({
        "ruleId": f.kind.as_str(),
        "ruleIndex": rule_index,
        "level": level(f),
        "message": { "text": a.text.trim_end() },
        "partialFingerprints": {
            "tensorLifetimeSite/v1": format!("{}:{}:{}:{}", f.kind.as_str(), f.site.file, f.site.function, f.site.label),
        },
    });
    if !locations.is_empty() {
        r["locations"] = Value::Array(locations);
    }
    r
}

/// The SARIF log of the findings, as pretty JSON.
pub fn render(findings: &[Annotated<'_>]) -> String {
    let rules: Vec<Value> = KINDS
        .iter()
        .map(|k| {
            let default_level = if *k == FindingKind::Leak {
                "error"
            } else {
                "warning"
            };
            json!({
                "id": k.as_str(),
                "name": k.as_str(),
                "shortDescription": { "text": rule_title(*k) },
                "help": { "text": k.hint() },
                "defaultConfiguration": { "level": default_level },
            })
        })
        .collect();
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "tensor-lifetime",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/tensor-lifetime/tensor-lifetime",
                "rules": rules,
            }},
            "results": findings.iter().map(result).collect::<Vec<_>>(),
        }],
    });
    serde_json::to_string_pretty(&log).expect("a SARIF log always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{HolderKind, HolderRef};

    fn leak() -> Finding {
        let mut f = Finding::at(
            FindingKind::Leak,
            SiteRef {
                file: "src/a.rs".into(),
                line: 30,
                column: 9,
                function: "a::f".into(),
                label: "x".into(),
            },
        );
        f.holders.push(HolderRef {
            kind: HolderKind::Store,
            file: Some("src/a.rs".into()),
            line: Some(31),
            label: Some("self.cache".into()),
            count: 3,
        });
        f
    }

    #[test]
    fn a_leak_is_an_error_at_its_site_and_its_holder() {
        let f = leak();
        let text = f.to_string();
        let out: Value = serde_json::from_str(&render(&[Annotated {
            finding: &f,
            text: &text,
        }]))
        .unwrap();
        let r = &out["runs"][0]["results"][0];
        assert_eq!(r["level"], "error");
        assert_eq!(r["ruleId"], "leak");
        assert_eq!(
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
            30
        );
        assert_eq!(
            r["locations"][1]["physicalLocation"]["region"]["startLine"],
            31
        );
        assert_eq!(r["message"]["text"], text.trim_end());
        assert_eq!(
            out["runs"][0]["tool"]["driver"]["rules"]
                .as_array()
                .unwrap()
                .len(),
            KINDS.len()
        );
    }

    #[test]
    fn a_finding_without_a_source_line_has_no_location() {
        let f = Finding::at(FindingKind::UntrackedGrowth, SiteRef::default());
        let out: Value = serde_json::from_str(&render(&[Annotated {
            finding: &f,
            text: "x",
        }]))
        .unwrap();
        let r = &out["runs"][0]["results"][0];
        assert_eq!(r["level"], "warning");
        assert!(r.get("locations").is_none());
    }
}
