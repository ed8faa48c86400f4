//! A tensor handed from one thread to another keeps the site of the thread that made it,
//! also across the moment a second thread starts probing: until then the first thread's
//! probes carry no global order (see `Tracker::probe`), and the drain must still put them
//! before every later probe. The test runs alone in its process, so that the process
//! starts with a single probing thread.

use candle_core::{DType, Device, Tensor};
use std::sync::mpsc;

fn creation_site(t: &Tensor, live: &[tensor_lifetime::LiveTensor]) -> &'static str {
    // Live tensors are listed with their creation sites; match by storage size (each
    // tensor here has its own size).
    let bytes = (t.elem_count() * 4) as u64;
    live.iter()
        .find(|l| l.storage_bytes == bytes)
        .map(|l| l.site.label)
        .unwrap_or("untracked")
}

#[test]
fn handed_off_tensors_keep_the_site_of_the_thread_that_made_them() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "handed_off_tensors_keep_the_site_of_the_thread_that_made_them",
    ) {
        return;
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    tensor_lifetime::init().expect("tracking is on");
    // This thread probes alone first.
    let made_here = Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap();
    tensor_lifetime::tag!(made_here, "made_here");

    // A second thread: tags what it was given, makes a tensor and hands it back.
    let (tx, rx) = mpsc::channel();
    let given = made_here.clone();
    let worker = std::thread::spawn(move || {
        tensor_lifetime::tag!(given, "seen_by_worker");
        let made_there = Tensor::zeros(5, DType::F32, &Device::Cpu).unwrap();
        tensor_lifetime::tag!(made_there, "made_by_worker");
        tx.send(made_there).unwrap();
        given
    });
    let received = rx.recv().unwrap();
    // Seen here after the worker made it: an alias, not its birth.
    tensor_lifetime::tag!(received, "received_here");
    let given_back = worker.join().unwrap();

    // Nothing was drained until now: the drain orders all four probes.
    let live = tensor_lifetime::snapshot();
    assert_eq!(live.len(), 2, "{live:?}");
    assert_eq!(creation_site(&made_here, &live), "made_here");
    assert_eq!(creation_site(&received, &live), "made_by_worker");
    drop((made_here, given_back, received));
}
