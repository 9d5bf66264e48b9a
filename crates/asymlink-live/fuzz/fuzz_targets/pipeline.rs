//! The whole per-packet pipeline of the box under the invariant harness
//! ([`asymlink_live::harness`]): a sequence of frames arriving on either side at
//! increasing times goes through parse → rewriters → classifier → disciplines → emulated
//! link → out, in one of three configurations (DSCP rewriter with prio/TBF and link
//! emulation; the per-flow mechanisms under small caps; the receiver-window rewriter with
//! the ACK shaper). Whatever the frames: nothing panics; received = sent + discarded +
//! held per direction; a frame leaves only as it entered except where a rewriter may
//! write (DSCP/ECN, the TCP window, never of a signed segment), and every checksum that
//! verified still verifies.
//!
//! Input: one byte choosing the configuration (`% 3`), then records
//! `[dt (50 µs units)][flags: bit 0 = side][len][len bytes]`. The corpus in
//! `corpus/pipeline` is replayed on stable by `tests/fuzz_corpus.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    asymlink_live::harness::run_records(data);
});
