//! `cuda_training` in clean mode, on the CPU with the small configuration (what CI can
//! run; the GPU run is recorded in docs/gpu.md): no leak, and the tracked live bytes are
//! exactly what the run keeps (parameters, momentum buffers, the running-loss scalar).

use candle_core::Device;
use tensor_lifetime_examples::cuda_training::{train, Config, Mode};

#[test]
fn clean_mode_tracks_every_byte_it_keeps() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "clean_mode_tracks_every_byte_it_keeps",
    ) {
        return;
    }
    let cfg = Config::small();
    let out = train(&Device::Cpu, Mode::Clean, &cfg).unwrap();
    assert!(out.final_loss.is_finite());
    assert!(!out.report.has_leaks(), "{}", out.report);
    // Parameters: three linear layers (weights and biases), f32.
    let params = (cfg.features * cfg.hidden
        + cfg.hidden
        + cfg.hidden * cfg.hidden
        + cfg.hidden
        + cfg.hidden * cfg.classes
        + cfg.classes) as u64
        * 4;
    // Parameters, one momentum buffer per parameter, and the 4-byte running scalar.
    assert_eq!(out.stats.tracked, 2 * params + 4, "{:?}", out.live);
    assert_eq!(
        out.live.iter().map(|(_, b)| b).sum::<u64>(),
        out.stats.tracked
    );
    // On the CPU there is no pool: those fields are absent, resident memory is there.
    assert_eq!(out.stats.pool_used, None);
    assert_eq!(out.stats.device_total, None);
    assert!(out
        .stats
        .process_resident
        .is_some_and(|r| r > out.stats.tracked));
}
