//! The live box's fuzz corpus, replayed on stable in every `cargo test`: each file of
//! `fuzz/corpus-min/<target>` (the minimised corpus the coverage-guided runs of
//! `crates/asymlink-live/fuzz` found) goes through the target's own checks
//! ([`asymlink_live::harness`]), so whatever the fuzzer once reached stays checked.

use std::path::PathBuf;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus-min")
        .join(target);
    let mut n = 0;
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
    for entry in entries {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let r = std::panic::catch_unwind(|| check(&data));
        assert!(r.is_ok(), "{target}: {path:?} breaks an invariant");
        n += 1;
    }
    assert!(n >= 50, "{target}: only {n} inputs in the corpus");
}

#[test]
fn frame_corpus() {
    replay("frame", asymlink_live::harness::check_frame);
}

#[test]
fn pipeline_corpus() {
    replay("pipeline", |d| {
        asymlink_live::harness::run_records(d);
    });
}
