//! `cuda_training` in leaky mode, on the CPU with the small configuration: the report
//! names the replay buffer's leak at `x` and the running loss's autograd graph at
//! `running`, with their bytes (on the GPU, docs/gpu.md records the same with GPU bytes).

use candle_core::Device;
use tensor_lifetime::FindingKind;
use tensor_lifetime_examples::cuda_training::{train, Config, Mode};

#[test]
fn leaky_mode_names_both_sites() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "leaky_mode_names_both_sites") {
        return;
    }
    let cfg = Config::small();
    let out = train(&Device::Cpu, Mode::Leaky, &cfg).unwrap();
    let leaks: Vec<_> = out.report.leaks().collect();
    assert_eq!(leaks.len(), 2, "{}", out.report);

    let x = leaks
        .iter()
        .find(|f| f.site.label == "x")
        .expect("the replay leak");
    assert_eq!(x.kind, FindingKind::Leak);
    assert!(x.site.file.ends_with("cuda_training.rs"));
    assert_eq!(x.holders[0].label.as_deref(), Some("replay"));
    // One batch of `batch x features` f32 per step of the judging loop.
    let batch_bytes = (cfg.batch * cfg.features * 4) as u64;
    assert_eq!(x.bytes_per_iteration, batch_bytes, "{}", out.report);

    let running = leaks
        .iter()
        .find(|f| f.site.label == "running")
        .expect("the running loss");
    assert_eq!(running.kind, FindingKind::GraphRetention);
    // The graph holds every step's activations: far more than the scalars themselves.
    assert!(running.graph_bytes > 8 * batch_bytes, "{}", out.report);
    assert!(out.stats.tracked >= x.bytes);
}
