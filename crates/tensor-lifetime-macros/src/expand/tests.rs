use super::syntax::{compact, holder};
use super::*;
use syn::Expr;

fn expand(item: TokenStream) -> String {
    track(TokenStream::new(), item, true).to_string()
}

#[test]
fn off_switch_returns_the_item_unchanged() {
    let item = quote!(
        fn f(v: &mut Vec<u32>) {
            let x = 1;
            for i in 0..3 {
                v.push(i + x);
            }
        }
    );
    assert_eq!(
        track(TokenStream::new(), item.clone(), false).to_string(),
        item.to_string()
    );
    let test = leak_test(
        TokenStream::new(),
        quote!(
            fn t() {}
        ),
        false,
    )
    .to_string();
    assert_eq!(
        test,
        quote!(
            #[::core::prelude::v1::test]
            fn t() {}
        )
        .to_string()
    );
}

#[test]
fn tags_each_binding_of_a_pattern() {
    let out = expand(quote!(
        fn f() {
            let (a, Foo { b, .. }, _, None) = make();
        }
    ));
    assert!(out.contains("tag (& a"), "{out}");
    assert!(out.contains("tag (& b"), "{out}");
    assert!(!out.contains("tag (& None"), "{out}");
    assert!(!out.contains("tag (& _"), "{out}");
}

#[test]
fn store_labels_name_the_receiver() {
    let out = expand(quote!(
        fn f(&mut self, t: Tensor) {
            self.cache.lock().unwrap().push(t);
            self.best = Some(t);
        }
    ));
    assert!(out.contains("\"self.cache\""), "{out}");
    assert!(out.contains("\"self.best\""), "{out}");
    assert!(out.contains("stored"), "{out}");
}

#[test]
fn loops_get_a_scope_and_keep_their_label() {
    let out = expand(quote!(
        fn f() {
            'epoch: for e in 0..3 {
                continue 'epoch;
            }
        }
    ));
    assert!(out.contains("enter_loop"), "{out}");
    assert!(out.contains("'epoch : for __tl_item"), "{out}");
    assert!(out.contains("\"'epoch\""), "{out}");
}

#[test]
fn const_fn_and_nested_items_are_left_alone() {
    let item = quote!(
        const fn f() -> u32 {
            let x = 1;
            x
        }
    );
    assert_eq!(expand(item.clone()), item.to_string());
    let out = expand(quote!(
        fn g() {
            fn inner() {
                let y = 2;
            }
        }
    ));
    assert!(!out.contains("tag"), "{out}");
}

#[test]
fn awaiting_loops_get_a_send_scope_in_a_task() {
    let out = expand(quote!(
        async fn f() {
            for i in 0..3 {
                step(i).await;
            }
            for j in 0..3 {
                let k = j;
            }
        }
    ));
    assert_eq!(out.matches("enter_async_loop").count(), 1, "{out}");
    assert_eq!(out.matches("enter_loop").count(), 1, "{out}");
    assert_eq!(out.matches("in_task").count(), 1, "{out}");
    // A loop without an await needs no task; an async block's loop wraps that block.
    let out = expand(quote!(
        async fn g() {
            for j in 0..3 {
                let k = j;
            }
            let served = async move {
                loop {
                    next().await;
                }
            };
        }
    ));
    assert_eq!(out.matches("in_task").count(), 1, "{out}");
    assert!(
        out.contains("let served = async move { :: tensor_lifetime :: __private :: in_task"),
        "{out}"
    );
}

#[test]
fn wrong_items_are_named() {
    let out = expand(quote!(
        fn forward(&self) -> Tensor;
    ));
    assert!(out.contains("not to a function without a body"), "{out}");
    let out = expand(quote!(
        enum Phase {
            Train,
        }
    ));
    assert!(out.contains("not to an enum"), "{out}");
}

#[test]
fn assignments_and_container_calls() {
    let out = expand(quote!(
        fn f(&mut self) {
            total = (total + loss)?;
            n += 1;
            v[next()] += 1;
            (a, b) = (b, a);
            self.cache.extend(items);
            make().extend(items);
            map.entry(k).or_insert(t);
            while let Some(batch) = rx.recv() {}
        }
    ));
    assert!(
        out.contains(
            "tagged (:: tensor_lifetime :: __private :: Checked :: checked (total + loss) ?"
        ),
        "{out}"
    );
    assert!(out.contains("tag (& n"), "{out}");
    // `v[next()]` cannot be named twice: left alone.
    assert!(out.contains("v [next ()] += 1 ;"), "{out}");
    assert!(
        out.contains("tag (& a") && out.contains("tag (& b"),
        "{out}"
    );
    assert!(out.contains("store (& self . cache"), "{out}");
    assert!(!out.contains("store (& make ()"), "{out}");
    assert!(
        out.contains("or_insert (:: tensor_lifetime :: __private :: stored (t"),
        "{out}"
    );
    assert!(out.contains("\"map\""), "{out}");
    assert!(out.contains("tag (& batch"), "{out}");
}

#[test]
fn origins_guard_and_checks() {
    let out = expand(quote!(
        fn train(data: &Data) -> Result<()> {
            for batch in data.batches() {}
            let (x, y) = data.next_batch(3)?;
            run(x)
        }
    ));
    // The call-path guard first, the tail and every `?` checked.
    assert!(
        out.contains("{ let __tl_call = :: tensor_lifetime :: __private :: enter"),
        "{out}"
    );
    assert!(out.contains("FnSite :: new (\"train\""), "{out}");
    assert!(
        out.contains("Checked :: checked (data . next_batch (3)) ?"),
        "{out}"
    );
    assert!(out.contains("Checked :: checked (run (x)) }"), "{out}");
    // A loop's item and a batch call's bindings are inputs.
    assert_eq!(
        out.matches("with_role (:: tensor_lifetime :: __private :: Role :: Input)")
            .count(),
        3,
        "{out}"
    );

    let out = expand(quote!(
        impl Optimizer for Adam {
            fn new(vars: Vec<Var>, lr: f64) -> Result<Self> {
                let m = zeros_like(&vars)?;
                Ok(Adam { vars, m: m.clone(), first: vars.clone(), lr })
            }
            fn step(&mut self, grads: &GradStore) -> Result<()> {
                self.m[0] = update(grads)?;
                Ok(())
            }
        }
    ));
    let role = "with_role (:: tensor_lifetime :: __private :: Role :: OptimizerState)";
    // `m` (made), `self.m` (stored); not `vars`, `m.clone()` of a ... nor the argument's clone.
    assert!(
        out.contains(&format!(
            "\"m\" , :: tensor_lifetime :: __private :: SiteKind :: Binding ,) . {role}"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "\"self.m\" , :: tensor_lifetime :: __private :: SiteKind :: Store ,) . {role}"
        )),
        "{out}"
    );
    assert!(
        !out.contains(&format!(
            "\"Adam.first\" , :: tensor_lifetime :: __private :: SiteKind :: Binding ,) . {role}"
        )),
        "{out}"
    );
    assert!(out.contains("FnSite :: new (\"Adam::step\""), "{out}");
}

#[test]
fn compact_text() {
    let e: Expr = syn::parse_quote!(self.cache[i].lock().unwrap());
    assert_eq!(compact(&e), "self.cache[i].lock().unwrap()");
    assert_eq!(compact(&holder(&e)), "self.cache[i]");
    let e: Expr = syn::parse_quote!(*out);
    assert_eq!(compact(&e), "*out");
}

#[test]
fn a_value_names_the_locals_it_is_computed_from() {
    let out = expand(quote!(
        fn step(&self, batch: &Batch, scale: f32) {
            let x = batch.images.to_dtype(F32)?;
            let logits = self.model.forward(&x)?.relu()? * scale;
            let mapped = xs.iter().map(|t| t.sqr()).count();
            let loss = loss_fn(&logits, &batch.labels, WEIGHT, helper)?;
        }
    ));
    // The arguments and earlier bindings are named, before the `let`.
    assert!(
        out.contains(
            "let __tl_inputs = [:: tensor_lifetime :: __private :: input (& batch . images)] ;"
        ),
        "{out}"
    );
    assert!(
        out.contains("[:: tensor_lifetime :: __private :: input (& x) , :: tensor_lifetime :: __private :: input (& scale)]"),
        "{out}"
    );
    assert!(out.contains("tag_made (& logits"), "{out}");
    // Not `self`'s fields, nor constants, functions, unbound names or a closure's
    // parameters.
    assert!(
        out.contains("[:: tensor_lifetime :: __private :: input (& logits) , :: tensor_lifetime :: __private :: input (& batch . labels)]"),
        "{out}"
    );
    assert!(!out.contains("input (& self"), "{out}");
    assert!(!out.contains("input (& xs"), "{out}");
    assert!(!out.contains("input (& t)"), "{out}");
    assert!(out.contains("tag (& mapped"), "{out}");
}

#[test]
fn an_assigned_value_reads_its_inputs_before_it_is_computed() {
    let out = expand(quote!(
        fn forward(&self, x: Tensor) {
            let mut h = x;
            for layer in &self.layers {
                h = layer.forward(&h)?;
            }
            h = CONSTANT;
        }
    ));
    assert!(
        out.contains("tagged_made ([:: tensor_lifetime :: __private :: input (& layer) , :: tensor_lifetime :: __private :: input (& h)] ,"),
        "{out}"
    );
    assert!(out.contains("tagged (CONSTANT"), "{out}");
}

/// A size text is parsed by the compiler with the runtime's parser, in a `static` beside
/// the test (compiled in every build, not only in test builds), or a constant beside an
/// item that is not a function: never here.
#[test]
fn a_size_text_becomes_a_static_the_compiler_evaluates() {
    let item = quote!(
        fn t() {}
    );
    let args = quote!(max_leaked_bytes = "1 MiB");
    let check = "match :: tensor_lifetime :: __private :: parse_size_const (\"1 MiB\")";
    let size_static = format!("static __TL_MAX_LEAKED_BYTES_t : u64 = {check}");
    let tracked = leak_test(args.clone(), item.clone(), true).to_string();
    assert!(tracked.contains(&size_static), "{tracked}");
    assert!(tracked.contains("max_leaked_bytes : __TL_MAX_LEAKED_BYTES_t ,"));
    let plain = leak_test(args, item.clone(), false).to_string();
    assert!(plain.contains(&size_static), "{plain}");
    let with_error = leak_test(quote!(max_leaked_bytes = "2 KB", warmup), item, true);
    let with_error = with_error.to_string();
    assert!(with_error.contains("compile_error"), "{with_error}");
    assert!(
        with_error.contains("parse_size_const (\"2 KB\")"),
        "{with_error}"
    );
    let not_a_fn = leak_test(
        quote!(max_leaked_bytes = "2 KB"),
        quote!(
            struct S;
        ),
        true,
    );
    assert!(not_a_fn.to_string().contains("const _ : u64 = match"));
    let number = leak_test(
        quote!(max_leaked_bytes = 1024),
        quote!(
            fn t() {}
        ),
        true,
    );
    assert!(number.to_string().contains("max_leaked_bytes : 1024u64"));
}

/// The construction-loop rule on shapes of model constructors: what the loop fills is
/// named on its site (`.fills(..)`), or nothing is for a loop that builds nothing.
#[test]
fn construction_loops_fill_what_the_function_hands_out() {
    let fills = |item: TokenStream| -> Option<String> {
        let out = expand(item);
        let at = out.find(". fills (")?;
        let rest = &out[at + ". fills (".len()..];
        Some(rest[..rest.find(')')?].trim().trim_matches('"').to_string())
    };
    // A builder, moved into the returned struct literal.
    let builder = quote!(
        fn new(n: usize) -> Result<Self> {
            let mut blocks = seq();
            for i in 0..n {
                blocks = blocks.add(Block::new(i)?);
            }
            Ok(Self { blocks, n })
        }
    );
    assert_eq!(fills(builder).as_deref(), Some("blocks"));
    // A map moved into a local the function returns.
    let map = quote!(
        fn load(n: usize) -> Result<Weights> {
            let mut weights = HashMap::new();
            for i in 0..n {
                weights.insert(i, Tensor::zeros(4, DType::F32, &Device::Cpu)?);
            }
            let model = Weights { weights };
            Ok(model)
        }
    );
    assert_eq!(fills(map).as_deref(), Some("weights"));
    // A field of the returned local.
    let field = quote!(
        fn load(n: usize) -> Result<Weights> {
            let mut model = Weights::default();
            for i in 0..n {
                model
                    .weights
                    .insert(i, Tensor::zeros(4, DType::F32, &Device::Cpu)?);
            }
            Ok(model)
        }
    );
    assert_eq!(fills(field).as_deref(), Some("model.weights"));
    // A running total returned: the value added was made before the call, an
    // accumulation; and a value merely assigned in the loop.
    let total = quote!(
        fn train(data: &[Tensor]) -> Result<(Tensor, f32)> {
            let mut total = Tensor::zeros((), DType::F32, &Device::Cpu)?;
            let mut last = 0.0;
            for x in data {
                let loss = x.sum_all()?;
                total = total.add(&loss)?;
                last = loss.to_scalar::<f32>()?;
            }
            Ok((total, last))
        }
    );
    assert_eq!(fills(total), None);
}

/// A `let` whose value is computed from locals names them on its site: the data flow
/// between sites.
#[test]
fn bindings_name_the_locals_they_are_computed_from() {
    let out = expand(quote!(
        fn f(m: &Model, x: &Tensor) -> Result<Tensor> {
            let h = m.w.forward(x)?;
            let y = h.relu()?;
            Ok(y)
        }
    ));
    assert!(out.contains(". from (& [\"m.w\" , \"x\"])"), "{out}");
    assert!(out.contains(". from (& [\"h\"])"), "{out}");
}
