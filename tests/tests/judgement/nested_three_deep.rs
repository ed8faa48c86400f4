//! Loops nested three deep with many tensors alive (epoch → episode → step, an agent
//! that keeps each episode's observations until the episode's update): above
//! `TENSOR_LIFETIME_EXACT_MAX` live records the step loop's iteration ends are partial
//! sweeps, and its close hands its survivors to an episode iteration whose end is
//! partial too. A per-episode summary kept in a history that outlives the run is a leak
//! of the episode loop, named by its line and variable and sized exactly; the same agent
//! that clears the history at each epoch's end is clean. Each case runs in its own leak
//! session, and so does each agent of the last test, run side by side on threads of their
//! own: another thread's walks must not change what a session finds
//! (`TENSOR_LIFETIME_EXACT_MAX=0` makes every inner iteration end partial).

use candle_core::{Device, Result, Tensor};
use tensor_lifetime::{check_leaks, LeakTestOptions, LeakTestOutcome, Role};
use tensor_lifetime_tests::serial;

const EPOCHS: usize = 3;
const EPISODES: usize = 4;
/// Steps per episode: the episode buffer alone is above the 16 live records of exact
/// sweeps.
const STEPS: usize = 40;
/// Floats per observation (128 bytes).
const OBS: usize = 32;
/// Floats per episode summary (1 KiB).
const SUMMARY: usize = 256;
/// The text of this file: `summary`'s site in `agent` is found by its line.
const SOURCE: &str = include_str!("nested_three_deep.rs");

#[tensor_lifetime::track]
fn agent(history: &mut Vec<Tensor>, epoch_end: impl Fn(&mut Vec<Tensor>)) -> Result<f32> {
    let mut total = 0.0;
    for _epoch in 0..EPOCHS {
        for episode in 0..EPISODES {
            let mut observations: Vec<Tensor> = Vec::with_capacity(STEPS);
            for step in 0..STEPS {
                let obs = Tensor::full((episode * STEPS + step) as f32, OBS, &Device::Cpu)?;
                let scaled = (&obs * 0.5)?;
                observations.push(scaled);
            }
            // The episode's update: its observations are released with the buffer.
            let batch = Tensor::stack(&observations, 0)?;
            total += batch.mean_all()?.to_scalar::<f32>()?;
            drop(observations);
            let summary = Tensor::full(total, SUMMARY, &Device::Cpu)?; // nested: summary
            history.push(summary);
        }
        epoch_end(history);
    }
    Ok(total)
}

fn run(clear_each_epoch: bool) -> (Vec<Tensor>, LeakTestOutcome) {
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let mut history = Vec::new();
    let (result, outcome) = check_leaks(LeakTestOptions::default(), || {
        if clear_each_epoch {
            agent(&mut history, Vec::clear)
        } else {
            agent(&mut history, |_| {})
        }
    })
    .expect("tracking is on");
    result.unwrap();
    (history, outcome)
}

#[test]
fn a_history_kept_three_loops_deep_is_a_leak_named_and_sized() {
    let _serial = serial();
    let (history, outcome) = run(false);
    assert_eq!(history.len(), EPOCHS * EPISODES);
    let leaks: Vec<_> = outcome.report.leaks().collect();
    assert_eq!(leaks.len(), 1, "{}", outcome.report);
    let leak = leaks[0];
    assert_eq!(leak.site.label, "summary", "{}", outcome.report);
    assert!(leak.site.file.ends_with("nested_three_deep.rs"), "{leak:?}");
    assert_eq!(
        leak.site.line,
        tensor_lifetime_tests::line_of(SOURCE, "// nested: summary"),
        "{}",
        outcome.report
    );
    // The finding is the episode loop's: the summaries born in its iterations of the
    // latest epoch (one per episode), growing by one per iteration. Those of the earlier
    // epochs were handed to the epoch loop when the episode loop closed.
    assert_eq!(leak.survivors, EPISODES as u64, "{}", outcome.report);
    assert_eq!(
        leak.bytes,
        (EPISODES * SUMMARY * 4) as u64,
        "{}",
        outcome.report
    );
    assert_eq!(leak.iterations, EPISODES as u64, "{}", outcome.report);
    // Its role and where it was created, as an exact walk names them, though the
    // summaries' survivors are old records summed up by the partial sweeps.
    assert_eq!(leak.role, Some(Role::Other), "{}", outcome.report);
    let path: Vec<&str> = leak.call_path.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(path, ["agent"], "{}", outcome.report);
}

#[test]
fn a_history_cleared_at_each_epoch_is_clean() {
    let _serial = serial();
    let (history, outcome) = run(true);
    assert!(history.is_empty());
    assert_eq!(outcome.report.leaks().count(), 0, "{}", outcome.report);
}

/// Agents side by side: another session's walks (its outermost iteration ends are exact,
/// its loops' closes walk every record) run in the middle of this one's iterations, and
/// must neither turn its temporaries into survivors nor make the stale counts of its
/// dropped episode buffers differ from one episode to the next. Before that was fixed,
/// a session here reported the step loop's `scaled` observations (dropped at each
/// episode's end) or a temporary `obs` in some runs.
#[test]
fn agents_side_by_side_find_only_their_own_leaks() {
    const AGENTS: usize = 4;
    // One test at a time; the agents of this one run side by side.
    let _serial = serial();
    let outcomes: Vec<(bool, Vec<Tensor>, LeakTestOutcome)> = std::thread::scope(|s| {
        let agents: Vec<_> = (0..AGENTS)
            .map(|i| {
                s.spawn(move || {
                    let clear = i % 2 == 1;
                    let (history, outcome) = run(clear);
                    (clear, history, outcome)
                })
            })
            .collect();
        agents.into_iter().map(|a| a.join().unwrap()).collect()
    });
    for (clear, history, outcome) in outcomes {
        let leaks: Vec<_> = outcome.report.leaks().collect();
        let others: Vec<_> = outcome
            .report
            .findings
            .iter()
            .filter(|f| f.site.label != "summary")
            .collect();
        assert!(others.is_empty(), "{}", outcome.report);
        if clear {
            assert!(history.is_empty());
            assert!(leaks.is_empty(), "{}", outcome.report);
        } else {
            assert_eq!(leaks.len(), 1, "{}", outcome.report);
            assert_eq!(leaks[0].survivors, EPISODES as u64, "{}", outcome.report);
            assert_eq!(leaks[0].iterations, EPISODES as u64, "{}", outcome.report);
        }
    }
}
