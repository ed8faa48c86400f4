//! The event log's births as the probes saw them: every `born` event carries its
//! tensor's shape (in place up to rank 6, kept apart above it), its dtype and device, and
//! a time between the loop's start and the iteration end that drained it, also for the
//! probes of a second thread (probe order across threads: each probe paired with what it
//! kept for the log).

use candle_core::{DType, Device, Result, Tensor};
use tensor_lifetime_report::Event;

const STEPS: usize = 40;

/// Per step: a rank-2 temporary, a rank-7 one and a rank-7 one kept; a worker thread
/// makes a rank-3 tensor the loop keeps too.
#[tensor_lifetime::track]
fn workload(device: &Device) -> Result<Vec<Tensor>> {
    let mut kept = Vec::new();
    for step in 0..STEPS {
        let flat = Tensor::ones((4, 8), DType::F32, device)?;
        let deep = Tensor::ones(vec![1, 2, 1, 2, 1, 2, 3], DType::F32, device)?;
        let deeper = (&deep * (step as f64))?;
        kept.push(deeper);
        let d = device.clone();
        let from_worker = std::thread::spawn(move || worker(&d)).join().unwrap()?;
        kept.push(from_worker);
        drop(flat);
    }
    Ok(kept)
}

#[tensor_lifetime::track]
fn worker(device: &Device) -> Result<Tensor> {
    let made = Tensor::zeros((2, 3, 5), DType::F16, device)?;
    Ok(made)
}

#[test]
fn every_birth_carries_its_shape_and_a_time_in_its_iteration() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "every_birth_carries_its_shape_and_a_time_in_its_iteration",
    ) {
        return;
    }
    tensor_lifetime_tests::event_log_env("births.tlog");
    let kept = workload(&Device::Cpu).unwrap();
    assert_eq!(kept.len(), 2 * STEPS);
    let events = tensor_lifetime_tests::read_event_log();
    let mut sites = std::collections::HashMap::new();
    for (_, e) in &events {
        if let Event::Site { id, info } = e {
            sites.insert(*id, info.label.clone());
        }
    }
    let loop_start = events
        .iter()
        .find_map(|(_, e)| match e {
            Event::LoopStart { t_ns, .. } => Some(*t_ns),
            _ => None,
        })
        .expect("the loop started");
    let mut shapes: std::collections::BTreeMap<String, Vec<(Vec<usize>, String)>> =
        Default::default();
    let mut last_end = loop_start;
    let mut pending_births = Vec::new();
    for (_, e) in &events {
        match e {
            Event::Born {
                t_ns,
                site,
                shape,
                dtype,
                device,
                ..
            } => {
                assert_eq!(device, "cpu");
                let shape = shape.clone().expect("a birth's shape");
                shapes
                    .entry(sites[site].clone())
                    .or_default()
                    .push((shape, dtype.clone()));
                pending_births.push(*t_ns);
            }
            Event::IterationEnd { t_ns, .. } => {
                for born in pending_births.drain(..) {
                    assert!(
                        born >= loop_start && born <= *t_ns,
                        "a birth at {born} ns, between the loop's start {loop_start} and its \
                         drain's iteration end {t_ns}"
                    );
                }
                assert!(*t_ns >= last_end, "iteration ends in time order");
                last_end = *t_ns;
            }
            _ => {}
        }
    }
    let of = |label: &str| shapes.get(label).cloned().unwrap_or_default();
    let expect = |label: &str, shape: &[usize], dtype: &str| {
        let births = of(label);
        assert_eq!(births.len(), STEPS, "births at `{label}`: {births:?}");
        assert!(
            births.iter().all(|(s, d)| s == shape && d == dtype),
            "`{label}`: {births:?}"
        );
    };
    expect("flat", &[4, 8], "f32");
    expect("deep", &[1, 2, 1, 2, 1, 2, 3], "f32");
    expect("deeper", &[1, 2, 1, 2, 1, 2, 3], "f32");
    expect("made", &[2, 3, 5], "f16");
}
