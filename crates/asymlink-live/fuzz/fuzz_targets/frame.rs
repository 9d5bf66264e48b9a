//! A frame as the box receives it (Ethernet, or raw IP when the first input byte is odd):
//! `asymlink_live::harness::check_frame` states and checks what must hold. The corpus in
//! `corpus-min/frame` is replayed on stable by `tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    asymlink_live::harness::check_frame(data);
});
