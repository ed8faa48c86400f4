//! `#[track]` preserves semantics: each function below is compiled twice, as written
//! (`plain`) and with `#[tensor_lifetime::track]` (`tracked`), and the tests check that
//! both behave identically (results, drop order, control flow) and as Rust says they
//! should. A few tests then check what the probes recorded (sites, loops), each in its own
//! leak session so that parallel tests do not see each other's tensors.

use candle_core::{DType, Device, Result, Tensor};
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Logs its name when dropped.
#[derive(Debug)]
pub struct Noisy(&'static str);

impl Drop for Noisy {
    fn drop(&mut self) {
        LOG.with(|l| l.borrow_mut().push(format!("drop {}", self.0)));
    }
}

pub fn log(event: &str) {
    LOG.with(|l| l.borrow_mut().push(event.to_string()));
}

/// Runs `f` and returns what it logged.
fn logged(f: impl FnOnce()) -> Vec<String> {
    LOG.with(|l| l.borrow_mut().clear());
    f();
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

pub fn make(name: &'static str) -> Noisy {
    log(&format!("make {name}"));
    Noisy(name)
}

pub fn ones(n: usize) -> Result<Tensor> {
    Tensor::ones(n, DType::F32, &Device::Cpu)
}

tensor_lifetime_test_support::twice! {
    /// Bindings drop in reverse order, loop items at the end of their iteration, and
    /// `let x = &make()` extends the temporary to the end of the block.
    pub fn drop_order() {
        let a = make("a");
        let b = &make("b");
        log(&format!("use {}", b.0));
        for name in ["i0", "i1"] {
            let item = make(name);
            let _tmp = make("t");
            if item.0 == "i1" {
                continue;
            }
            log("body end");
        }
        let (c, _) = (make("c"), make("wild"));
        drop(a);
        log(&format!("end {}", c.0));
    }

    /// A temporary in a pushed argument lives until the end of the statement, after the
    /// push.
    pub fn temporaries_in_stores() -> Vec<&'static str> {
        let mut names = Vec::new();
        names.push(make("tmp").0);
        log("after push");
        let mut map = HashMap::new();
        map.insert(1, make("value").0);
        map.entry(2).or_insert(make("entry").0);
        names.extend(map.values().copied());
        names
    }

    /// Labeled `break` and `continue` across nested loops.
    pub fn labeled(n: usize) -> Vec<(usize, usize)> {
        let mut seen = Vec::new();
        'outer: for i in 0..n {
            let mut j = 0;
            'inner: while j < n {
                j += 1;
                if j == 2 {
                    continue 'inner;
                }
                if i == 1 {
                    continue 'outer;
                }
                if i + j > 4 {
                    break 'outer;
                }
                seen.push((i, j));
            }
        }
        seen
    }

    /// `loop` and labeled `break` keep their values.
    #[allow(clippy::never_loop)]
    pub fn loop_values() -> (u32, u32, &'static str) {
        let mut k = 0;
        let first = loop {
            k += 1;
            if k == 3 {
                break k * 10;
            }
        };
        let second = 'search: loop {
            for x in 0..10u32 {
                if x * x > 20 {
                    break 'search x;
                }
            }
            break 0;
        };
        let mut stack = vec!["c", "b", "a"];
        let mut last = "";
        while let Some(top) = stack.pop() {
            last = top;
        }
        (first, second, last)
    }

    /// Loops in unusual positions: method receiver at the start of a statement, with
    /// attributes, as a `match` scrutinee, as a closure body.
    #[allow(clippy::never_loop)]
    pub fn loop_positions() -> u32 {
        let mut n = 0;
        loop { break 3u32 }.checked_add(1).into_iter().for_each(|v| n += v);
        #[allow(unused_variables)]
        for i in 0..2 {
            n += 1;
        }
        let mut count = |k: u32| while n < k { n += 1 };
        count(10);
        match loop { break n } {
            0 => 0,
            m => m * 2,
        }
    }

    /// `?` leaves loops early, through every iteration guard.
    pub fn question_mark(fail_at: usize) -> Result<usize> {
        let mut sum = 0;
        for i in 0..5 {
            for j in 0..5 {
                if i * 5 + j == fail_at {
                    let bad = Tensor::ones((2, 3), DType::F32, &Device::Cpu)?;
                    bad.matmul(&bad)?;
                }
                sum += j;
            }
        }
        Ok(sum)
    }

    /// `return` from inside loops.
    pub fn early_return(xs: &[i32]) -> Option<usize> {
        for (i, &x) in xs.iter().enumerate() {
            let mut n = 0;
            while n < 3 {
                if x == n {
                    return Some(i);
                }
                n += 1;
            }
        }
        None
    }

    /// Bindings whose types are only known later must compile as without the attribute.
    #[allow(clippy::vec_init_then_push)]
    pub fn inferred_types() -> (Vec<u32>, u64, u8, u16, Vec<String>) {
        let mut v = Vec::new();
        v.push(1);
        let ids = (0..3).map(|i| i * 2).collect();
        let ids: Vec<u32> = ids;
        let x = Default::default();
        let y: u64 = x;
        let n = "5".parse().unwrap();
        let m: u8 = n;
        let f = |a| a + 1;
        let words = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let _: &Vec<String> = &words;
        let mut acc = Vec::new();
        acc.push(Default::default());
        let _: &Vec<String> = &acc;
        (v.into_iter().chain(ids).collect(), y, m + 1, f(2u16), words)
    }

    /// `let ... else`, destructuring assignment, compound assignment, field stores.
    pub fn places(input: Option<(u32, u32)>) -> (u32, u32, Vec<u32>) {
        let Some((mut a, mut b)) = input else {
            return (0, 0, Vec::new());
        };
        (a, b) = (b, a);
        a += 10;
        let mut state = State { best: None, history: Vec::new() };
        state.best = Some(a);
        state.history.push(b);
        state.history[0] *= 2;
        (a, b, state.history)
    }

    /// Stores whose value is coerced by the container's type: trait objects, slices.
    #[allow(clippy::vec_init_then_push)]
    pub fn coercions() -> (u32, usize) {
        let mut handlers: Vec<Box<dyn Fn(u32) -> u32>> = Vec::new();
        handlers.push(Box::new(|x| x * 2));
        let mut slots = Slots { current: Box::new(|x| x + 1), rows: Vec::new() };
        slots.current = Box::new(|x| x + 10);
        let row = [1.0f32, 2.0];
        slots.rows.push(&row);
        let mut lookup: HashMap<&str, &[f32]> = HashMap::new();
        lookup.insert("row", &row);
        ((slots.current)(handlers[0](1)), slots.rows[0].len() + lookup["row"].len())
    }

    /// Closures, including `move` ones and loops inside closures.
    pub fn closures() -> (u32, Vec<u32>) {
        let base = 2;
        let square = |x: u32| {
            let y = x * x;
            y + base
        };
        let mut out = Vec::new();
        let mut push = |x| out.push(x);
        for i in 0..3 {
            push(square(i));
        }
        let total = (0..4u32)
            .map(move |i| {
                let mut t = 0;
                for k in 0..i {
                    t += k;
                }
                t
            })
            .sum();
        (total, out)
    }

    /// Tensors through tracked code: results are unchanged.
    pub fn tensors(steps: usize) -> Result<(f32, usize)> {
        let mut cache: Vec<Tensor> = Vec::new();
        let mut total = ones(4)?;
        for step in 0..steps {
            let x = (ones(4)? * step as f64)?;
            total = (total + &x)?;
            if step % 2 == 0 {
                cache.push(x);
            }
        }
        Ok((total.sum_all()?.to_scalar::<f32>()?, cache.len()))
    }

    /// A generic function.
    pub fn generic_sum<T: std::ops::Add<Output = T> + Copy + Default>(xs: &[T]) -> T {
        let mut acc = T::default();
        for &x in xs {
            acc = acc + x;
        }
        acc
    }

    /// Returning `impl Trait`.
    pub fn evens(n: u32) -> impl Iterator<Item = u32> {
        let limit = n * 2;
        (0..limit).filter(|x| x % 2 == 0)
    }

    /// An async fn with a loop that awaits and one that does not; its future stays `Send`.
    pub async fn async_sum(n: u32) -> u32 {
        let mut total = 0;
        for i in 0..n {
            total += ready(i).await;
        }
        for i in 0..n {
            let doubled = i * 2;
            total += doubled;
        }
        let extra = async {
            let mut s = 0;
            loop {
                s += ready(1).await;
                if s >= 2 {
                    break s;
                }
            }
        }
        .await;
        total + extra
    }

    /// A loop whose body panics: the iteration guard drops during unwinding.
    pub fn panics_in_loop() {
        for i in 0..3 {
            let _t = ones(2).unwrap();
            if i == 1 {
                panic!("boom at {i}");
            }
        }
    }
}

#[allow(missing_debug_implementations)] // holds closures
pub struct Slots<'a> {
    pub current: Box<dyn Fn(u32) -> u32>,
    pub rows: Vec<&'a [f32]>,
}

#[derive(Debug, Default)]
pub struct State {
    pub best: Option<u32>,
    pub history: Vec<u32>,
}

pub async fn ready(x: u32) -> u32 {
    x
}

/// A dataset type whose impl block is tracked as a whole.
#[derive(Debug, Default)]
pub struct Dataset {
    cache: Vec<Tensor>,
    seen: usize,
}

#[tensor_lifetime::track]
impl Dataset {
    pub fn batch(&mut self, step: usize) -> Result<Tensor> {
        let batch = Tensor::full(step as f32, (2, 2), &Device::Cpu)?;
        self.cache.push(batch.clone());
        self.seen += 1;
        Ok(batch)
    }

    pub fn total(&self) -> Result<f32> {
        let mut sum = 0.0;
        for t in &self.cache {
            sum += t.sum_all()?.to_scalar::<f32>()?;
        }
        Ok(sum)
    }
}

pub trait Scale {
    fn scale(&self, by: f64) -> Result<Tensor>;
}

#[tensor_lifetime::track]
impl Scale for Tensor {
    fn scale(&self, by: f64) -> Result<Tensor> {
        let scaled = (self * by)?;
        Ok(scaled)
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("these futures never wait"),
    }
}

#[test]
fn drop_order_is_unchanged() {
    let plain = logged(plain::drop_order);
    let tracked = logged(tracked::drop_order);
    assert_eq!(tracked, plain);
    // What Rust says, to be sure the comparison compares something.
    assert_eq!(
        plain,
        [
            "make a",
            "make b",
            "use b",
            "make i0",
            "make t",
            "body end",
            "drop t",
            "drop i0",
            "make i1",
            "make t",
            "drop t",
            "drop i1",
            "make c",
            "make wild",
            "drop wild",
            "drop a",
            "end c",
            "drop c",
            "drop b"
        ]
    );
}

#[test]
fn temporaries_in_stores_are_unchanged() {
    let mut plain_names = Vec::new();
    let plain = logged(|| plain_names = plain::temporaries_in_stores());
    let mut tracked_names = Vec::new();
    let tracked = logged(|| tracked_names = tracked::temporaries_in_stores());
    assert_eq!(tracked, plain);
    assert_eq!(tracked_names.len(), 3);
    plain_names.sort();
    tracked_names.sort();
    assert_eq!(tracked_names, plain_names);
    assert_eq!(&plain[..3], ["make tmp", "drop tmp", "after push"]);
}

#[test]
fn labeled_control_flow_is_unchanged() {
    for n in 0..6 {
        assert_eq!(tracked::labeled(n), plain::labeled(n), "n = {n}");
    }
    assert_eq!(plain::labeled(4), vec![(0, 1), (0, 3), (0, 4), (2, 1)]);
}

#[test]
fn loop_values_are_kept() {
    assert_eq!(tracked::loop_values(), plain::loop_values());
    assert_eq!(tracked::loop_values(), (30, 5, "c"));
}

#[test]
fn loops_in_unusual_positions() {
    assert_eq!(tracked::loop_positions(), plain::loop_positions());
    assert_eq!(tracked::loop_positions(), 20);
}

#[test]
fn question_mark_leaves_loops() {
    for fail_at in [0, 7, 24, 99] {
        // The message without the backtrace (it names the module).
        let first_line = |e: candle_core::Error| e.to_string().lines().next().map(str::to_owned);
        let p = plain::question_mark(fail_at).map_err(first_line);
        let t = tracked::question_mark(fail_at).map_err(first_line);
        assert_eq!(t, p, "fail_at = {fail_at}");
    }
    assert!(tracked::question_mark(7).is_err());
    assert_eq!(tracked::question_mark(99).unwrap(), 50);
}

#[test]
fn early_return_is_unchanged() {
    for xs in [&[5, 7, 1][..], &[9, 9], &[], &[2]] {
        assert_eq!(tracked::early_return(xs), plain::early_return(xs));
    }
    assert_eq!(tracked::early_return(&[5, 7, 1]), Some(2));
}

#[test]
fn inferred_types_compile_and_agree() {
    assert_eq!(tracked::inferred_types(), plain::inferred_types());
    assert_eq!(tracked::inferred_types().0, vec![1, 0, 2, 4]);
}

#[test]
fn places_are_unchanged() {
    for input in [None, Some((1, 2)), Some((5, 3))] {
        assert_eq!(tracked::places(input), plain::places(input));
    }
    assert_eq!(tracked::places(Some((1, 2))), (12, 1, vec![2]));
}

#[test]
fn coercions_into_containers_still_apply() {
    assert_eq!(tracked::coercions(), plain::coercions());
    assert_eq!(tracked::coercions(), (12, 4));
}

#[test]
fn closures_are_unchanged() {
    assert_eq!(tracked::closures(), plain::closures());
    assert_eq!(tracked::closures(), (4, vec![2, 3, 6]));
}

#[test]
fn tensor_results_are_unchanged() {
    let p = plain::tensors(5).unwrap();
    let t = tracked::tensors(5).unwrap();
    assert_eq!(t, p);
    assert_eq!(t, (44.0, 3));
}

#[test]
fn generic_and_impl_trait_functions() {
    assert_eq!(
        tracked::generic_sum(&[1.5, 2.5]),
        plain::generic_sum(&[1.5, 2.5])
    );
    assert_eq!(tracked::generic_sum(&[1u8, 2, 3]), 6);
    let evens: Vec<u32> = tracked::evens(4).collect();
    assert_eq!(evens, plain::evens(4).collect::<Vec<_>>());
    assert_eq!(evens, vec![0, 2, 4, 6]);
}

#[test]
fn async_fn_compiles_and_stays_send() {
    fn assert_send<T: Send>(t: T) -> T {
        t
    }
    let t = block_on(assert_send(tracked::async_sum(4)));
    assert_eq!(t, block_on(plain::async_sum(4)));
    assert_eq!(t, 6 + 12 + 2);
}

/// A label that only names the loop scope is not reported as unused (this file is
/// linted with `-D warnings`).
#[tensor_lifetime::track]
fn named_loops(n: u32) -> u32 {
    let mut sum = 0;
    'epoch: for i in 0..n {
        'batch: while sum < 100 {
            sum += i;
            break;
        }
    }
    'wait: loop {
        break sum;
    }
}

#[test]
fn labels_name_loops_without_unused_warnings() {
    assert_eq!(named_loops(5), 10);
}

#[test]
fn panics_propagate_through_tracked_loops() {
    let p = std::panic::catch_unwind(plain::panics_in_loop).unwrap_err();
    let t = std::panic::catch_unwind(tracked::panics_in_loop).unwrap_err();
    assert_eq!(t.downcast_ref::<String>(), p.downcast_ref::<String>());
    assert_eq!(t.downcast_ref::<String>().unwrap(), "boom at 1");
    // The unwound loop closed its scope: a later tracked loop on this thread works.
    assert_eq!(tracked::tensors(3).unwrap(), plain::tensors(3).unwrap());
}

#[test]
fn impl_blocks_are_tracked_methods() {
    let mut data = Dataset::default();
    for step in 0..3 {
        data.batch(step).unwrap();
    }
    assert_eq!(data.seen, 3);
    assert_eq!(data.total().unwrap(), 12.0);
    let t = ones(2).unwrap().scale(3.0).unwrap();
    assert_eq!(t.to_vec1::<f32>().unwrap(), vec![3.0, 3.0]);
}

// What the probes record. Each test runs in its own session (`check_leaks`), so the
// tensors it sees are its own.

fn options() -> tensor_lifetime::LeakTestOptions {
    tensor_lifetime::LeakTestOptions::default()
}

const SOURCE: &str = include_str!("track_semantics.rs");

#[test]
fn binding_sites_name_the_variable_and_its_line() {
    #[tensor_lifetime::track]
    fn make_weights() -> Result<Tensor> {
        let weights = Tensor::zeros((8, 8), DType::F32, &Device::Cpu)?; // weights-site
        Ok(weights)
    }
    let (weights, outcome) = tensor_lifetime::check_leaks(options(), make_weights).unwrap();
    let weights = weights.unwrap();
    assert_eq!(outcome.alive.len(), 1, "{}", outcome.message("t"));
    let site = outcome.alive[0].site;
    assert_eq!(site.label, "weights");
    assert_eq!(site.kind, tensor_lifetime::SiteKind::Binding);
    assert_eq!(site.file, "tests/tests/instrumentation/track_semantics.rs");
    assert_eq!(
        site.line,
        tensor_lifetime_tests::line_of(SOURCE, "// weights-site")
    );
    assert_eq!(site.column, 13, "the column of `weights` in `let weights`");
    assert_eq!(site.function, "make_weights");
    drop(weights);
}

#[test]
fn store_sites_name_the_receiver() {
    let (data, outcome) = tensor_lifetime::check_leaks(options(), || {
        let mut data = Dataset::default();
        data.batch(1).unwrap();
        data
    })
    .unwrap();
    assert_eq!(outcome.alive.len(), 1, "{}", outcome.message("t"));
    let alive = &outcome.alive[0];
    assert_eq!(alive.site.label, "batch");
    assert_eq!(alive.site.function, "Dataset::batch");
    let store = alive.store.expect("the push is a store");
    assert_eq!(store.label, "self.cache");
    assert_eq!(store.kind, tensor_lifetime::SiteKind::Store);
    assert_eq!(
        store.line,
        tensor_lifetime_tests::line_of(SOURCE, "self.cache.push(batch.clone());")
    );
    drop(data);
}

#[test]
fn assignment_sites_name_the_place() {
    #[tensor_lifetime::track]
    fn accumulate() -> Result<Tensor> {
        let mut total = ones(3)?;
        for _ in 0..2 {
            total = (total + ones(3)?)?; // total-assign
        }
        Ok(total)
    }
    let (total, outcome) = tensor_lifetime::check_leaks(options(), accumulate).unwrap();
    assert_eq!(total.unwrap().to_vec1::<f32>().unwrap(), vec![3.0; 3]);
    assert_eq!(outcome.alive.len(), 1, "{}", outcome.message("t"));
    let site = outcome.alive[0].site;
    assert_eq!(site.label, "total");
    assert_eq!(site.kind, tensor_lifetime::SiteKind::Assignment);
    assert_eq!(
        site.line,
        tensor_lifetime_tests::line_of(SOURCE, "// total-assign")
    );
}

#[test]
fn loops_are_scopes_named_by_label() {
    #[tensor_lifetime::track]
    fn leaky() -> Result<Vec<Tensor>> {
        let mut kept = Vec::new();
        'epoch: for step in 0..8 {
            if step > 100 {
                break 'epoch;
            }
            let x = (ones(16)? * step as f64)?; // leaky-x
            kept.push(x);
        }
        Ok(kept)
    }
    let (kept, outcome) = tensor_lifetime::check_leaks(options(), leaky).unwrap();
    assert_eq!(kept.unwrap().len(), 8);
    assert!(outcome.failed());
    let leak = outcome
        .report
        .findings
        .iter()
        .find(|f| f.is_leak())
        .unwrap_or_else(|| panic!("no leak: {}", outcome.report));
    assert_eq!(leak.loop_name, "'epoch");
    assert_eq!(leak.site.label, "x");
    assert_eq!(
        leak.site.line,
        tensor_lifetime_tests::line_of(SOURCE, "// leaky-x")
    );
    assert_eq!(
        leak.site.file,
        "tests/tests/instrumentation/track_semantics.rs"
    );
    assert!(
        leak.holders
            .iter()
            .any(|h| h.label.as_deref() == Some("kept")),
        "{:?}",
        leak.holders
    );
}

#[test]
fn loop_items_drop_before_the_iteration_ends() {
    #[tensor_lifetime::track]
    fn consume(batches: Vec<Tensor>) -> Result<f32> {
        let mut total = 0.0;
        for batch in batches {
            let doubled = (batch * 2.0)?;
            total += doubled.sum_all()?.to_scalar::<f32>()?;
        }
        Ok(total)
    }
    let (total, outcome) = tensor_lifetime::check_leaks(options(), || {
        let batches: Vec<Tensor> = (0..6).map(|_| ones(4).unwrap()).collect();
        consume(batches)
    })
    .unwrap();
    assert_eq!(total.unwrap(), 48.0);
    assert!(!outcome.failed(), "{}", outcome.message("t"));
    assert!(outcome.report.findings.is_empty(), "{}", outcome.report);
}
