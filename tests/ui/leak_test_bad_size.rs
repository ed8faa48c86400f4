// `max_leaked_bytes` is parsed at compile time: an unknown unit points at the string.
#[tensor_lifetime::leak_test(max_leaked_bytes = "1 MIBS")]
fn does_not_leak() {}

fn main() {}
