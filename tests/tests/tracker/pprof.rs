//! `write_pprof` / `pprof_profile` in process: the live tensors of a loop that keeps its
//! batches, grouped by site with their bytes, role, device and holder; the file is gzip;
//! a path that cannot be written is an error naming it. The test runs alone in its
//! process (the live tensors are the process's).

use candle_core::{DType, Device, Tensor};

#[test]
fn write_pprof_profiles_the_live_tensors_of_a_leaking_loop() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "write_pprof_profiles_the_live_tensors_of_a_leaking_loop",
    ) {
        return;
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let mut cache = Vec::new();
    let steps = tensor_lifetime::loop_scope!("'steps");
    for _ in 0..6 {
        let _it = steps.iteration();
        let x = Tensor::ones((64, 64), DType::F32, &Device::Cpu).unwrap();
        tensor_lifetime::tag!(x);
        tensor_lifetime::store!(x, "cache");
        cache.push(x);
    }
    drop(steps);
    let profile = tensor_lifetime::pprof_profile();
    let top = &profile.live[0];
    assert_eq!(top.site.label, "x", "{profile:#?}");
    assert_eq!(top.tensors, 6);
    assert_eq!(top.bytes, 6 * 64 * 64 * 4);
    assert_eq!(top.device, "cpu");
    assert!(
        top.holder.starts_with("stored into `cache`"),
        "{}",
        top.holder
    );
    let born = profile
        .allocated
        .iter()
        .find(|a| a.site.label == "x")
        .unwrap();
    assert_eq!(born.tensors, 6);

    let dir = std::env::temp_dir().join(format!("tl-pprof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("live.pb.gz");
    tensor_lifetime::write_pprof(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[..2], [0x1f, 0x8b], "gzip");
    let bad = dir.join("missing").join("live.pb.gz");
    let err = tensor_lifetime::write_pprof(&bad).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("cannot write {}", bad.display())),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    drop(cache);
}
