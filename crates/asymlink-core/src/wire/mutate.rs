//! In-place edits of real packets with incremental checksum updates (RFC 1624 eqn. 3:
//! `HC' = ~(~HC + ~m + m')`). A packet whose checksum was wrong before an edit is still
//! wrong after it by the same amount: an edit never turns a corrupt packet into a valid
//! one, and never corrupts a valid one.
//!
//! Every function takes the [`Layout`] from [`Headers::parse`](super::Headers::parse) of
//! the same bytes and returns `false` (changing nothing) if the layout does not fit them.

use super::{Ecn, Layout};

/// Replace the 16-bit word at `at` (even offset within the checksummed region) and patch
/// the checksum stored at `csum_at`.
fn replace_word(buf: &mut [u8], at: usize, new: u16, csum_at: usize) {
    let old = u16::from_be_bytes([buf[at], buf[at + 1]]);
    if old == new {
        // Not only a shortcut: with m == m', eqn. 3 turns a stored 0xFFFF into 0x0000
        // (`update(0xFFFF, m, m) == 0`; a stored 0x0000 stays 0x0000). Both are zero in
        // ones' complement, but a field that did not change must leave the bytes as they
        // were.
        return;
    }
    buf[at..at + 2].copy_from_slice(&new.to_be_bytes());
    let hc = u16::from_be_bytes([buf[csum_at], buf[csum_at + 1]]);
    let hc2 = crate::checksum::update(hc, old, new);
    buf[csum_at..csum_at + 2].copy_from_slice(&hc2.to_be_bytes());
}

/// Whether `layout` describes a TCP header that lies wholly inside the IP packet and the
/// IP packet wholly inside `buf`.
fn tcp_fits(buf: &[u8], layout: &Layout) -> bool {
    layout.l4_header_len >= 20
        && layout.ip_len <= buf.len()
        && layout
            .l4_offset
            .checked_add(layout.l4_header_len)
            .is_some_and(|end| end <= layout.ip_len)
}

/// Set the TCP window field to `window` (raw, before scaling) and patch the TCP checksum.
///
/// Returns `false` and changes nothing when `layout` is not a TCP layout that fits `buf`.
pub fn set_tcp_window(buf: &mut [u8], layout: &Layout, window: u16) -> bool {
    if !tcp_fits(buf, layout) {
        return false;
    }
    let o = layout.l4_offset;
    replace_word(buf, o + 14, window, o + 16);
    true
}

/// Read the TCP window field (`None` when `layout` is not a TCP layout that fits `buf`).
pub fn tcp_window(buf: &[u8], layout: &Layout) -> Option<u16> {
    if !tcp_fits(buf, layout) {
        return None;
    }
    let o = layout.l4_offset;
    Some(u16::from_be_bytes([buf[o + 14], buf[o + 15]]))
}

/// Set the DSCP (6 bits; higher bits ignored) and ECN bits: IPv4 TOS byte with a header
/// checksum update, or IPv6 traffic class (no checksum).
///
/// Returns `false` and changes nothing unless `buf` starts with a whole IP header: version
/// 4 with IHL ≥ 5 and IHL × 4 bytes present, or version 6 with 40 bytes present.
pub fn set_dscp_ecn(buf: &mut [u8], dscp: u8, ecn: Ecn) -> bool {
    let tos = ((dscp & 0x3f) << 2) | ecn.bits();
    let Some(&first) = buf.first() else {
        return false;
    };
    match first >> 4 {
        4 => {
            let ihl = (first & 0x0f) as usize * 4;
            if ihl < 20 || buf.len() < ihl {
                return false;
            }
            let word = u16::from_be_bytes([buf[0], tos]);
            replace_word(buf, 0, word, 10);
            true
        }
        6 if buf.len() >= 40 => {
            buf[0] = (buf[0] & 0xf0) | (tos >> 4);
            buf[1] = (buf[1] & 0x0f) | (tos << 4);
            true
        }
        _ => false,
    }
}
