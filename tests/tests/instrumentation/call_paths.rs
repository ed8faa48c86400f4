//! Call paths: a helper called from two loops (in two tracked functions) keeps what it
//! makes in a cache that nothing trims; the finding of its site names both paths, each
//! with the loop's function first, and never a path that was not on the stack. The
//! report is the whole process's: the test runs alone in its process.

use candle_core::{DType, Device, Result, Tensor};
use tensor_lifetime::CallFrame;
use tensor_lifetime_tests::{findings_for, json_report_env, read_json};

#[tensor_lifetime::track]
fn make_entry(rows: usize) -> Result<Tensor> {
    let entry = Tensor::ones((rows, 16), DType::F32, &Device::Cpu)?;
    Ok(entry)
}

#[tensor_lifetime::track]
fn fill_from_a(cache: &mut Vec<Tensor>) -> Result<()> {
    'a: for _ in 0..8 {
        let t = make_entry(4)?;
        cache.push(t);
    }
    Ok(())
}

#[tensor_lifetime::track]
fn fill_from_b(cache: &mut Vec<Tensor>) -> Result<()> {
    'b: for _ in 0..8 {
        let t = make_entry(8)?;
        cache.push(t);
    }
    Ok(())
}

fn names(path: &[CallFrame]) -> Vec<&str> {
    path.iter().map(|f| f.function.as_str()).collect()
}

#[test]
fn a_helper_called_from_two_loops_has_both_paths() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "a_helper_called_from_two_loops_has_both_paths",
    ) {
        return;
    }
    let json_path = json_report_env("call_paths.json");
    let mut cache = Vec::new();
    fill_from_a(&mut cache).unwrap();
    fill_from_b(&mut cache).unwrap();
    let report = tensor_lifetime::report();
    let findings: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.site.label == "entry")
        .collect();
    assert!(!findings.is_empty(), "{report}");
    let mut paths: Vec<Vec<&str>> = Vec::new();
    for f in &findings {
        assert!(f.is_leak(), "{report}");
        for p in std::iter::once(&f.call_path).chain(&f.other_call_paths) {
            paths.push(names(p));
        }
        // Each finding's own path is that of the loop that judged it.
        let own = names(&f.call_path);
        let expected = if f.loop_name == "'a" {
            "fill_from_a"
        } else {
            "fill_from_b"
        };
        assert_eq!(own, [expected, "make_entry"], "{report}");
        assert_eq!(f.call_path[1].line, line_of_helper(), "{report}");
    }
    paths.sort();
    paths.dedup();
    assert_eq!(
        paths,
        [
            vec!["fill_from_a", "make_entry"],
            vec!["fill_from_b", "make_entry"]
        ],
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.contains("created in fill_from_a → make_entry")
            || text.contains("created in fill_from_b → make_entry"),
        "{text}"
    );
    // The JSON report carries them too.
    let json = read_json(&json_path);
    let entry = findings_for(&json, "entry");
    assert!(!entry.is_empty(), "{json:#}");
    assert_eq!(entry[0]["call_path"][1]["function"], "make_entry");
    assert!(entry[0]["call_path"][0]["file"]
        .as_str()
        .unwrap()
        .ends_with("call_paths.rs"));
}

fn line_of_helper() -> u32 {
    tensor_lifetime_tests::line_of(include_str!("call_paths.rs"), "fn make_entry(")
}
