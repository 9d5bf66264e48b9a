//! ACK safety: may a queued ACK be removed because a newer ACK of the same connection
//! carries all of its information?
//!
//! # Principles
//!
//! A TCP sender learns five things from an ACK: how far the receiver has the data
//! (cumulative ACK), which blocks above that it holds (SACK), the receive window, the
//! echoed timestamp, and the ECN feedback (ECE/CWR). It also learns something from the
//! *number* of ACKs: a run of duplicate ACKs triggers fast retransmit (RFC 5681 §3.2), and
//! in slow start every ACK grows the window. An ACK filter may trade the count for delay
//! (that trade is what the filtering policies are about), but it must never lose the
//! first kind of information, and never break a run of duplicate ACKs.
//!
//! This module decides, for one queued ACK `q` and one newer ACK `n` of the same
//! connection (same addresses and ports, same direction), whether `n` *supersedes* `q`:
//!
//! 1. `q` is a pure ACK: ACK set, none of SYN/FIN/RST/URG/PSH, no payload, no option
//!    this module does not understand (MSS, window scale and SACK-permitted are SYN-only
//!    and count as not understood on an ACK); it is not signed (TCP-MD5, TCP-AO, behind
//!    an IP Authentication Header, or options that could not be read to the end), has
//!    neither a reserved flag bit nor AE (NS) set, and carries no IPv4 options or IPv6
//!    extension headers (an ACK that replaced it would not carry them);
//! 2. `q` is not a duplicate ACK, and not possibly one (the first ACK seen of a connection
//!    whose history is unknown); `q` carries no D-SACK block;
//! 3. `n` carries a cumulative ACK (ACK set, no SYN, no RST) that is *strictly* newer than
//!    `q`'s: ACKs with equal numbers are duplicates or window updates, never superseded;
//! 4. `q` and `n` carry the same ECE, CWR and NS bits (a transition is information);
//! 5. `n`'s window right edge is not below `q`'s (a window update is never lost);
//! 6. every SACK block of `q` above `n`'s cumulative ACK lies inside one block of `n`;
//! 7. if `q` has timestamps, `n` has them too, with TSval and TSecr not older than `q`'s.
//!
//! A filter must also keep the order of a connection's ACKs and may only remove the
//! *newest* ACKs of a connection, the ones after the last ACK it keeps (a "suffix"):
//! a kept ACK is a barrier, and removing something older than it would move information
//! (an ECN transition, the ACK a duplicate run repeats) behind it. [`removable_suffix`]
//! implements that scan.
//!
//! The rules follow the guidance on ACK filtering in RFC 3449 §5.2.1
//! (<https://www.rfc-editor.org/rfc/rfc3449#section-5.2.1>; paraphrased: when an ACK is
//! about to be queued at the upstream bottleneck and an older ACK of the same connection
//! is already queued, the older one may be removed because TCP ACKs are cumulative, but
//! the sender must not be starved of ACKs and information such as duplicate ACKs must
//! survive). They are modelled after, but stricter than, Linux CAKE's
//! `cake_tcph_may_drop()` and `cake_ack_filter()` (net/sched/sch_cake.c, read for
//! understanding only): CAKE checks neither the window nor duplicate ACKs and lets an ACK
//! with a larger SACK coverage supersede one with the same cumulative ACK; here an equal
//! cumulative ACK always stays.
//!
//! # State
//!
//! Deciding whether an ACK is a duplicate needs the ACK that preceded it: [`AckState`]
//! keeps that (the last acknowledgment number and window of the connection, and the
//! window scale when the connection's SYN-ACK went through this direction). It is a few
//! bytes per connection; a caller that bounds its connection table may drop it, and an
//! ACK seen without history is then treated as a possible duplicate (kept).

use crate::wire::{Headers, SackBlock, SackBlocks, SeqNumber, TcpFlags, Timestamp};
use core::fmt;

/// The flags of an ACK that must not be mixed up by filtering (ECN feedback).
const ECN_FLAGS: TcpFlags = TcpFlags(TcpFlags::ECE.0 | TcpFlags::CWR.0 | TcpFlags::NS.0);
/// Flags a removable ACK may carry: ACK, ECE and CWR (AE/NS and the reserved bits keep it,
/// as in CAKE).
const PURE_FLAGS: TcpFlags = TcpFlags(TcpFlags::ACK.0 | TcpFlags::ECE.0 | TcpFlags::CWR.0);
/// Flags whose meaning may change: AE (NS) and the three reserved bits.
const RESERVED_FLAGS: TcpFlags = TcpFlags(TcpFlags::NS.0 | TcpFlags::RESERVED.0);

/// Why a queued ACK must stay (the first rule that fails).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[repr(u8)]
pub enum Keep {
    /// Not a TCP segment with the ACK flag.
    NotAck,
    /// SYN, FIN, RST, URG or PSH is set.
    ControlFlag,
    /// It carries payload.
    CarriesData,
    /// It may be signed end to end ([`Headers::is_signed`]): never removed as redundant.
    Signed,
    /// A reserved flag bit or AE (NS) is set: its meaning may change, so it stays.
    ReservedFlag,
    /// IPv4 options or IPv6 extension headers precede the TCP header.
    IpExtensions,
    /// It carries options this module does not understand.
    UnknownOptions,
    /// It is a duplicate ACK (same cumulative ACK and window as the connection's previous
    /// ACK, or same cumulative ACK with SACK blocks).
    DuplicateAck,
    /// The connection's previous ACK is unknown, so it may be a duplicate.
    MaybeDuplicate,
    /// It reports a D-SACK block (RFC 2883).
    DSack,
    /// The newer segment carries no cumulative ACK (no ACK flag, or SYN/RST).
    NewerNotAck,
    /// The newer ACK does not acknowledge more (equal or older cumulative ACK).
    NotNewer,
    /// ECE, CWR or NS differ: the transition would be lost.
    EcnChange,
    /// The newer ACK's window right edge is lower (or cannot be compared).
    WindowUpdate,
    /// It SACKs data above the newer cumulative ACK that the newer ACK does not SACK.
    SackNotCovered,
    /// Its timestamp is newer than the newer ACK's, or the newer ACK has none.
    Timestamp,
}

impl Keep {
    /// All reasons, in counter order.
    pub const ALL: [Keep; 16] = [
        Keep::NotAck,
        Keep::ControlFlag,
        Keep::CarriesData,
        Keep::Signed,
        Keep::ReservedFlag,
        Keep::IpExtensions,
        Keep::UnknownOptions,
        Keep::DuplicateAck,
        Keep::MaybeDuplicate,
        Keep::DSack,
        Keep::NewerNotAck,
        Keep::NotNewer,
        Keep::EcnChange,
        Keep::WindowUpdate,
        Keep::SackNotCovered,
        Keep::Timestamp,
    ];

    /// A stable snake_case name.
    pub const fn name(self) -> &'static str {
        match self {
            Keep::NotAck => "not_ack",
            Keep::Signed => "signed",
            Keep::ControlFlag => "control_flag",
            Keep::ReservedFlag => "reserved_flag",
            Keep::IpExtensions => "ip_extensions",
            Keep::CarriesData => "carries_data",
            Keep::UnknownOptions => "unknown_options",
            Keep::DuplicateAck => "duplicate_ack",
            Keep::MaybeDuplicate => "maybe_duplicate",
            Keep::DSack => "dsack",
            Keep::NewerNotAck => "newer_not_ack",
            Keep::NotNewer => "not_newer",
            Keep::EcnChange => "ecn_change",
            Keep::WindowUpdate => "window_update",
            Keep::SackNotCovered => "sack_not_covered",
            Keep::Timestamp => "timestamp",
        }
    }
}

impl fmt::Display for Keep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the safety rules need to know about one TCP segment, taken when it arrived
/// (see [`AckState::observe`]). Small and `Copy`, so a queue can keep one per packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AckMeta {
    /// Acknowledgment number (meaningful when `has_ack`).
    pub ack: SeqNumber,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// The window scale in use for this direction, when known.
    pub wscale: Option<u8>,
    /// ECE, CWR and NS as sent.
    pub ecn: TcpFlags,
    /// SACK blocks.
    pub sack: SackBlocks,
    /// Timestamps option.
    pub timestamp: Option<Timestamp>,
    /// Whether it carries a cumulative ACK that can supersede older ones (ACK set, no SYN,
    /// no RST).
    pub has_ack: bool,
    /// Whether it may itself be removed in favour of a newer ACK, and if not, why.
    pub removable: Result<(), Keep>,
}

/// What ACK filtering reads of a TCP segment ([`AckMeta::of`], [`AckState::observe`]):
/// a packet can answer it without its full headers ([`crate::packet::Pkt::ack_seg`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AckSeg {
    /// Acknowledgment number.
    pub ack: SeqNumber,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// The TCP flags.
    pub flags: TcpFlags,
    /// [`Headers::payload_len`].
    pub payload_len: u32,
    /// [`Headers::is_signed`].
    pub signed: bool,
    /// IP extension headers or options ([`crate::wire::IpRepr::extensions`]).
    pub ip_extensions: bool,
    /// An option besides SACK and timestamps: MSS, window scale, SACK-permitted or one
    /// not understood.
    pub other_options: bool,
    /// The window scale option.
    pub wscale: Option<u8>,
    /// SACK blocks.
    pub sack: SackBlocks,
    /// Timestamps option.
    pub timestamp: Option<Timestamp>,
}

impl AckSeg {
    /// The segment in `h` (`None` if not TCP).
    pub fn of(h: &Headers) -> Option<AckSeg> {
        let t = h.tcp_repr()?;
        let o = &t.opts;
        Some(AckSeg {
            ack: t.ack,
            window: t.window,
            flags: t.flags,
            payload_len: h.payload_len,
            signed: h.is_signed(),
            ip_extensions: h.ip.extensions,
            other_options: o.other || o.mss.is_some() || o.wscale.is_some() || o.sack_permitted,
            wscale: o.wscale,
            sack: o.sack,
            timestamp: o.timestamp,
        })
    }

    /// The segment's own properties, without history ([`AckMeta::of`]).
    pub fn meta(&self) -> AckMeta {
        let f = self.flags;
        let has_ack = f.contains(TcpFlags::ACK) && !f.intersects(TcpFlags::SYN | TcpFlags::RST);
        let removable = if !f.contains(TcpFlags::ACK) {
            Err(Keep::NotAck)
        } else if f.0 & !(PURE_FLAGS.0 | RESERVED_FLAGS.0) != 0 {
            Err(Keep::ControlFlag)
        } else if self.payload_len > 0 {
            Err(Keep::CarriesData)
        } else if self.signed {
            Err(Keep::Signed)
        } else if f.intersects(RESERVED_FLAGS) {
            Err(Keep::ReservedFlag)
        } else if self.ip_extensions {
            Err(Keep::IpExtensions)
        } else if self.other_options {
            Err(Keep::UnknownOptions)
        } else if is_dsack(self.ack, &self.sack) {
            Err(Keep::DSack)
        } else {
            Ok(())
        };
        AckMeta {
            ack: self.ack,
            window: self.window,
            wscale: None,
            ecn: TcpFlags(f.0 & ECN_FLAGS.0),
            sack: self.sack,
            timestamp: self.timestamp,
            has_ack,
            removable,
        }
    }
}

impl AckMeta {
    /// The segment's own properties, without history: a pure ACK is removable here; the
    /// caller ([`AckState::observe`]) adds the duplicate test.
    pub fn of(h: &Headers) -> Option<AckMeta> {
        AckSeg::of(h).map(|s| s.meta())
    }

    /// Whether this is a pure ACK (see [`Keep::ControlFlag`], [`Keep::CarriesData`]).
    pub fn is_pure(&self) -> bool {
        !matches!(
            self.removable,
            Err(Keep::NotAck | Keep::ControlFlag | Keep::CarriesData)
        )
    }
}

/// A D-SACK report (RFC 2883 §4): the first block lies below the cumulative ACK, or inside
/// the second block.
fn is_dsack(ack: SeqNumber, sack: &SackBlocks) -> bool {
    let mut it = sack.iter();
    let Some(first) = it.next() else {
        return false;
    };
    if first.left < ack || first.right <= ack {
        return true;
    }
    match it.next() {
        Some(second) => contains(second, first.left, first.right),
        None => false,
    }
}

/// Whether block `b` contains `[left, right)`.
fn contains(b: SackBlock, left: SeqNumber, right: SeqNumber) -> bool {
    b.left <= left && right <= b.right
}

/// Compare two 32-bit timestamps modulo 2^32 (RFC 7323 §5.2): `a` is not newer than `b`.
fn ts_not_after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

/// May the queued ACK `queued` be removed because `newer`, a later segment of the same
/// connection and direction, carries all of its information? `Ok(())` if so, else the
/// first rule that keeps it (see the [module documentation](self)).
///
/// This judges one pair. A filter removing several ACKs of a connection must only remove
/// ACKs newer than every ACK it keeps: see [`removable_suffix`].
pub fn may_remove(queued: &AckMeta, newer: &AckMeta) -> Result<(), Keep> {
    queued.removable?;
    if !newer.has_ack {
        return Err(Keep::NewerNotAck);
    }
    // Strictly newer: equal numbers are duplicates or window updates.
    if newer.ack.partial_cmp(&queued.ack) != Some(core::cmp::Ordering::Greater) {
        return Err(Keep::NotNewer);
    }
    if queued.ecn != newer.ecn {
        return Err(Keep::EcnChange);
    }
    if !right_edge_not_lower(queued, newer) {
        return Err(Keep::WindowUpdate);
    }
    for b in queued.sack.iter() {
        if b.right <= newer.ack {
            continue; // covered by the cumulative ACK
        }
        let left = b.left.max(newer.ack);
        if !newer.sack.iter().any(|nb| contains(nb, left, b.right)) {
            return Err(Keep::SackNotCovered);
        }
    }
    if let Some(qt) = queued.timestamp {
        match newer.timestamp {
            Some(nt) if ts_not_after(qt.val, nt.val) && ts_not_after(qt.ecr, nt.ecr) => {}
            _ => return Err(Keep::Timestamp),
        }
    }
    Ok(())
}

/// `newer`'s window right edge (ACK + window << scale) is not below `queued`'s. Without a
/// known common scale the raw windows must not shrink (sufficient whatever the scale,
/// since `newer.ack > queued.ack`).
fn right_edge_not_lower(queued: &AckMeta, newer: &AckMeta) -> bool {
    if newer.window >= queued.window {
        return true;
    }
    match (queued.wscale, newer.wscale) {
        (Some(a), Some(b)) if a == b => {
            let s = a.min(14) as u32;
            let advance = newer.ack.diff(queued.ack) as i64; // > 0 here
            let shrink = ((queued.window as i64) << s) - ((newer.window as i64) << s);
            advance >= shrink
        }
        _ => false,
    }
}

/// Scan a connection's queued ACKs from the newest back and return how many of the newest
/// may be removed in favour of `newer`: the scan stops at the first ACK that must stay,
/// and returns with it the reason (None when every queued ACK is removable).
///
/// `queued` yields the connection's queued segments from the *newest* to the oldest;
/// `None` items are segments without TCP metadata (never removable).
pub fn removable_suffix<I, M>(queued: I, newer: &AckMeta) -> (usize, Option<Keep>)
where
    I: IntoIterator<Item = Option<M>>,
    M: core::borrow::Borrow<AckMeta>,
{
    let mut n = 0;
    for q in queued {
        let verdict = match q {
            Some(q) => may_remove(q.borrow(), newer),
            None => Err(Keep::NotAck),
        };
        match verdict {
            Ok(()) => n += 1,
            Err(k) => return (n, Some(k)),
        }
    }
    (n, None)
}

/// Per-connection, per-direction ACK history: what [`AckState::observe`] needs to tell a
/// duplicate ACK from a new one. A few bytes; `Default` is "nothing seen yet".
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct AckState {
    /// Cumulative ACK and raw window of the last segment with an ACK.
    last: Option<(SeqNumber, u16)>,
    /// The window scale of this direction, learned from a SYN-ACK sent in it.
    wscale: Option<u8>,
}

impl AckState {
    /// Nothing seen yet.
    pub const fn new() -> AckState {
        AckState {
            last: None,
            wscale: None,
        }
    }

    /// Take a segment of the connection at its arrival (in order): returns its metadata,
    /// with the duplicate test applied, and remembers it as the connection's last ACK.
    /// `None` for segments that are not TCP.
    ///
    /// A pure ACK is a duplicate (RFC 5681 §2) when its cumulative ACK equals the previous
    /// ACK's and the window is the same, or when it carries SACK blocks (RFC 6675 counts
    /// those whatever the window). The first ACK after the state was created has no
    /// predecessor and counts as a possible duplicate.
    pub fn observe(&mut self, h: &Headers) -> Option<AckMeta> {
        Some(self.observe_seg(&AckSeg::of(h)?))
    }

    /// [`AckState::observe`] for a segment given as its [`AckSeg`].
    pub fn observe_seg(&mut self, s: &AckSeg) -> AckMeta {
        let mut m = s.meta();
        if s.flags.contains(TcpFlags::SYN) {
            // A new connection: forget the old one. A SYN-ACK with window scale means both
            // ends offered it (RFC 7323 §2.2), so the shift is in effect from now on.
            *self = AckState::new();
            if s.flags.contains(TcpFlags::ACK) {
                self.wscale = s.wscale;
            }
        }
        m.wscale = self.wscale;
        if m.removable.is_ok() {
            match self.last {
                None => m.removable = Err(Keep::MaybeDuplicate),
                Some((ack, window))
                    if ack == m.ack && (window == m.window || !m.sack.is_empty()) =>
                {
                    m.removable = Err(Keep::DuplicateAck)
                }
                _ => {}
            }
        }
        if s.flags.contains(TcpFlags::ACK) {
            self.last = Some((s.ack, s.window));
        }
        m
    }

    /// The window scale of this direction, if a SYN-ACK revealed it.
    pub fn wscale(&self) -> Option<u8> {
        self.wscale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{IpRepr, TcpOptions, TcpRepr};
    use core::net::{IpAddr, Ipv4Addr};

    fn seg(ack: u32, window: u16, flags: TcpFlags, payload: u32) -> Headers {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        Headers::tcp(
            IpRepr::new(a, b),
            TcpRepr {
                src_port: 80,
                dst_port: 1000,
                seq: SeqNumber(7),
                ack: SeqNumber(ack),
                flags,
                window,
                urgent: 0,
                opts: TcpOptions::default(),
            },
            payload,
        )
    }

    fn ack(n: u32) -> Headers {
        seg(n, 1000, TcpFlags::ACK, 0)
    }

    fn with<F: FnOnce(&mut TcpRepr)>(mut h: Headers, f: F) -> Headers {
        f(h.tcp_repr_mut().unwrap());
        h
    }

    fn meta(h: &Headers) -> AckMeta {
        AckMeta::of(h).unwrap()
    }

    fn sack(blocks: &[(u32, u32)]) -> SackBlocks {
        let mut s = SackBlocks::new();
        for &(l, r) in blocks {
            s.push(SackBlock {
                left: SeqNumber(l),
                right: SeqNumber(r),
            });
        }
        s
    }

    #[test]
    fn a_newer_cumulative_ack_supersedes_a_pure_ack() {
        assert_eq!(may_remove(&meta(&ack(100)), &meta(&ack(200))), Ok(()));
        // ... across the wrap of the sequence space
        assert_eq!(
            may_remove(&meta(&ack(u32::MAX - 5)), &meta(&ack(10))),
            Ok(())
        );
    }

    #[test]
    fn equal_or_older_acks_stay() {
        assert_eq!(
            may_remove(&meta(&ack(100)), &meta(&ack(100))),
            Err(Keep::NotNewer)
        );
        assert_eq!(
            may_remove(&meta(&ack(200)), &meta(&ack(100))),
            Err(Keep::NotNewer)
        );
    }

    #[test]
    fn control_flags_data_and_options_stay() {
        let n = meta(&ack(500));
        for (h, k) in [
            (
                seg(100, 1000, TcpFlags::ACK | TcpFlags::FIN, 0),
                Keep::ControlFlag,
            ),
            (
                seg(100, 1000, TcpFlags::ACK | TcpFlags::RST, 0),
                Keep::ControlFlag,
            ),
            (
                seg(100, 1000, TcpFlags::ACK | TcpFlags::SYN, 0),
                Keep::ControlFlag,
            ),
            (
                seg(100, 1000, TcpFlags::ACK | TcpFlags::URG, 0),
                Keep::ControlFlag,
            ),
            (
                seg(100, 1000, TcpFlags::ACK | TcpFlags::PSH, 0),
                Keep::ControlFlag,
            ),
            (seg(100, 1000, TcpFlags::ACK, 10), Keep::CarriesData),
            (seg(100, 1000, TcpFlags::NONE, 0), Keep::NotAck),
            (
                with(ack(100), |t| t.opts.other = true),
                Keep::UnknownOptions,
            ),
            (
                with(ack(100), |t| t.opts.mss = Some(1460)),
                Keep::UnknownOptions,
            ),
        ] {
            assert_eq!(may_remove(&meta(&h), &n), Err(k), "{h:?}");
        }
    }

    #[test]
    fn the_newer_segment_must_carry_an_ack() {
        let q = meta(&ack(100));
        let syn = meta(&seg(200, 1000, TcpFlags::ACK | TcpFlags::SYN, 0));
        let rst = meta(&seg(200, 1000, TcpFlags::ACK | TcpFlags::RST, 0));
        let none = meta(&seg(200, 1000, TcpFlags::NONE, 0));
        for n in [syn, rst, none] {
            assert_eq!(may_remove(&q, &n), Err(Keep::NewerNotAck));
        }
        // A data segment or a FIN carries the cumulative ACK: it supersedes.
        let data = meta(&seg(200, 1000, TcpFlags::ACK | TcpFlags::PSH, 500));
        let fin = meta(&seg(200, 1000, TcpFlags::ACK | TcpFlags::FIN, 0));
        assert_eq!(may_remove(&q, &data), Ok(()));
        assert_eq!(may_remove(&q, &fin), Ok(()));
    }

    #[test]
    fn ecn_bits_must_match() {
        let q = meta(&ack(100));
        let n = meta(&seg(200, 1000, TcpFlags::ACK | TcpFlags::ECE, 0));
        assert_eq!(may_remove(&q, &n), Err(Keep::EcnChange));
        let q = meta(&seg(100, 1000, TcpFlags::ACK | TcpFlags::ECE, 0));
        assert_eq!(may_remove(&q, &n), Ok(()));
        let n = meta(&seg(
            200,
            1000,
            TcpFlags::ACK | TcpFlags::ECE | TcpFlags::CWR,
            0,
        ));
        assert_eq!(may_remove(&q, &n), Err(Keep::EcnChange));
    }

    #[test]
    fn a_window_update_is_never_lost() {
        let q = meta(&seg(100, 1000, TcpFlags::ACK, 0));
        let n = meta(&seg(200, 999, TcpFlags::ACK, 0));
        assert_eq!(may_remove(&q, &n), Err(Keep::WindowUpdate));
        // With a known scale, the right edge decides: 100 + 1000<<2 vs 200 + 975<<2.
        let mut q2 = q;
        let mut n2 = meta(&seg(200, 975, TcpFlags::ACK, 0));
        q2.wscale = Some(2);
        n2.wscale = Some(2);
        assert_eq!(may_remove(&q2, &n2), Ok(()));
        n2.window = 974;
        assert_eq!(may_remove(&q2, &n2), Err(Keep::WindowUpdate));
        // A larger window is always fine.
        let n = meta(&seg(200, 2000, TcpFlags::ACK, 0));
        assert_eq!(may_remove(&q, &n), Ok(()));
    }

    #[test]
    fn sack_above_the_new_ack_must_be_covered() {
        let q = meta(&with(ack(100), |t| t.opts.sack = sack(&[(300, 400)])));
        // Covered by the cumulative ACK.
        assert_eq!(may_remove(&q, &meta(&ack(400))), Ok(()));
        // Partly above it and not reported.
        assert_eq!(may_remove(&q, &meta(&ack(350))), Err(Keep::SackNotCovered));
        // Covered by a block of the newer ACK.
        let n = meta(&with(ack(200), |t| {
            t.opts.sack = sack(&[(500, 600), (250, 450)])
        }));
        assert_eq!(may_remove(&q, &n), Ok(()));
        // Two blocks of the newer ACK that together cover it do not count (receivers merge
        // adjacent blocks; we stay conservative).
        let n = meta(&with(ack(200), |t| {
            t.opts.sack = sack(&[(300, 350), (350, 400)])
        }));
        assert_eq!(may_remove(&q, &n), Err(Keep::SackNotCovered));
    }

    #[test]
    fn dsack_stays() {
        let below = meta(&with(ack(500), |t| t.opts.sack = sack(&[(100, 200)])));
        assert_eq!(below.removable, Err(Keep::DSack));
        let inside = meta(&with(ack(100), |t| {
            t.opts.sack = sack(&[(300, 400), (200, 500)])
        }));
        assert_eq!(inside.removable, Err(Keep::DSack));
        let normal = meta(&with(ack(100), |t| {
            t.opts.sack = sack(&[(600, 700), (200, 500)])
        }));
        assert_eq!(normal.removable, Ok(()));
    }

    #[test]
    fn timestamps_must_not_go_back() {
        let ts = |val, ecr| Some(Timestamp { val, ecr });
        let q = meta(&with(ack(100), |t| t.opts.timestamp = ts(10, 20)));
        let n = meta(&with(ack(200), |t| t.opts.timestamp = ts(11, 20)));
        assert_eq!(may_remove(&q, &n), Ok(()));
        let n = meta(&with(ack(200), |t| t.opts.timestamp = ts(11, 19)));
        assert_eq!(may_remove(&q, &n), Err(Keep::Timestamp));
        let n = meta(&with(ack(200), |t| t.opts.timestamp = ts(9, 21)));
        assert_eq!(may_remove(&q, &n), Err(Keep::Timestamp));
        assert_eq!(may_remove(&q, &meta(&ack(200))), Err(Keep::Timestamp));
        // Wrap-around: u32::MAX is older than 3.
        let q = meta(&with(ack(100), |t| {
            t.opts.timestamp = ts(u32::MAX, u32::MAX)
        }));
        let n = meta(&with(ack(200), |t| t.opts.timestamp = ts(3, 3)));
        assert_eq!(may_remove(&q, &n), Ok(()));
    }

    #[test]
    fn observe_marks_duplicates_and_unknown_history() {
        let mut s = AckState::new();
        assert_eq!(
            s.observe(&ack(100)).unwrap().removable,
            Err(Keep::MaybeDuplicate)
        );
        assert_eq!(s.observe(&ack(200)).unwrap().removable, Ok(()));
        assert_eq!(
            s.observe(&ack(200)).unwrap().removable,
            Err(Keep::DuplicateAck)
        );
        // A window update with the same ACK is not a duplicate ...
        assert_eq!(
            s.observe(&seg(200, 2000, TcpFlags::ACK, 0))
                .unwrap()
                .removable,
            Ok(())
        );
        // ... unless it carries SACK blocks.
        let h = with(seg(200, 3000, TcpFlags::ACK, 0), |t| {
            t.opts.sack = sack(&[(300, 400)])
        });
        assert_eq!(s.observe(&h).unwrap().removable, Err(Keep::DuplicateAck));
        // A data segment updates the history: the next pure ACK with its number is a dup.
        s.observe(&seg(500, 3000, TcpFlags::ACK, 100));
        assert_eq!(
            s.observe(&seg(500, 3000, TcpFlags::ACK, 0))
                .unwrap()
                .removable,
            Err(Keep::DuplicateAck)
        );
    }

    #[test]
    fn observe_learns_the_window_scale_from_a_syn_ack() {
        let mut s = AckState::new();
        let synack = with(seg(1, 1000, TcpFlags::SYN | TcpFlags::ACK, 0), |t| {
            t.opts.wscale = Some(7)
        });
        s.observe(&synack);
        assert_eq!(s.wscale(), Some(7));
        let m = s.observe(&ack(100)).unwrap();
        assert_eq!(m.wscale, Some(7));
        assert_eq!(m.removable, Ok(()), "the SYN-ACK is the predecessor");
        // A plain SYN (this side opens) does not reveal whether scaling is on.
        let syn = with(seg(0, 1000, TcpFlags::SYN, 0), |t| t.opts.wscale = Some(7));
        s.observe(&syn);
        assert_eq!(s.wscale(), None);
    }

    #[test]
    fn the_suffix_scan_stops_at_the_first_barrier() {
        let mut s = AckState::new();
        s.observe(&ack(50));
        let a = s.observe(&ack(100)).unwrap();
        let d = s.observe(&ack(100)).unwrap(); // duplicate: a barrier
        let b = s.observe(&ack(150)).unwrap();
        let c = s.observe(&ack(180)).unwrap();
        let n = s.observe(&ack(300)).unwrap();
        // newest first
        let q = [Some(&c), Some(&b), Some(&d), Some(&a)];
        assert_eq!(removable_suffix(q, &n), (2, Some(Keep::DuplicateAck)));
        assert_eq!(
            removable_suffix([Some(&c), None], &n),
            (1, Some(Keep::NotAck))
        );
        assert_eq!(removable_suffix([Some(&c), Some(&b)], &n), (2, None));
    }
}
