// `#[track]` takes no arguments.
#[tensor_lifetime::track(verbose = true)]
fn train() {}

fn main() {
    train();
}
