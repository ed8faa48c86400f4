//! The post-mortem on the CPU: a loop that leaks into a cache; `post_mortem()` names the
//! leaking site as the largest holder of bytes, with its role and call path, the cache
//! as the largest holder, and the site among those that grew most. No device counters
//! on the CPU. More tensors are live than `TENSOR_LIFETIME_EXACT_MAX` (16): most records
//! are then old ones of the generational registry, which the post-mortem counts too.
//! The post-mortem is the whole process's: the test runs alone in its process.

use candle_core::{DType, Device, Result, Tensor};
use tensor_lifetime::Role;
use tensor_lifetime_tests::json_report_env;

/// Steps of the loop, each keeping one `feats`.
const STEPS: usize = 60;

struct Model {
    w: Tensor,
}

#[tensor_lifetime::track]
impl Model {
    fn features(&self, step: usize) -> Result<Tensor> {
        let feats = (Tensor::ones((64, 256), DType::F32, &Device::Cpu)? * step as f64)?;
        Ok(feats)
    }
}

#[tensor_lifetime::track]
fn train(model: &Model, history: &mut Vec<Tensor>) -> Result<()> {
    'epoch: for step in 0..STEPS {
        let feats = model.features(step)?;
        let small = feats.matmul(&model.w)?;
        history.push(feats);
        let _ = small;
    }
    Ok(())
}

#[test]
fn post_mortem_names_the_leaking_site() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "post_mortem_names_the_leaking_site")
    {
        return;
    }
    let _ = json_report_env("post_mortem.json");
    let model = Model {
        w: Tensor::ones((256, 2), DType::F32, &Device::Cpu).unwrap(),
    };
    let mut history = Vec::new();
    train(&model, &mut history).unwrap();
    let pm = tensor_lifetime::post_mortem();
    let top = pm.largest_site().expect("a site");
    assert_eq!(top.site.label, "feats", "{pm}");
    assert!(top.site.function.ends_with("features"), "{pm}");
    assert_eq!(top.bytes, (STEPS * 64 * 256 * 4) as u64, "{pm}");
    assert_eq!(top.tensors, STEPS as u64, "{pm}");
    assert_eq!(top.role, Role::Other, "{pm}");
    let path: Vec<&str> = top.call_path.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(path, ["train", "Model::features"], "{pm}");
    let holder = &pm.by_holder[0];
    assert_eq!(holder.holder.label.as_deref(), Some("history"), "{pm}");
    assert_eq!(holder.bytes, top.bytes, "{pm}");
    assert_eq!(pm.largest[0].shape, [64, 256], "{pm}");
    assert_eq!(pm.grew_most[0].site.label, "feats", "{pm}");
    assert!(
        pm.devices.iter().all(|d| d.memory.pool_used.is_none()),
        "{pm}"
    );
    assert_eq!(pm.by_role.other.bytes, top.bytes, "{pm}");
    let text = pm.to_string();
    assert!(
        text.contains("created in train → Model::features"),
        "{text}"
    );
    drop(history);
}
