//! Roles from a log line to every output: the report's split, the HTML page's role chart
//! and the trace's role counters.

use tensor_lifetime_report::event::Event;

fn end(roles: &str) -> String {
    format!(
        r#"{{"event":"iteration_end","t_ns":5,"frame":1,"iteration":0,"duration_ns":1,"live_tensors":2,"live_bytes":300{roles}}}"#
    )
}

#[test]
fn an_older_iteration_end_reads_without_roles() {
    let e: Event = serde_json::from_str(&end("")).unwrap();
    let Event::IterationEnd { roles, .. } = &e else {
        panic!("{e:?}")
    };
    assert!(roles.is_empty());
}

#[test]
fn roles_reach_the_html_and_the_trace() {
    let line = end(
        r#","roles":[{"role":"parameter","bytes":200,"tensors":1},{"role":"activation","bytes":100,"tensors":1,"temporary_bytes":64,"temporary_tensors":2}]"#,
    );
    let e: Event = serde_json::from_str(&line).unwrap();
    let mut text = Vec::new();
    e.write_line(&mut text).unwrap();
    assert_eq!(serde_json::from_slice::<Event>(&text).unwrap(), e);

    let mut analysis = tensor_lifetime_report::Analysis::default();
    analysis.apply(&e);
    let report = analysis.report();
    assert_eq!(report.memory_by_role.now.parameter.bytes, 200);
    assert_eq!(report.memory_by_role.peak.activation.bytes, 164);
    assert!(report
        .to_string()
        .contains("memory by role at the latest iteration end: parameter 200 B (1)"));

    let mut timeline = tensor_lifetime_report::TimelineBuilder::new(64);
    timeline.apply(&e);
    let page =
        tensor_lifetime_report::html::render(&timeline.finish(), &report, &Default::default());
    assert!(page.contains("id=\"roles\""), "no role chart");
    assert!(page.contains("Live bytes by role"));

    let mut trace = tensor_lifetime_report::trace::TraceWriter::new(Vec::new(), &[]).unwrap();
    trace.apply(&e).unwrap();
    let out = String::from_utf8(trace.finish().unwrap()).unwrap();
    assert!(out.contains("bytes: parameter"), "{out}");
    assert!(out.contains("bytes: temporary"), "{out}");
}
