// Leak tests are plain functions: not on a struct, not async, not generic, and they
// replace `#[test]` rather than add to it.
#[tensor_lifetime::leak_test]
struct Fixture;

#[tensor_lifetime::leak_test]
async fn awaits() {}

#[tensor_lifetime::leak_test]
fn generic<T: Default>() {
    let _ = T::default();
}

#[tensor_lifetime::leak_test]
#[test]
fn twice() {}

fn main() {}
