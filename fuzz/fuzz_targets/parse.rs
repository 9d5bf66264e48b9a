//! Parse arbitrary bytes as an IP packet: `asymlink_core::wire::oracle::check_parse`
//! states and checks what must hold. The corpus in `corpus-min/parse` is replayed on
//! stable by `crates/asymlink-core/tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    asymlink_core::wire::oracle::check_parse(data);
});
