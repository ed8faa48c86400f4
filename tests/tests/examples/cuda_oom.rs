//! `cuda_oom` on the CPU: its stand-in for candle's CUDA out-of-memory error leaves the
//! tracked function, which writes the post-mortem once (here into the JSON report): the
//! leaking site, `hidden` in `Trainer::features`, holds the most bytes, with its role
//! and its call path.

use candle_core::Device;
use tensor_lifetime_examples::cuda_oom::{train_until_oom, Config};
use tensor_lifetime_tests::{json_report_env, read_json};

#[test]
fn out_of_memory_writes_the_post_mortem() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "out_of_memory_writes_the_post_mortem",
    ) {
        return;
    }
    let json_path = json_report_env("cuda_oom.json");
    let cfg = Config::cpu();
    let err = train_until_oom(&Device::Cpu, &cfg).unwrap_err();
    assert!(
        err.to_string().contains("CUDA_ERROR_OUT_OF_MEMORY"),
        "{err}"
    );

    let json = read_json(&json_path);
    let pm = &json["post_mortem"];
    assert!(
        pm["reason"].as_str().unwrap().starts_with("out of memory"),
        "{pm:#}"
    );
    let top = &pm["by_site"][0];
    assert_eq!(top["site"]["label"], "hidden", "{pm:#}");
    assert_eq!(top["role"], "activation", "{pm:#}");
    let steps = cfg.fake_oom_after.unwrap();
    assert_eq!(top["tensors"], steps as u64, "{pm:#}");
    assert_eq!(
        top["bytes"],
        (steps * cfg.batch * cfg.hidden * 4) as u64,
        "{pm:#}"
    );
    let path: Vec<&str> = top["call_path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    assert_eq!(path, ["train_until_oom", "Trainer::features"], "{pm:#}");
    assert_eq!(pm["by_holder"][0]["label"], "history", "{pm:#}");

    // Asked for now, after the function returned: its history was freed with it.
    let now = tensor_lifetime::post_mortem();
    assert!(
        now.by_site.iter().all(|s| s.site.label != "hidden"),
        "{now}"
    );
}
