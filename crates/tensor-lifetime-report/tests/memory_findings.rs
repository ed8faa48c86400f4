//! The memory findings on hand-made event sequences.

use tensor_lifetime_report::event::{Event, MemorySample, SiteInfo, SiteKind};
use tensor_lifetime_report::{Finding, FindingKind, MemoryFindings};
use tensor_lifetime_test_support::events::{born, iteration_end, loop_start, pool_sample};

fn site_info(label: &str) -> SiteInfo {
    SiteInfo {
        file: "src/train.rs".into(),
        line: 42,
        column: 9,
        function: "train".into(),
        label: label.into(),
        kind: SiteKind::Binding,
        note: None,
        from: Vec::new(),
    }
}

/// Frame 1 of the `'steps` loop (site 0).
fn start() -> Event {
    loop_start(1, 0).name("'steps").into()
}

fn end(iteration: u64) -> Event {
    iteration_end(1, iteration).into()
}

fn memory(tracked: u64, pool_used: u64) -> Event {
    pool_sample("cuda:0", tracked, pool_used)
}

/// A tensor of site 1 born in `iteration` of frame 1.
fn born_in(iteration: u64, bytes: u64, shape: Vec<usize>) -> Event {
    born(1)
        .during(1, iteration)
        .bytes(bytes)
        .shape(shape)
        .into()
}

const MIB: u64 = 1 << 20;

/// One loop of `n` iterations; after iteration `i` a memory sample of
/// `(tracked(i), used(i))`.
fn run_memory(n: u64, sample: impl Fn(u64) -> (u64, u64)) -> Vec<Finding> {
    let mut m = MemoryFindings::default();
    m.apply(&start());
    for i in 0..n {
        m.apply(&end(i));
        let (tracked, used) = sample(i);
        m.apply(&memory(tracked, used));
    }
    let info = site_info("'steps");
    m.findings(|_| Some(&info))
}

#[test]
fn untracked_growth_is_found_with_its_rate() {
    // 2 MiB per iteration allocated outside tracked code; tracked flat at 100 MiB.
    let f = run_memory(10, |i| (100 * MIB, 100 * MIB + 5 * MIB + 2 * MIB * i));
    assert_eq!(f.len(), 1, "{f:?}");
    let f = &f[0];
    assert_eq!(f.kind, FindingKind::UntrackedGrowth);
    assert_eq!(f.site.file, "cuda:0");
    assert_eq!(f.bytes_per_iteration, 2 * MIB);
    assert_eq!(f.bytes, 16 * MIB);
    assert_eq!(f.loop_name, "'steps");
    assert!(f.hint.contains("+16.0 MiB in 8 iterations"), "{}", f.hint);
}

#[test]
fn growth_of_tracked_survivors_is_not_untracked_growth() {
    // A tracked leak: pool used grows exactly with tracked bytes.
    let f = run_memory(10, |i| (100 * MIB + 3 * MIB * i, 104 * MIB + 3 * MIB * i));
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn slow_untracked_leak_adds_up() {
    // 256 KiB per iteration, below the 1 MiB tolerance per sample.
    let f = run_memory(40, |i| (10 * MIB, 12 * MIB + (MIB / 4) * i));
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].bytes_per_iteration, MIB / 4);
}

#[test]
fn growth_under_a_sawtooth_of_step_sizes_is_found() {
    // As measured on an H200 (docs/gpu.md): +15 MiB per step, and the step's own
    // tensors, from 0 to 40 MiB with the batch size, cycling every 14 steps.
    let f = run_memory(61, |i| {
        (160 * MIB, 300 * MIB + 15 * MIB * i + 3 * MIB * (i % 14))
    });
    assert_eq!(f.len(), 1, "{f:?}");
    // The sample at the end is just past a drop: still growing.
    assert!(f[0].bytes_per_iteration > 14 * MIB, "{:?}", f[0]);
}

#[test]
fn noise_and_a_plateau_are_not_growth() {
    // Temporaries still queued make +-0.5 MiB of noise.
    let noisy = run_memory(30, |i| (50 * MIB, 60 * MIB + (i % 3) * MIB / 4));
    assert!(noisy.is_empty(), "{noisy:?}");
    // A cache that fills for 5 iterations and then stays flat.
    let plateau = run_memory(30, |i| (50 * MIB, 60 * MIB + 4 * MIB * i.min(5)));
    assert!(plateau.is_empty(), "{plateau:?}");
}

#[test]
fn resident_memory_has_its_own_tolerance() {
    let mut m = MemoryFindings::default();
    m.apply(&start());
    for i in 0..10u64 {
        m.apply(&end(i));
        m.apply(&Event::Memory {
            t_ns: 0,
            device: "cpu".into(),
            sample: MemorySample {
                tracked: MIB,
                // 4 MiB per iteration: under the 8 MiB tolerance each sample, but it
                // adds up.
                process_resident: Some(200 * MIB + 4 * MIB * i),
                ..MemorySample::default()
            },
        });
    }
    let f = m.findings(|_| None);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].site.label, "resident memory - tracked");
    assert_eq!(f[0].bytes_per_iteration, 4 * MIB);
}

fn run_shapes(iterations: u64, sizes: impl Fn(u64) -> Vec<u64>) -> Vec<Finding> {
    let mut m = MemoryFindings::default();
    m.apply(&start());
    for i in 0..iterations {
        for b in sizes(i) {
            m.apply(&born_in(i, b, vec![32, (b / 128) as usize]));
        }
        m.apply(&end(i));
    }
    let info = site_info("x");
    m.findings(|_| Some(&info))
}

#[test]
fn dynamic_sizes_are_shape_churn() {
    // A batch of variable sequence length: a new size almost every iteration.
    let f = run_shapes(20, |i| vec![128 * 1024 + 4096 * ((i * 7) % 13)]);
    assert_eq!(f.len(), 1, "{f:?}");
    let f = &f[0];
    assert_eq!(f.kind, FindingKind::ShapeChurn);
    assert_eq!(f.site.label, "x");
    assert_eq!(f.iterations, 20);
    assert!(f.hint.starts_with("13 distinct sizes from 128.0 KiB to 176.0 KiB in 20 iterations, 12 of which brought a new size (e.g. [32, 1024] ... [32, 1216])"), "{}", f.hint);
}

#[test]
fn churn_is_judged_on_the_tensors_own_size() {
    // Views of varying length into one fixed 4 MiB storage: the birth events carry
    // the storage's bytes, always the same; the views' own sizes churn.
    let mut m = MemoryFindings::default();
    m.apply(&start());
    for i in 0..20u64 {
        let rows = 1024 + 32 * ((i * 7) % 13) as usize;
        m.apply(&born_in(i, 4 << 20, vec![rows, 32]));
        m.apply(&end(i));
    }
    let info = site_info("x");
    let f = m.findings(|_| Some(&info));
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, FindingKind::ShapeChurn);
    assert!(
        f[0].hint.starts_with("13 distinct sizes from 128.0 KiB to"),
        "{}",
        f[0].hint
    );
}

#[test]
fn same_sizes_every_iteration_are_not_churn() {
    // One size per layer, the same set each iteration.
    let f = run_shapes(20, |_| (1..=12).map(|l| l * 256 * 1024).collect());
    assert!(f.is_empty(), "{f:?}");
    // Few distinct sizes (bucketed shapes) are fine too.
    let f = run_shapes(20, |i| vec![(1 + i % 4) * 256 * 1024]);
    assert!(f.is_empty(), "{f:?}");
    // Small tensors do not matter.
    let f = run_shapes(20, |i| vec![4 * (i + 1)]);
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn renders_with_numbers() {
    let growth = run_memory(10, |i| (100 * MIB, 105 * MIB + 2 * MIB * i));
    let churn = run_shapes(20, |i| vec![128 * 1024 + 4096 * ((i * 7) % 13)]);
    let text = format!("{}{}", growth[0], churn[0]);
    let expected = "\
UNTRACKED cuda:0  pool used - tracked: +2.0 MiB per iteration in loop 'steps
         pool used 123.0 MiB with 100.0 MiB tracked: 23.0 MiB untracked now, +16.0 MiB in 8 iterations (8 growth events); annotate the code that allocates (#[track]) to find the site, or look for tensors kept by code outside tracked functions
CHURN    src/train.rs:42  `x` makes tensors of new sizes in loop 'steps, up to 176.0 KiB
         13 distinct sizes from 128.0 KiB to 176.0 KiB in 20 iterations, 12 of which brought a new size (e.g. [32, 1024] ... [32, 1216]); pad or bucket the shapes (e.g. sequence lengths to multiples of 64) so the pool can reuse its blocks
";
    assert_eq!(text, expected);
}
