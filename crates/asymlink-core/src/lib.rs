//! # asymlink-core: the sans-IO core of asymlink
//!
//! Everything here is a deterministic state machine. It contains no networking code, never
//! reads a clock (time is an [`Instant`] passed into every call) and draws no randomness it
//! was not handed (a [`rand::Rng`] or a seed). The same code runs in the discrete-event
//! simulator (`asymlink-sim`) and in the live Linux middlebox (`asymlink-live`).
//!
//! ## Layers
//!
//! * **Configuration** — [`config`]: the one error type ([`config::ConfigError`], a key
//!   path and a message) and the one TOML entry point ([`config::from_toml`]).
//! * **Quantities** — [`time`] (integer nanoseconds), [`units`] (rates in bit/s, sizes,
//!   limits, durations as people write them), [`rand`] (seeded, value-stable PRNG).
//! * **Packets** — [`wire`]: a compact owned form ([`wire::Headers`]) for the simulator,
//!   parsing from bytes for the live box, byte-exact emission, in-place edits with
//!   incremental checksums; [`packet::Pkt`], what the algorithms may ask of a packet.
//! * **Sizes on the wire** — [`overhead`]: raw IP, Ethernet, ATM/AAL5 cells, PTM.
//! * **Estimators** — [`estimator`]: TSW rate, EWMA, min-RTT; [`hist`]: a fixed-size
//!   histogram of durations for percentiles (queue sojourn times in the simulator's
//!   results and the live box's stats).
//! * **ACK safety** — [`ack`]: may a queued ACK be removed in favour of a newer one?
//! * **Queue disciplines** — [`qdisc`]: the [`qdisc::Qdisc`] trait with its conservation
//!   counters, and FIFO, strict priority, DRR, TBF, the ACK filter, the ACK shaper
//!   (ACK delay control: the reverse direction paced by the forward backlog), the hierarchical
//!   schedulers HTB and HFSC (with link-layer accounting) and the ADSL ack class's queue.
//! * **Classification** — [`classify`]: rules → classes, the ADSL paper's five-class
//!   preset and its peer-to-peer host heuristic.
//! * **Aggregate rate control** — [`aggregate`]: policies (filter, profile ⟨B, r_m, r_p,
//!   L_m⟩, shape / police-and-mark / police-and-drop) over TCP connection aggregates, with
//!   partitioned, common (sequential / FCFS / LRU) and logical-partition token sharing.
//! * **Receiver windows** — [`rwnd`]: the receiver-based allocation policy (classes,
//!   eq. (1), gentle growth) and advertised-window rewriting at a middlebox.
//! * **The middlebox** — [`pipeline`]: per direction classify → rewrite → discipline, with
//!   cross-direction observations passed explicitly.
//! * **The link** — [`link`]: one direction's modem buffer, serialiser, loss and delay
//!   line, and when to ask the discipline for a packet; the simulator's links and the live
//!   box's emulated links are this one type ([`link::LinkConfig`] configures both).
//!
//! ## Contract for every stateful type
//!
//! `handle_*` feeds inputs, `poll_*` extracts outputs, `poll_at()` returns the next
//! deadline at which `handle_timeout` must be called. `now` must not decrease between
//! calls; a decrease is treated as no time passing.

pub mod ack;
pub mod aggregate;
pub mod checksum;
pub mod classify;
pub mod config;
pub mod estimator;
pub mod hist;
pub mod jitter;
pub mod line;
pub mod link;
pub mod overhead;
pub mod packet;
pub mod pipeline;
pub mod qdisc;
pub mod rand;
pub mod rwnd;
pub mod script;
pub mod subscribers;
pub mod time;
pub mod trace;
pub mod units;
pub mod wire;

pub use config::ConfigError;
pub use packet::{ClassId, Pkt};
pub use time::{Duration, Instant};
pub use units::{Bytes, Limit, Rate};
