//! A decoding loop whose context grows by one token per step: every intermediate of a
//! step comes in a new size. The report names the site where the dynamic shape starts
//! (in data flow: the embedding of the context), once, and how many sites follow it;
//! the followers are in the JSON report only, each naming that start. It runs alone in a
//! child process: shape churn is judged over the whole process.

use candle_core::{DType, Device, Result, Tensor};
use tensor_lifetime::FindingKind;

/// Width of the model: a position is 1 KiB of f32, so the activations of a context of 64
/// tokens or more are 64 KiB or more (the size shape churn starts to matter at).
const HIDDEN: usize = 256;
const VOCAB: usize = 256;
const PROMPT: usize = 64;
const STEPS: usize = 24;

/// A one-layer decoder with fixed weights.
struct TinyDecoder {
    embed: Tensor,
    w: Tensor,
    out: Tensor,
}

impl TinyDecoder {
    fn new() -> Result<TinyDecoder> {
        let dev = Device::Cpu;
        let ramp = |rows: usize, cols: usize| -> Result<Tensor> {
            let t = Tensor::arange(0u32, (rows * cols) as u32, &dev)?.to_dtype(DType::F32)?;
            ((t * 0.37)?.sin()? * 0.1)?.reshape((rows, cols))
        };
        Ok(TinyDecoder {
            embed: ramp(VOCAB, HIDDEN)?,
            w: ramp(HIDDEN, HIDDEN)?,
            out: ramp(HIDDEN, VOCAB)?,
        })
    }
}

/// Greedy decoding without a KV cache: the whole context goes through the model at
/// every step.
#[tensor_lifetime::track]
fn generate(m: &TinyDecoder, prompt: &[u32]) -> Result<Vec<u32>> {
    let mut tokens = prompt.to_vec();
    for _ in 0..STEPS {
        let context = Tensor::new(&tokens[..], &Device::Cpu)?;
        let embedded = m.embed.index_select(&context, 0)?;
        let hidden = embedded.matmul(&m.w)?.relu()?;
        let logits = hidden.matmul(&m.out)?;
        let last = logits.get(tokens.len() - 1)?;
        tokens.push(last.argmax(0)?.to_scalar::<u32>()?);
    }
    Ok(tokens)
}

#[test]
fn a_growing_context_is_one_churn_finding_at_its_start() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "a_growing_context_is_one_churn_finding_at_its_start",
    ) {
        return;
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let model = TinyDecoder::new().unwrap();
    let prompt: Vec<u32> = (0..PROMPT as u32).map(|i| i * 7 % VOCAB as u32).collect();
    let tokens = generate(&model, &prompt).unwrap();
    assert_eq!(tokens.len(), PROMPT + STEPS);

    let report = tensor_lifetime::report();
    assert!(!report.has_leaks(), "{report}");
    let churn: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::ShapeChurn)
        .collect();
    let starts: Vec<_> = churn.iter().filter(|f| f.follows.is_none()).collect();
    assert_eq!(starts.len(), 1, "one churn finding per loop: {report}");
    let start = starts[0];
    assert_eq!(start.site.label, "embedded", "{report}");
    // `hidden` and `logits` follow it (the context itself is too small to matter).
    assert!(start.hint.contains("2 more sites"), "{}", start.hint);
    let mut followers: Vec<&str> = churn
        .iter()
        .filter(|f| f.follows.as_ref() == Some(&start.site))
        .map(|f| f.site.label.as_str())
        .collect();
    followers.sort_unstable();
    assert_eq!(followers, ["hidden", "logits"], "{report}");
    // The text shows the start only.
    let text = report.to_string();
    assert_eq!(text.matches("CHURN").count(), 1, "{text}");
    assert!(
        text.contains("`embedded` makes tensors of new sizes"),
        "{text}"
    );
}
