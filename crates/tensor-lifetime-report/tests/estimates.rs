//! A report of a sampled run says its figures are estimates in every output that reads
//! it (JSON `estimated` and `sample_interval`, the text, the HTML page); an exact one
//! carries neither field, so exact reports are unchanged byte for byte.

use tensor_lifetime_report::{Analysis, TimelineBuilder};

#[test]
fn sampled_reports_say_they_are_estimates_and_exact_ones_do_not() {
    let mut analysis = Analysis::default();
    let exact = analysis.report();
    let json = exact.to_json();
    assert!(
        !json.contains("estimated") && !json.contains("sample_interval"),
        "{json}"
    );
    assert!(!exact.to_string().contains("estimated"));

    analysis.set_sample_interval(Some(512 * 1024));
    let sampled = analysis.report();
    assert!(sampled.estimated);
    assert_eq!(sampled.sample_interval, Some(512 * 1024));
    let value: serde_json::Value = serde_json::from_str(&sampled.to_json()).unwrap();
    assert_eq!(value["estimated"], true);
    assert_eq!(value["sample_interval"], 524288);
    let text = sampled.to_string();
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("estimated: tensors sampled by size (one per 512.0 KiB")),
        "{text}"
    );
    let page = tensor_lifetime_report::html::render(
        &TimelineBuilder::new(64).finish(),
        &sampled,
        &Default::default(),
    );
    assert!(
        page.contains("id=\"estimated\""),
        "no estimate note on the page"
    );
    // A leak test's session report is exact even in a sampled process.
    assert!(!analysis.report_for(Some(1)).estimated);
    // The JSON reads back.
    let back: tensor_lifetime_report::Report = serde_json::from_str(&sampled.to_json()).unwrap();
    assert_eq!(back.sample_interval, Some(512 * 1024));
}
