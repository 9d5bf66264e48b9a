//! # asymlink-live: the Linux userspace middlebox
//!
//! Runs the core's middlebox pipeline — rewriters, classifier, queue discipline, exactly
//! the code the simulator runs — on real packets between two interfaces, and optionally
//! emulates a slow link behind it (rate, delay, loss, ATM framing, modem buffer) so one
//! box can stand in for an access line where `netem` does not exist.
//!
//! ## Layers
//!
//! * [`config`] — the box's TOML file: the simulator's middlebox vocabulary (`rewrite`,
//!   `to_a`, `to_b`) plus `[interfaces]`, `[emulation.*]`, `[capture]`, `[stats]`,
//!   `[privileges]`; validated completely before any device is touched.
//! * [`packet`] — [`packet::LivePacket`], a frame parsed once on arrival, implementing the
//!   core's `Pkt` (in-place edits with incremental checksums); the buffer pool.
//! * the emulated link after each discipline is the core's
//!   [`asymlink_core::link::Link`], the simulator's link.
//! * [`engine`] — the datapath as a sans-IO state machine: frames in, frames out,
//!   `poll_at`, conservation counters, reload keeping queued packets.
//! * [`harness`] — the invariant checks the robustness tests, the fuzz-corpus replay and
//!   the `pipeline` fuzz target share.
//! * [`runtime`] — the event loop over an [`runtime::Io`] and a [`clock::Clock`]: real
//!   devices and the monotonic clock in production, scripted frames and a fake clock in
//!   tests.
//! * [`workers`] — several forwarding threads: one complete event loop each, frames spread
//!   by the kernel's fanout on the subscriber's address, stats merged.
//! * [`sender`] — sending from a second thread per interface (`[process] tx_thread`):
//!   a lock-free single-producer single-consumer queue each way.
//! * [`sys`] — AF_PACKET, TUN, `ppoll`, `signalfd`, privilege dropping; with [`xdp`] and
//!   the queue of [`sender`], the crate's only `unsafe` code.
//! * [`stats`], [`server`], [`capture`] — counters, the JSON and Prometheus endpoints,
//!   pcap files; [`breakdown`] — where the added latency goes (a stats switch).
//!
//! [`cli`] wires these together (the `asymlink-box` binary and `python -m asymlink.live`); `docs/live.md` is the user guide and
//! `docs/deployment.md` the operator's.

pub mod breakdown;
pub mod capture;
pub mod cli;
pub mod clock;
pub mod config;
pub mod engine;
pub mod harness;
pub mod packet;
pub mod runtime;
pub mod sender;
pub mod server;
pub mod stats;
pub mod sys;
pub mod workers;
pub mod xdp;

pub use config::BoxConfig;
pub use engine::Engine;
pub use packet::LivePacket;
