//! [`Headers`] → bytes, byte-exact, with IPv4 header and TCP/UDP checksums.
//!
//! TCP options are laid out the way Linux lays them out, so that a parsed Linux packet
//! re-emits to the same bytes:
//! * SYN: `MSS`, then `SACK-permitted` + `TS` (or `NOP NOP SACK-permitted`, or
//!   `NOP NOP TS`), then `NOP WS`;
//! * other segments: `NOP NOP TS`, then `NOP NOP SACK(n)`.
//!
//! Every group is a multiple of four bytes, so no end-of-list padding is needed.
//!
//! Option sets whose Linux layout would exceed 40 bytes (for example MSS + timestamps + three
//! SACK blocks, which other stacks can send and [`Headers::parse`] accepts) are written
//! packed, without NOPs, and padded with end-of-list to a multiple of four; only sets that
//! do not fit even then are refused ([`EmitError::OptionsTooLong`]).

use super::{Headers, TcpOptions, TcpRepr, Transport};
use crate::checksum;
use core::fmt;
use core::net::IpAddr;

/// Why a [`Headers`] value cannot be emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmitError {
    /// TCP options exceed the 40 bytes a header can hold (too many SACK blocks).
    OptionsTooLong(usize),
    /// Source and destination are of different IP families.
    MixedFamilies,
    /// The packet is longer than its IP length field can say.
    TooLong(u32),
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmitError::OptionsTooLong(n) => write!(f, "TCP options need {n} bytes (max 40)"),
            EmitError::MixedFamilies => f.write_str("source and destination families differ"),
            EmitError::TooLong(n) => write!(f, "packet of {n} bytes is too long for IP"),
        }
    }
}

impl std::error::Error for EmitError {}

/// Length of the Linux layout (see the module comment).
fn linux_options_len(o: &TcpOptions) -> usize {
    let mut n = 0;
    if o.mss.is_some() {
        n += 4;
    }
    n += match (o.sack_permitted, o.timestamp.is_some()) {
        (_, true) => 12,
        (true, false) => 4,
        (false, false) => 0,
    };
    if o.wscale.is_some() {
        n += 4;
    }
    if !o.sack.is_empty() {
        n += 4 + 8 * o.sack.len();
    }
    n
}

/// Length of the options without any NOP, before padding.
fn packed_options_len(o: &TcpOptions) -> usize {
    let mut n = 0;
    if o.mss.is_some() {
        n += 4;
    }
    if o.sack_permitted {
        n += 2;
    }
    if o.timestamp.is_some() {
        n += 10;
    }
    if o.wscale.is_some() {
        n += 3;
    }
    if !o.sack.is_empty() {
        n += 2 + 8 * o.sack.len();
    }
    n
}

/// The options length [`Headers::emit`] writes: the Linux layout when it fits in 40 bytes,
/// else the packed layout rounded up to a multiple of 4 (which may still exceed 40).
pub(super) fn tcp_options_len(o: &TcpOptions) -> usize {
    let linux = linux_options_len(o);
    if linux <= 40 {
        linux
    } else {
        packed_options_len(o).div_ceil(4) * 4
    }
}

fn write_tcp_options(o: &TcpOptions, out: &mut Vec<u8>) {
    if linux_options_len(o) <= 40 {
        write_linux_options(o, out)
    } else {
        write_packed_options(o, out)
    }
}

fn write_sack(o: &TcpOptions, out: &mut Vec<u8>) {
    out.extend_from_slice(&[5, 2 + 8 * o.sack.len() as u8]);
    for b in o.sack.iter() {
        out.extend_from_slice(&b.left.0.to_be_bytes());
        out.extend_from_slice(&b.right.0.to_be_bytes());
    }
}

fn write_linux_options(o: &TcpOptions, out: &mut Vec<u8>) {
    if let Some(mss) = o.mss {
        out.extend_from_slice(&[2, 4]);
        out.extend_from_slice(&mss.to_be_bytes());
    }
    match (o.sack_permitted, o.timestamp) {
        (true, Some(ts)) => {
            out.extend_from_slice(&[4, 2, 8, 10]);
            out.extend_from_slice(&ts.val.to_be_bytes());
            out.extend_from_slice(&ts.ecr.to_be_bytes());
        }
        (false, Some(ts)) => {
            out.extend_from_slice(&[1, 1, 8, 10]);
            out.extend_from_slice(&ts.val.to_be_bytes());
            out.extend_from_slice(&ts.ecr.to_be_bytes());
        }
        (true, None) => out.extend_from_slice(&[1, 1, 4, 2]),
        (false, None) => {}
    }
    if let Some(ws) = o.wscale {
        out.extend_from_slice(&[1, 3, 3, ws]);
    }
    if !o.sack.is_empty() {
        out.extend_from_slice(&[1, 1]);
        write_sack(o, out);
    }
}

/// No NOPs, end-of-list padding. Linux never sends such a combination; parsed packets
/// from other stacks can carry one, and this keeps every parsed option set emittable.
fn write_packed_options(o: &TcpOptions, out: &mut Vec<u8>) {
    let start = out.len();
    if let Some(mss) = o.mss {
        out.extend_from_slice(&[2, 4]);
        out.extend_from_slice(&mss.to_be_bytes());
    }
    if o.sack_permitted {
        out.extend_from_slice(&[4, 2]);
    }
    if let Some(ts) = o.timestamp {
        out.extend_from_slice(&[8, 10]);
        out.extend_from_slice(&ts.val.to_be_bytes());
        out.extend_from_slice(&ts.ecr.to_be_bytes());
    }
    if let Some(ws) = o.wscale {
        out.extend_from_slice(&[3, 3, ws]);
    }
    if !o.sack.is_empty() {
        write_sack(o, out);
    }
    let padded = start + (out.len() - start).div_ceil(4) * 4;
    out.resize(padded, 0); // end of option list, then zero padding (RFC 9293 §3.1)
}

fn write_tcp_header(t: &TcpRepr, out: &mut Vec<u8>) {
    let hl = t.header_len();
    out.extend_from_slice(&t.src_port.to_be_bytes());
    out.extend_from_slice(&t.dst_port.to_be_bytes());
    out.extend_from_slice(&t.seq.0.to_be_bytes());
    out.extend_from_slice(&t.ack.0.to_be_bytes());
    let off_flags: u16 = ((hl as u16 / 4) << 12) | (t.flags.0 & 0xfff);
    out.extend_from_slice(&off_flags.to_be_bytes());
    out.extend_from_slice(&t.window.to_be_bytes());
    out.extend_from_slice(&[0, 0]); // checksum, filled below
    out.extend_from_slice(&t.urgent.to_be_bytes());
    write_tcp_options(&t.opts, out);
}

impl Headers {
    /// Append the packet's bytes to `out`: IP header, transport header, then `payload_len`
    /// bytes of `fill`. Checksums are computed over exactly these bytes.
    pub fn emit(&self, fill: u8, out: &mut Vec<u8>) -> Result<(), EmitError> {
        if self.ip.src.is_ipv4() != self.ip.dst.is_ipv4() {
            return Err(EmitError::MixedFamilies);
        }
        if let Transport::Tcp(t) = &self.transport {
            let ol = t.options_len();
            if ol > 40 {
                return Err(EmitError::OptionsTooLong(ol));
            }
        }
        let total = self.ip_len();
        let start = out.len();
        let ip = &self.ip;
        let proto = self.protocol();
        match (ip.src, ip.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                if total > u16::MAX as u32 {
                    return Err(EmitError::TooLong(total));
                }
                out.push(0x45);
                out.push(((ip.dscp & 0x3f) << 2) | ip.ecn.bits());
                out.extend_from_slice(&(total as u16).to_be_bytes());
                out.extend_from_slice(&ip.ident.to_be_bytes());
                out.extend_from_slice(&(if ip.dont_frag { 0x4000u16 } else { 0 }).to_be_bytes());
                out.push(ip.ttl);
                out.push(proto);
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
                let c = checksum::finish(checksum::sum(&out[start..start + 20], 0));
                out[start + 10..start + 12].copy_from_slice(&c.to_be_bytes());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let plen = total - 40;
                if plen > u16::MAX as u32 {
                    return Err(EmitError::TooLong(total));
                }
                let tc = ((ip.dscp & 0x3f) << 2) | ip.ecn.bits();
                let word: u32 = (6 << 28) | ((tc as u32) << 20) | (ip.flow_label & 0xf_ffff);
                out.extend_from_slice(&word.to_be_bytes());
                out.extend_from_slice(&(plen as u16).to_be_bytes());
                out.push(proto);
                out.push(ip.ttl);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            _ => unreachable!("families checked above"),
        }
        let l4 = out.len();
        match &self.transport {
            Transport::Tcp(t) => write_tcp_header(t, out),
            Transport::Udp(u) => {
                out.extend_from_slice(&u.src_port.to_be_bytes());
                out.extend_from_slice(&u.dst_port.to_be_bytes());
                out.extend_from_slice(&((8 + self.payload_len) as u16).to_be_bytes());
                out.extend_from_slice(&[0, 0]);
            }
            Transport::Other(_) => {}
        }
        out.resize(out.len() + self.payload_len as usize, fill);
        let seg_len = (out.len() - l4) as u32;
        let csum_at = match &self.transport {
            Transport::Tcp(_) => Some(l4 + 16),
            Transport::Udp(_) => Some(l4 + 6),
            Transport::Other(_) => None,
        };
        if let Some(at) = csum_at {
            let pseudo = checksum::pseudo_header(ip.src, ip.dst, proto, seg_len);
            let mut c = checksum::finish(checksum::sum(&out[l4..], pseudo));
            if c == 0 && matches!(self.transport, Transport::Udp(_)) {
                c = 0xffff; // RFC 768: a computed zero is sent as all ones
            }
            out[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        Ok(())
    }

    /// [`Headers::emit`] into a fresh vector with a zero payload.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EmitError> {
        let mut v = Vec::with_capacity(self.ip_len() as usize);
        self.emit(0, &mut v)?;
        Ok(v)
    }
}
