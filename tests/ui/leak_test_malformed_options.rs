// Several malformed options: every one is reported in one compile.
#[tensor_lifetime::leak_test(allow = "cache" , warmup = "two", window = 3, window = 4, allow)]
fn first() {}

#[tensor_lifetime::leak_test(allow = [1, "src/data.rs"], max_leaked_bytes = true)]
fn second() {}

#[tensor_lifetime::leak_test(warmup)]
fn third() {}

#[tensor_lifetime::leak_test(allow = )]
fn fourth() {}

fn main() {}
