// The test harness calls a leak test with no arguments.
#[tensor_lifetime::leak_test]
fn does_not_leak(steps: usize, device: &str) {
    let _ = (steps, device);
}

fn main() {}
