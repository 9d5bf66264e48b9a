//! The live box's fuzz corpus, replayed on stable in every `cargo test`: each file of
//! `fuzz/corpus-min/<target>` (the minimised corpus the coverage-guided runs of
//! `crates/asymlink-live/fuzz` found) goes through the target's own checks
//! ([`asymlink_live::harness`]), so whatever the fuzzer once reached stays checked.

#[path = "../../asymlink-core/tests/support/corpus.rs"]
mod corpus;

use std::path::PathBuf;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus-min")
        .join(target);
    corpus::replay(target, &[dir.as_path()], check);
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
