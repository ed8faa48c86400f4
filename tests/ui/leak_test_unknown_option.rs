// A misspelled option is named, with the list of known ones.
#[tensor_lifetime::leak_test(alow = ["cache"])]
fn does_not_leak() {}

fn main() {}
