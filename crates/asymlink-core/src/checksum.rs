//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

use core::net::IpAddr;

/// One's-complement sum of `data` (big-endian 16-bit words, odd byte padded) added to
/// `initial`, not yet folded.
pub fn sum(data: &[u8], initial: u32) -> u32 {
    let mut acc = initial as u64;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u64;
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u64) << 8;
    }
    while acc >> 32 != 0 {
        acc = (acc & 0xffff_ffff) + (acc >> 32);
    }
    acc as u32
}

/// Fold a running sum and complement it: the value to store in a checksum field.
pub fn finish(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The TCP/UDP pseudo-header sum for a segment of `len` bytes.
pub fn pseudo_header(src: IpAddr, dst: IpAddr, proto: u8, len: u32) -> u32 {
    let mut acc = 0u32;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = sum(&s.octets(), acc);
            acc = sum(&d.octets(), acc);
            acc = sum(&[0, proto], acc);
            acc = sum(&(len as u16).to_be_bytes(), acc);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            acc = sum(&s.octets(), acc);
            acc = sum(&d.octets(), acc);
            acc = sum(&len.to_be_bytes(), acc);
            acc = sum(&[0, 0, 0, proto], acc);
        }
        _ => {}
    }
    acc
}

/// RFC 1624 eqn. 3: the checksum after one 16-bit word changed from `old` to `new`.
pub fn update(hc: u16, old: u16, new: u16) -> u16 {
    let mut acc: u32 = (!hc) as u32 + (!old) as u32 + new as u32;
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_word_maps_both_zeros_to_0x0000() {
        for m in [0u16, 1, 0x1234, 0xfffe, 0xffff] {
            assert_eq!(update(0x0000, m, m), 0x0000);
            assert_eq!(update(0xffff, m, m), 0x0000);
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example: words 0001 f203 f4f5 f6f7 sum to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(sum(&d, 0)), !0xddf2);
    }

    #[test]
    fn rfc1624_section4_example() {
        //= https://www.rfc-editor.org/rfc/rfc1624#section-4
        //# Consider an IP packet header in which a 16-bit field m = 0x5555
        //# changes to m' = 0x3285.  Also, the one's complement sum of all other
        //# header octets is 0xCD7A.
        //# [...]
        //# Applying [Eqn. 3] to the example above, we get the correct result:
        //#
        //#    HC' = ~(C + (-m) + m')
        //#        = ~(0x22D0 + ~0x5555 + 0x3285)
        //#        = ~0xFFFF
        //#        =  0x0000
        let (m, m2, rest) = (0x5555u16, 0x3285u16, 0xcd7au16);
        let hc = finish(sum(&[rest.to_be_bytes(), m.to_be_bytes()].concat(), 0));
        assert_eq!(hc, 0xdd2f);
        let full = finish(sum(&[rest.to_be_bytes(), m2.to_be_bytes()].concat(), 0));
        assert_eq!(full, 0x0000);
        // Eqn. 3 gives the recomputed value, not eqn. 2's 0xFFFF.
        assert_eq!(update(hc, m, m2), full);
    }

    #[test]
    fn incremental_matches_full() {
        let mut d = [
            0x45u8, 0, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = finish(sum(&d, 0));
        d[10..12].copy_from_slice(&c.to_be_bytes());
        let old = u16::from_be_bytes([d[4], d[5]]);
        d[4..6].copy_from_slice(&0xbeefu16.to_be_bytes());
        let inc = update(c, old, 0xbeef);
        d[10] = 0;
        d[11] = 0;
        assert_eq!(inc, finish(sum(&d, 0)));
    }
}
