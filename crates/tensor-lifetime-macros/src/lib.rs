//! The attributes of [tensor-lifetime](https://docs.rs/tensor-lifetime): `#[track]` and
//! `#[leak_test]`. Use them through the facade (`tensor_lifetime::track`).
//!
//! This crate only rewrites syntax: the generated code calls into
//! `::tensor_lifetime::__private` (probes, loop scopes, the leak-test runner), where
//! everything that decides, counts or formats lives.
//!
//! - `attr.rs`: argument parsing and its errors.
//! - `expand/`: code generation (its module docs list every rewrite and its modules).
//!
//! A byte size (`max_leaked_bytes = "1 MiB"`) is not parsed here: the expansion puts
//! the text in a constant evaluated with the runtime's `const fn` parser, so a bad size
//! is a compile error pointing at the text.
//!
//! # Features
//!
//! - `tracking`: set by the facade's `tracking` feature. Without it `#[track]` expands
//!   to the item unchanged and `#[leak_test]` to a plain `#[test]`; arguments and the
//!   item are still checked, so a build without tracking reports the same errors.

#![deny(unsafe_code)]

mod attr;
mod expand;

use proc_macro::TokenStream;

/// Whether the runtime tracking is compiled in (the facade's `tracking` feature).
const TRACKING: bool = cfg!(feature = "tracking");

/// Tracks the tensors of a function (free, method, generic, `async`, returning
/// `impl Trait`) or of every method of an `impl` block.
///
/// In the annotated body, and in the closures and `async` blocks inside it:
///
/// - every identifier bound by a `let` is tagged with its site (file, line, column,
///   function, variable name), including `let ... else` and tuple/struct patterns;
/// - assignments (`total = (total + loss)?`, `x += 1`) are tagged with the assigned place;
/// - the locals a `let`'s or an assignment's value is computed from
///   (`let logits = model.forward(&x)?` → `x`) are read before it, so that a batch held
///   by a kept autograd graph is known to be held by it (candle keeps an op's inputs
///   private);
/// - stores into containers, `push`, `push_back`, `push_front`, `insert`, `extend`,
///   `append`, `entry(..).or_insert(..)` and field assignment (`self.cache = ...`),
///   record the receiver (`self.cache`) as the holder of the stored tensors;
/// - every `for`, `while` and `loop` is a loop scope named by its label (`'epoch`) or by
///   its site; each iteration ends on every path out of it (`continue`, `break`, `?`,
///   `return`, panics).
///
/// Values that are not tensors (or containers of tensors) are left alone at the cost of
/// a few type-id comparisons; no probe constrains type inference. Evaluation order, drop
/// order, temporary lifetimes, borrows and control flow are those of the original code.
///
/// ```
/// use candle_core::{Device, Result, Tensor};
///
/// #[tensor_lifetime::track]
/// fn train(steps: usize) -> Result<f32> {
///     let mut total = 0.0;
///     'step: for step in 0..steps {
///         let x = Tensor::full(step as f32, 4, &Device::Cpu)?;
///         total += x.sum_all()?.to_scalar::<f32>()?;
///     }
///     Ok(total)
/// }
/// assert_eq!(train(3).unwrap(), 12.0);
/// ```
///
/// With the facade's `tracking` feature off the attribute expands to the item unchanged.
/// Not instrumented: nested items (annotate them separately), `const fn`s, code inside
/// macro invocations, and in `async` code the loops that `.await`.
#[proc_macro_attribute]
pub fn track(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::track(args.into(), item.into(), TRACKING).into()
}

/// A `#[test]` that fails when the code it runs leaks tensors.
///
/// Use it instead of `#[test]` on a function with no arguments returning `()` or
/// `Result<(), E: Debug>`. The body is tracked as with [`macro@track`] and runs in its own
/// session (tests on parallel threads do not see each other's tensors). The test fails,
/// with the report in the message, if a tracked loop that ran during it (in the test or
/// in the functions it calls) produced a `leak` finding, or if a tensor born in it is
/// still alive after the body returned.
///
/// Options:
///
/// - `allow = ["cache", "src/data.rs", "src/data.rs:41"]`: labels, files (or path
///   suffixes) or `file:line` of sites whose leaks are accepted;
/// - `max_leaked_bytes = "1 MiB"`: leaked bytes tolerated in all (a number is bytes);
/// - `warmup = 2`: iterations at the start of each loop whose growth is not counted;
/// - `window = 4`: growth events needed for a leak.
///
/// ```
/// #[tensor_lifetime::leak_test(max_leaked_bytes = "1 KiB")]
/// fn forward_does_not_leak() -> candle_core::Result<()> {
///     for _ in 0..8 {
///         let x = candle_core::Tensor::ones(16, candle_core::DType::F32, &candle_core::Device::Cpu)?;
///         let _y = (x * 2.0)?;
///     }
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// The function form is `tensor_lifetime::assert_no_leaks(|| ...)`.
#[proc_macro_attribute]
pub fn leak_test(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::leak_test(args.into(), item.into(), TRACKING).into()
}
