//! Link-layer size model: what a packet of a given IP length costs on the wire.
//!
//! # Principles
//!
//! Every rate computation in asymlink (link serialisation, token buckets, HTB/HFSC
//! charging, the ATM modem) goes through [`LinkLayer::wire_len`]. A shaper that charges IP
//! bytes on a link that carries ATM cells under-counts by up to ~2.4× for small packets;
//! the queue it thinks it removed builds up, invisibly, in the modem. Getting this exact is
//! the point of the model.
//!
//! The computation, in order:
//! 1. `len = ip_len + overhead` — per-packet encapsulation bytes (e.g. 8 for RFC 2684
//!    LLC/SNAP routed, 14 for an Ethernet header), as tc's `overhead`;
//! 2. `len = max(len, mpu)` — minimum packet unit, as tc's `mpu`;
//! 3. framing:
//!    * [`Framing::Raw`]: `len`;
//!    * [`Framing::Atm`]: add the 8-byte AAL5 trailer, pad to whole 48-byte cell payloads,
//!      count 53 bytes per cell; optionally add a share of OAM cells;
//!    * [`Framing::Ptm`]: 64/65 encoding, one extra byte per started 64 bytes (as tc's
//!      `linklayer ptm`).
//!
//! Worked examples (tested below):
//! * a 40-byte pure ACK over LLC/SNAP routed (overhead 8): 40 + 8 + 8 = 56 → 2 cells = 106
//!   bytes on the wire (2.65× its IP size); over VC-mux routed (overhead 0): 48 → 1 cell;
//! * a 1500-byte packet over LLC/SNAP: 1516 → 32 cells = 1696 bytes.

use serde::Deserialize;

/// How the link frames packets.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// No framing beyond `overhead` (raw IP links, or Ethernet with its overhead given as
    /// bytes).
    #[default]
    Raw,
    /// ATM cells carrying AAL5 frames (ADSL).
    Atm,
    /// PTM 64/65-byte encoding (VDSL2).
    Ptm,
}

/// Encapsulation presets: per-packet overhead bytes before framing.
///
/// ATM values follow RFC 2684 (LLC/SNAP and VC-mux), RFC 2364 (PPPoA) and RFC 2516
/// (PPPoE, carried as bridged Ethernet over RFC 2684); the AAL5 trailer is added by the
/// framing, not here. Ethernet counts header + FCS + preamble + inter-frame gap.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encapsulation {
    /// No overhead.
    None,
    /// RFC 2684 LLC/SNAP, routed IP: 8 bytes (LLC 3 + OUI 3 + EtherType 2).
    LlcSnapRouted,
    /// RFC 2684 LLC/SNAP, bridged Ethernet without FCS: LLC/OUI/PID 8 + pad 2 + Ethernet
    /// header 14 = 24 bytes.
    LlcSnapBridged,
    /// RFC 2684 VC-mux, routed IP: 0 bytes.
    VcMuxRouted,
    /// RFC 2684 VC-mux, bridged Ethernet (no FCS): pad 2 + Ethernet header 14 = 16 bytes.
    VcMuxBridged,
    /// RFC 2364 PPPoA, VC-mux: PPP protocol field 2 bytes.
    PppoaVcMux,
    /// RFC 2364 PPPoA, LLC: LLC 4 (FE FE 03 CF) + PPP protocol 2 = 6 bytes.
    PppoaLlc,
    /// PPPoE over RFC 2684 LLC/SNAP bridged: 24 (bridged) + PPPoE 6 + PPP 2 = 32 bytes.
    PppoeLlc,
    /// PPPoE over RFC 2684 VC-mux bridged: 16 + 6 + 2 = 24 bytes.
    PppoeVcMux,
    /// Ethernet II on the wire: preamble+SFD 8, header 14, FCS 4, inter-frame gap 12 =
    /// 38 bytes, minimum frame 64 (mpu 84 with preamble and gap).
    Ethernet,
    /// PTM (VDSL2) carrying bridged Ethernet: 22 bytes per packet, the value of CAKE's
    /// `bridged-ptm` keyword (Ethernet header 14, FCS 4, PTM framing 4).
    BridgedPtm,
}

impl Encapsulation {
    /// Per-packet overhead bytes.
    pub const fn overhead(self) -> i32 {
        match self {
            Encapsulation::None => 0,
            Encapsulation::LlcSnapRouted => 8,
            Encapsulation::LlcSnapBridged => 24,
            Encapsulation::VcMuxRouted => 0,
            Encapsulation::VcMuxBridged => 16,
            Encapsulation::PppoaVcMux => 2,
            Encapsulation::PppoaLlc => 6,
            Encapsulation::PppoeLlc => 32,
            Encapsulation::PppoeVcMux => 24,
            Encapsulation::Ethernet => 38,
            Encapsulation::BridgedPtm => 22,
        }
    }
    /// The framing this encapsulation implies.
    pub const fn framing(self) -> Framing {
        match self {
            Encapsulation::None | Encapsulation::Ethernet => Framing::Raw,
            Encapsulation::BridgedPtm => Framing::Ptm,
            _ => Framing::Atm,
        }
    }
    /// The minimum packet unit this encapsulation implies.
    pub const fn mpu(self) -> u32 {
        match self {
            Encapsulation::Ethernet => 84,
            _ => 0,
        }
    }
}

/// Bytes of an ATM cell.
pub const ATM_CELL: u32 = 53;
/// Payload bytes of an ATM cell.
pub const ATM_PAYLOAD: u32 = 48;
/// AAL5 trailer bytes.
pub const AAL5_TRAILER: u32 = 8;

/// A link layer: overhead, minimum size and framing.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct LinkLayer {
    /// Per-packet bytes added before framing (may be negative to remove bytes a device
    /// already counts, as in tc).
    pub overhead: i32,
    /// Minimum size after adding overhead.
    pub mpu: u32,
    /// Framing.
    pub framing: Framing,
    /// OAM cells per 1000 user cells (ATM only; 0 ignores OAM traffic).
    pub oam_per_mille: u32,
}

impl LinkLayer {
    /// Raw IP: the wire size is the IP size.
    pub const RAW: LinkLayer = LinkLayer {
        overhead: 0,
        mpu: 0,
        framing: Framing::Raw,
        oam_per_mille: 0,
    };

    /// The link layer of a preset.
    pub const fn preset(e: Encapsulation) -> LinkLayer {
        LinkLayer {
            overhead: e.overhead(),
            mpu: e.mpu(),
            framing: e.framing(),
            oam_per_mille: 0,
        }
    }

    /// ATM cells for a packet of `ip_len` bytes (0 unless the framing is ATM).
    pub fn atm_cells(&self, ip_len: u32) -> u32 {
        if self.framing != Framing::Atm {
            return 0;
        }
        let len = self.pre_framing(ip_len);
        (len + AAL5_TRAILER).div_ceil(ATM_PAYLOAD)
    }

    fn pre_framing(&self, ip_len: u32) -> u32 {
        let l = (ip_len as i64 + self.overhead as i64).max(0) as u32;
        l.max(self.mpu)
    }

    /// Bytes this packet occupies on the wire (what a rate is charged for).
    #[inline]
    pub fn wire_len(&self, ip_len: u32) -> u32 {
        match self.framing {
            Framing::Raw => self.pre_framing(ip_len),
            Framing::Atm => {
                let cells = self.atm_cells(ip_len);
                let oam = (cells * self.oam_per_mille).div_ceil(1000);
                (cells + oam) * ATM_CELL
            }
            Framing::Ptm => {
                let l = self.pre_framing(ip_len);
                l + l.div_ceil(64)
            }
        }
    }

    /// Whether the model is the identity.
    pub fn is_raw(&self) -> bool {
        *self == LinkLayer::RAW
    }
}

/// The configuration form of a link layer, in tc's vocabulary:
/// `{ encap = "llc_snap_routed" }`, or `{ framing = "atm", overhead = 10, mpu = 0 }`.
/// Fields given explicitly override the preset's.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkLayerConfig {
    /// A preset.
    pub encap: Option<Encapsulation>,
    /// Framing (overrides the preset's).
    pub framing: Option<Framing>,
    /// Per-packet overhead bytes (overrides the preset's).
    pub overhead: Option<i32>,
    /// Minimum packet unit (overrides the preset's).
    pub mpu: Option<u32>,
    /// OAM cells per 1000 user cells (ATM).
    pub oam_per_mille: Option<u32>,
}

impl LinkLayerConfig {
    /// The link layer this configuration describes.
    pub fn build(&self) -> LinkLayer {
        let mut l = self.encap.map(LinkLayer::preset).unwrap_or(LinkLayer::RAW);
        if let Some(f) = self.framing {
            l.framing = f;
        }
        if let Some(o) = self.overhead {
            l.overhead = o;
        }
        if let Some(m) = self.mpu {
            l.mpu = m;
        }
        if let Some(o) = self.oam_per_mille {
            l.oam_per_mille = o;
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atm_worked_examples() {
        let llc = LinkLayer::preset(Encapsulation::LlcSnapRouted);
        assert_eq!(llc.atm_cells(40), 2);
        assert_eq!(llc.wire_len(40), 106);
        assert_eq!(llc.atm_cells(1500), 32);
        assert_eq!(llc.wire_len(1500), 32 * 53);
        let vcmux = LinkLayer::preset(Encapsulation::VcMuxRouted);
        assert_eq!(vcmux.atm_cells(40), 1);
        assert_eq!(vcmux.wire_len(40), 53);
        // 41 bytes no longer fit one cell with the trailer.
        assert_eq!(vcmux.atm_cells(41), 2);
        // PPPoE/LLC: 40 + 32 + 8 = 80 -> 2 cells; 1492 + 32 + 8 = 1532 -> 32 cells.
        let pppoe = LinkLayer::preset(Encapsulation::PppoeLlc);
        assert_eq!(pppoe.atm_cells(40), 2);
        assert_eq!(pppoe.atm_cells(1492), 32);
    }

    #[test]
    fn oam_share() {
        let mut l = LinkLayer::preset(Encapsulation::VcMuxRouted);
        l.oam_per_mille = 1000; // one OAM cell per user cell (extreme, for the arithmetic)
        assert_eq!(l.wire_len(40), 2 * 53);
    }

    #[test]
    fn ethernet_and_ptm() {
        let e = LinkLayer::preset(Encapsulation::Ethernet);
        assert_eq!(e.wire_len(1500), 1538);
        assert_eq!(e.wire_len(40), 84);
        let p = LinkLayer {
            framing: Framing::Ptm,
            ..LinkLayer::RAW
        };
        assert_eq!(p.wire_len(64), 65);
        assert_eq!(p.wire_len(65), 67);
        assert_eq!(LinkLayer::RAW.wire_len(1500), 1500);
    }

    #[test]
    fn config_overrides_preset() {
        let c: LinkLayerConfig =
            toml::from_str("encap = \"llc_snap_routed\"\noverhead = 10").unwrap();
        let l = c.build();
        assert_eq!(l.framing, Framing::Atm);
        assert_eq!(l.overhead, 10);
        let bad = toml::from_str::<LinkLayerConfig>("encap = \"carrier_pigeon\"");
        assert!(bad.is_err());
    }
}
