//! Receiver-based management of a low-bandwidth access link (Spring, Chesire, Berryman,
//! Sahasranaman, Anderson, Bershad: "Receiver based management of low bandwidth access
//! links", INFOCOM 2000).
//!
//! # Principles
//!
//! The receiver knows what the sender must infer: the access link's rate, which flows are
//! active, and which matter to the user. It controls the queue in front of its access
//! link with the one lever every TCP sender obeys — the advertised window. Each flow's
//! window is sized so that the flows together keep the link busy (a bandwidth-delay
//! product) plus a small target queue, and the flows the user waits for get the larger
//! share:
//!
//! * **classes** (§IV-A): a flow starts *interactive* (or as its port suggests: telnet
//!   interactive, ftp-data long bulk); having received `rcv_short` (2 KB) since it last
//!   sent data it is *short bulk*, `rcv_long` (8 KB) *long bulk*; a flow that neither sent
//!   nor received data for `idle` (30 s) is *idle*;
//! * **allocation** (§IV-C), eq. (1): `window_i = (Xput_link × BaseRTT_i +
//!   QLength_Target) / N`, where `QLength_Target` is `QLength_Delay` (the queueing delay
//!   the user accepts, 0.4 s of link) when interactive flows exist and it is the smaller,
//!   else `QLength_Loss` (half the access queue). Long bulk flows share eq. (1) among
//!   themselves while no short flow exists, and get one packet each while one does; short
//!   flows share eq. (1) among themselves; interactive flows get what a bulk flow gets;
//!   idle flows one packet. Never below one MSS;
//! * **stability** (§IV-B): an allocation grows by one packet per packet received (like
//!   slow start) and shrinks at once, but the right edge of the window never moves left:
//!   a shrinking window closes as data fills it;
//! * **parameters** (§IV-D): `BaseRTT` is the smallest RTT sample (handshake, and
//!   request/response when the receiver sends data); `Xput_link` is given or estimated
//!   from the arrival rate of packet trains.
//!
//! The policy ([`Policy`]) is sans-IO and keyed by any flow id. It is enforced in two
//! places that share it: the simulator's receiving host bounds what its connections
//! advertise (`asymlink-sim`'s `rwnd` adapter), and a middlebox rewrites the window of
//! the ACKs the receivers send ([`WindowRewriter`]).
//!
//! What it does not do: it does not estimate `QLength_Loss` from the loss pattern (give
//! `qlength_loss` or `access_queue`; without either, `QLength_Delay` stands in), it
//! honours no application priorities, and it manages only traffic toward the receivers.
//!
//! # Worked example
//!
//! A 28.8 kbit/s modem (3600 B/s), MTU 576 (MSS 536), one ftp download with `BaseRTT` =
//! 0.16 s and one telnet session. Telnet is interactive, so `QLength_Target` =
//! `QLength_Delay` = 0.4 s × 3600 B/s = 1440 B. The download (long bulk, no short flow)
//! gets eq. (1) with N = 1: 3600 × 0.16 + 1440 = 2016 B, 3.8 segments. About 1440 B wait
//! at the modem, so a keystroke's echo takes 0.16 + 0.4 = 0.56 s instead of the seconds
//! a 16 KB window queues.

pub mod config;
pub mod estimate;
pub mod policy;
pub mod rewrite;

pub use config::{Amount, FlowClass, Params, PortGuesses, RwndConfig};
pub use estimate::ArrivalRate;
pub use policy::{FlowInfo, Policy, PolicyStats, DEFAULT_MSS};
pub use rewrite::{RewriteCounters, WindowRewriter};
