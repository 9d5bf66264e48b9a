//! The packet layer's fuzz corpus, replayed on stable in every `cargo test`: each file of
//! `fuzz/corpus-min/<target>` (the minimised corpus the coverage-guided runs of `fuzz/`
//! found) and of `fuzz/seeds/<target>` goes through the target's own oracle
//! ([`asymlink_core::wire::oracle`]), so whatever the fuzzer once reached stays checked.

use std::path::PathBuf;

fn replay(target: &str, check: fn(&[u8])) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut n = 0;
    for dir in ["corpus-min", "seeds"] {
        let dir = root.join(dir).join(target);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let r = std::panic::catch_unwind(|| check(&data));
            assert!(r.is_ok(), "{target}: {path:?} breaks an invariant");
            n += 1;
        }
    }
    assert!(n >= 50, "{target}: only {n} inputs in the corpus");
}

#[test]
fn parse_corpus() {
    replay("parse", asymlink_core::wire::oracle::check_parse);
}

#[test]
fn mutate_corpus() {
    replay("mutate", asymlink_core::wire::oracle::check_mutate);
}
