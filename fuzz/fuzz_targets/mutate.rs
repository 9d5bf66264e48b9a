//! In-place edits on arbitrary bytes: `asymlink_core::wire::oracle::check_mutate` states
//! the input format and checks what must hold. The corpus in `corpus-min/mutate` is
//! replayed on stable by `crates/asymlink-core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    asymlink_core::wire::oracle::check_mutate(data);
});
