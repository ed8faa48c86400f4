//! `report --format sarif|github`: the SARIF log validated against the official SARIF
//! 2.1.0 schema, the workflow commands pinned by a snapshot.

mod common;

use common::{write_rank_logs, Logs};
use insta::assert_snapshot;
use std::path::PathBuf;

/// The SARIF 2.1.0 schema that serde-sarif ships (`src/schema.json`), found through
/// `cargo metadata` (serde-sarif is a dev-dependency that is never compiled). Offline
/// first; on a fresh machine `cargo metadata` needs the manifests of packages no build
/// downloaded (serde-sarif's `schemafy_lib` and its `Inflector`), so it then runs online.
fn sarif_schema() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let metadata = |offline: bool| {
        let mut cmd = std::process::Command::new(&cargo);
        cmd.args(["metadata", "--format-version", "1"]);
        if offline {
            cmd.arg("--offline");
        }
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo metadata")
    };
    let mut out = metadata(true);
    if !out.status.success() {
        out = metadata(false);
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let manifest = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "serde-sarif")
        .expect("serde-sarif in the dependency graph")["manifest_path"]
        .as_str()
        .unwrap()
        .to_string();
    let path = PathBuf::from(manifest)
        .with_file_name("src")
        .join("schema.json");
    let text = std::fs::read_to_string(&path).expect("serde-sarif's schema.json");
    serde_json::from_str(&text).unwrap()
}

fn validate(sarif: &serde_json::Value) {
    let schema = sarif_schema();
    assert_eq!(
        schema["id"].as_str().or(schema["$id"].as_str()).unwrap_or_default(),
        "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json",
        "the SARIF 2.1.0 schema"
    );
    // The official schema's `language` patterns (run, toolComponent) have a stray `]`
    // (`^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$`), which the validator's check of the
    // schema rejects as an ECMA-262 regex; our output has no `language`, so the pattern is
    // replaced by its evident meaning and everything else is checked as published.
    let schema: serde_json::Value = serde_json::from_str(&schema.to_string().replace(
        r#""^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$""#,
        r#""^[a-zA-Z]{2}(-[a-zA-Z]{2})?$""#,
    ))
    .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let errors: Vec<String> = validator
        .iter_errors(sarif)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "not valid SARIF 2.1.0: {errors:#?}");
}

#[test]
fn sarif_of_a_leaky_run_is_valid_sarif_2_1_0() {
    let logs = Logs::new();
    let out = logs.run(&["report", "leaky.jsonl", "--format", "sarif"]);
    assert_eq!(out.status.code(), Some(0));
    let sarif: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    validate(&sarif);
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    let leak = results
        .iter()
        .find(|r| r["ruleId"] == "leak")
        .expect("a leak");
    assert_eq!(leak["level"], "error");
    // The creation site, then the store that holds the survivors.
    assert_eq!(leak["locations"].as_array().unwrap().len(), 2);
    assert!(results
        .iter()
        .filter(|r| r["ruleId"] != "leak")
        .all(|r| r["level"] == "warning"));
}

#[test]
fn sarif_of_merged_ranks_is_valid_and_names_the_ranks() {
    let logs = Logs::new();
    write_rank_logs(&logs.path("job"), 4, &[2]);
    let out = logs.run(&["report", "job", "--format", "sarif"]);
    assert_eq!(out.status.code(), Some(0));
    let sarif: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    validate(&sarif);
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    assert!(results.iter().any(|r| r["message"]["text"]
        .as_str()
        .unwrap()
        .contains("leak on rank 2 of 4")));
    assert!(results.iter().any(|r| r["ruleId"] == "rank_divergence"));
}

#[test]
fn github_annotations_one_per_finding() {
    let logs = Logs::new();
    let out = logs.run(&["report", "leaky.jsonl", "--format", "github"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text
        .lines()
        .all(|l| l.starts_with("::error ") || l.starts_with("::warning ")));
    assert_snapshot!(text);
}

#[test]
fn github_annotations_of_merged_ranks() {
    let logs = Logs::new();
    write_rank_logs(&logs.path("job"), 4, &[1, 3]);
    let out = logs.run(&["report", "job", "--format", "github"]);
    assert_eq!(out.status.code(), Some(0));
    assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}

/// A sampled run's log (its `sampling` event after the header): every CI output says the
/// figures are estimates, and the SARIF log stays valid.
#[test]
fn ci_outputs_of_a_sampled_run_say_its_figures_are_estimates() {
    let logs = Logs::new();
    let leaky = String::from_utf8(logs.read("leaky.jsonl")).unwrap();
    let (header, rest) = leaky.split_once('\n').unwrap();
    let sampled = format!("{header}\n{{\"event\":\"sampling\",\"interval\":524288}}\n{rest}");
    logs.write("sampled.jsonl", sampled.as_bytes());
    let note = "estimated: tensors sampled by size (one per 512.0 KiB on average)";

    let out = logs.run(&["report", "sampled.jsonl", "--format", "sarif"]);
    assert_eq!(out.status.code(), Some(0));
    let sarif: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    validate(&sarif);
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for r in results {
        let text = r["message"]["text"].as_str().unwrap();
        assert!(text.contains(note), "{text}");
    }
    let out = logs.run(&["report", "sampled.jsonl", "--format", "github"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().all(|l| l.contains(note)), "{text}");
    let out = logs.run(&["report", "sampled.jsonl", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["estimated"], true);
    assert_eq!(json["sample_interval"], 524288);
    // The exact run's annotations say nothing of the kind.
    let out = logs.run(&["report", "leaky.jsonl", "--format", "github"]);
    assert!(!String::from_utf8(out.stdout).unwrap().contains("estimated"));
}
