//! The packet layer's fuzz corpus, replayed on stable in every `cargo test`: each file of
//! `fuzz/corpus-min/<target>` (the minimised corpus the coverage-guided runs of `fuzz/`
//! found) and of `fuzz/seeds/<target>` goes through the target's own oracle
//! ([`asymlink_core::wire::oracle`]), so whatever the fuzzer once reached stays checked.

mod support;

use std::path::PathBuf;

fn replay(target: &str, check: fn(&[u8])) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let dirs = ["corpus-min", "seeds"].map(|d| root.join(d).join(target));
    support::corpus::replay(target, &dirs.each_ref().map(|d| d.as_path()), check);
}

#[test]
fn parse_corpus() {
    replay("parse", asymlink_core::wire::oracle::check_parse);
}

#[test]
fn mutate_corpus() {
    replay("mutate", asymlink_core::wire::oracle::check_mutate);
}
