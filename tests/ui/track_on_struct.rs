// `#[track]` instruments code: on a struct there is nothing to instrument.
#[tensor_lifetime::track]
pub struct Model {
    pub hidden: usize,
}

fn main() {
    let _ = Model { hidden: 4 };
}
