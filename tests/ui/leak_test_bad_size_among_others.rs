// A bad size is the compiler's error, reported in the same compile as the other options'
// errors, each pointing at its tokens.
#[tensor_lifetime::leak_test(alow = ["x"], max_leaked_bytes = "1 XB", warmup = "two")]
fn does_not_leak() {}

fn main() {}
