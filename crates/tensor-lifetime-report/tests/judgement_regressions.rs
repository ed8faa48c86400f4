//! Regressions of the judgement found by the reliability work (docs/reliability.md):
//! false alarms of the reliability matrix (tests/tests/reliability/), reduced to
//! the survivor counts that caused them, and event logs that made the reader panic.

use tensor_lifetime_report::event::HolderSpec;
use tensor_lifetime_report::{Analysis, Event, Report, SiteKind};
use tensor_lifetime_test_support::events::{iteration_end, loop_end, loop_start, site};

fn start(frame: u64, site: u32, parent: Option<(u64, u64)>) -> Event {
    let start = loop_start(frame, site);
    match parent {
        Some((frame, iteration)) => start.parent(frame, iteration).into(),
        None => start.into(),
    }
}

/// An iteration end where site 3 has `survivors`, born in iterations `first..=last`.
fn end(frame: u64, iteration: u64, survivors: u64, first: u64, last: u64) -> Event {
    let end = iteration_end(frame, iteration).at(iteration);
    if survivors == 0 {
        return end.into();
    }
    let kept = end.site(3).survivors(survivors).bytes(64 * survivors);
    let kept = kept
        .born(first, last)
        .holder(HolderSpec::Unknown, survivors);
    kept.into()
}

fn judge(events: &[Event]) -> Report {
    let mut a = Analysis::default();
    a.apply(&site(1, "'step").kind(SiteKind::Loop).into());
    a.apply(&site(2, "").kind(SiteKind::Loop).into());
    a.apply(&site(3, "x").into());
    events.iter().for_each(|e| a.apply(e));
    a.report()
}

/// Momentum SGD written by hand (matrix case C1): each step an inner loop over the 4
/// parameters replaces their velocity, so the inner loop sees 1, 2, 3, 4 survivors
/// (growing) and the step loop `per_step(step)`.
fn per_parameter_state(steps: u64, per_step: impl Fn(u64) -> u64) -> Vec<Event> {
    let mut events = vec![start(1, 1, None)];
    for step in 0..steps {
        let inner = 100 + step;
        events.push(start(inner, 2, Some((1, step))));
        for p in 0..4 {
            events.push(end(inner, p, p + 1, 0, p));
        }
        events.push(loop_end(inner, 4));
        let kept = per_step(step);
        let first = if kept > 4 { 0 } else { step };
        events.push(end(1, step, kept, first, step));
    }
    events
}

/// Rebuilt to the same height each step: not a leak. (The warm-up step confirms no nested
/// growth at all, so one step is clean too.)
#[test]
fn state_an_inner_loop_rebuilds_every_step_is_not_a_leak() {
    let report = judge(&per_parameter_state(1, |_| 4));
    assert!(!report.has_leaks(), "{report}");
    let report = judge(&per_parameter_state(6, |_| 4));
    assert!(!report.has_leaks(), "{report}");
    let mut events = per_parameter_state(6, |_| 4);
    events.push(loop_end(1, 6));
    let report = judge(&events);
    assert!(!report.has_leaks(), "{report}");
}

#[test]
fn an_inner_loop_whose_tensors_keep_piling_up_is_a_leak() {
    // The same inner loop, but its tensors are all kept: 4, 8, 12 at the step loop. The
    // second step confirms the inner loop's growth; from the fifth the step loop's own
    // series is growing too and its finding (the outermost) is the one shown.
    let report = judge(&per_parameter_state(2, |step| 4 * (step + 1)));
    let leak = report.leaks().next().unwrap_or_else(|| panic!("{report}"));
    assert_eq!((leak.site.label.as_str(), leak.survivors), ("x", 4));
    let report = judge(&per_parameter_state(5, |step| 4 * (step + 1)));
    let leak = report.leaks().next().unwrap_or_else(|| panic!("{report}"));
    assert_eq!((leak.site.label.as_str(), leak.survivors), ("x", 20));
}

/// A bounded prefetch queue fed by a loader thread (matrix case C5): how full it is at an
/// iteration end depends on thread timing, so its highs can come late (2, 4, then 8 at
/// iteration 7), and then it drains as the loader finishes. A new high 4 iterations ago
/// made it "growing" at the end; a count back under the level before that high is not.
#[test]
fn a_bounded_queue_that_filled_late_and_drains_is_not_a_leak() {
    let counts = [0, 2, 4, 4, 2, 4, 4, 8, 6, 6, 4, 2];
    let mut events = vec![start(1, 1, None)];
    for (i, c) in counts.iter().enumerate() {
        let i = i as u64;
        events.push(end(1, i, *c, i.saturating_sub(2), i));
    }
    let running = judge(&events);
    assert!(!running.has_leaks(), "{running}");
    events.push(loop_end(1, counts.len() as u64));
    assert!(!judge(&events).has_leaks());

    // A leak that keeps its latest high is still one.
    let mut events = vec![start(1, 1, None)];
    for i in 0..8 {
        events.push(end(1, i, i + 1, 0, i));
    }
    assert!(judge(&events).has_leaks());
}

/// Logs that panicked the reader: iteration numbers that go backwards (the mean gap
/// between growth events underflowed) and an iteration number of `u64::MAX` (the
/// iteration count overflowed). A log is input: a corrupt one must not crash the CLI.
#[test]
fn hostile_iteration_numbers_do_not_panic() {
    let backwards = [
        start(1, 1, None),
        end(1, 5, 1, 0, 0),
        end(1, 6, 2, 0, 0),
        end(1, 2, 3, 0, 0),
    ];
    let report = judge(&backwards);
    let _ = report.to_string();
    let huge = [
        start(1, 1, None),
        end(1, 1, 1, 0, 0),
        end(1, u64::MAX / 2, 2, 0, 0),
        end(1, u64::MAX - 1, 3, 0, 0),
        end(1, u64::MAX, 4, 0, 0),
    ];
    let report = judge(&huge);
    let _ = report.to_string();
    let _ = report.to_json();
}
