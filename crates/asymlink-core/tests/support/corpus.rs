//! Replay a fuzz corpus on stable: every file of each directory goes through the target's
//! check, and a panic names the input. Shared by the core's and the live box's replays.

use std::path::Path;

/// Run `check` on every file of `dirs`; the corpus must hold at least 50 inputs.
pub fn replay(target: &str, dirs: &[&Path], check: impl Fn(&[u8]) + std::panic::RefUnwindSafe) {
    let mut n = 0;
    for dir in dirs {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
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
