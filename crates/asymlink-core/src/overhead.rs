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
//!    * `Framing::Raw`: `len`;
//!    * `Framing::Atm`: add the 8-byte AAL5 trailer, pad to whole 48-byte cell payloads,
//!      count 53 bytes per cell; optionally add the line's share of OAM cells (one cell in
//!      `oam_one_in` carries no user data, so user cells are charged `N/(N-1)` of their
//!      size, rounded to the nearest byte);
//!    * `Framing::Ptm`: 64/65 encoding, one extra byte per started 64 bytes (as tc's
//!      `linklayer ptm`).
//!
//! Worked examples (tested below):
//! * a 40-byte pure ACK over LLC/SNAP routed (overhead 8): 40 + 8 + 8 = 56 → 2 cells = 106
//!   bytes on the wire (2.65× its IP size); over VC-mux routed (overhead 0): 48 → 1 cell;
//! * a 1500-byte packet over LLC/SNAP: 1516 → 32 cells = 1696 bytes;
//! * a 52-byte ACK with timestamps (Linux) over LLC/SNAP: 68 → 2 cells = 106 bytes, of
//!   which 54 are overhead (51 %): the paper's "313 kbit/s of ACKs, 160 kbit/s of it pure
//!   overhead" is exactly this ratio (313 × 54/106 = 159.5);
//! * the paper's fixed overheads: the cell header is 5/53 = 9.43 % of the line, one OAM
//!   cell in 27 another 3.7 %; 500 kbit/s × 48/53 × 26/27 = 436 kbit/s of AAL5 payload
//!   (the paper rounds to 432).
//!
//! # Configuration (tc's vocabulary)
//!
//! ```toml
//! linklayer = "atm"                                   # framing only (tc `linklayer atm`)
//! linklayer = "llc_snap_routed"                       # a preset: overhead + framing
//! linklayer = { encap = "pppoe_llc", oam_one_in = 27 }
//! linklayer = { framing = "atm", overhead = 10, mpu = 0 }
//! ```

use crate::config::ConfigError;
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
    /// The configuration names of the presets.
    pub const NAMES: [&'static str; 11] = [
        "none",
        "llc_snap_routed",
        "llc_snap_bridged",
        "vc_mux_routed",
        "vc_mux_bridged",
        "pppoa_vc_mux",
        "pppoa_llc",
        "pppoe_llc",
        "pppoe_vc_mux",
        "ethernet",
        "bridged_ptm",
    ];
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
    /// One cell in this many on the line is an OAM cell (ATM only; 0 ignores OAM
    /// traffic). The paper's line: 27.
    pub oam_one_in: u32,
}

impl LinkLayer {
    /// Raw IP: the wire size is the IP size.
    pub const RAW: LinkLayer = LinkLayer {
        overhead: 0,
        mpu: 0,
        framing: Framing::Raw,
        oam_one_in: 0,
    };

    /// The link layer of a preset.
    pub const fn preset(e: Encapsulation) -> LinkLayer {
        LinkLayer {
            overhead: e.overhead(),
            mpu: e.mpu(),
            framing: e.framing(),
            oam_one_in: 0,
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

    #[inline]
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
                let bytes = self.atm_cells(ip_len) as u64 * ATM_CELL as u64;
                if self.oam_one_in < 2 {
                    return bytes as u32;
                }
                // User cells get N-1 of every N cell slots: charge N/(N-1) of their size,
                // rounded to the nearest byte (an average share, never a whole extra cell
                // per packet).
                let n = self.oam_one_in as u64;
                ((bytes * n + (n - 1) / 2) / (n - 1)) as u32
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

/// The configuration form of a link layer, in tc's vocabulary: a string naming a framing
/// (`"atm"`, `"ptm"`, `"raw"`) or a preset (`"llc_snap_routed"`, ...), or a table
/// `{ encap = "llc_snap_routed" }`, `{ framing = "atm", overhead = 10, mpu = 0 }`. Fields
/// given explicitly override the preset's.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct LinkLayerConfig {
    /// A preset.
    pub encap: Option<Encapsulation>,
    /// Framing (overrides the preset's).
    pub framing: Option<Framing>,
    /// Per-packet overhead bytes (overrides the preset's).
    pub overhead: Option<i32>,
    /// Minimum packet unit (overrides the preset's).
    pub mpu: Option<u32>,
    /// One cell in this many is an OAM cell (ATM; at least 2).
    pub oam_one_in: Option<u32>,
}

/// The table form, checked field by field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkLayerTable {
    encap: Option<Encapsulation>,
    framing: Option<Framing>,
    overhead: Option<i32>,
    mpu: Option<u32>,
    oam_one_in: Option<u32>,
}

impl core::str::FromStr for LinkLayerConfig {
    type Err = ConfigError;
    /// A framing name (`atm`, `ptm`, `raw`; `ethernet` is the Ethernet preset) or a preset
    /// name.
    fn from_str(s: &str) -> Result<LinkLayerConfig, ConfigError> {
        let framing = match s {
            "atm" | "adsl" => Some(Framing::Atm),
            "ptm" | "vdsl" => Some(Framing::Ptm),
            "raw" | "none" => Some(Framing::Raw),
            _ => None,
        };
        if let Some(f) = framing {
            return Ok(LinkLayerConfig {
                framing: Some(f),
                ..LinkLayerConfig::default()
            });
        }
        let encap = Encapsulation::deserialize(serde::de::value::StrDeserializer::<
            serde::de::value::Error,
        >::new(s))
        .map_err(|_| {
            ConfigError::value(format!(
                "unknown link layer '{s}': a framing (atm, ptm, raw) or a preset ({})",
                Encapsulation::NAMES.join(", ")
            ))
        })?;
        Ok(LinkLayerConfig {
            encap: Some(encap),
            ..LinkLayerConfig::default()
        })
    }
}

impl<'de> Deserialize<'de> for LinkLayerConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = LinkLayerConfig;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("a link layer name (\"atm\", \"llc_snap_routed\", ...) or a table")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LinkLayerConfig, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<LinkLayerConfig, A::Error> {
                let t =
                    LinkLayerTable::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                if t.oam_one_in.is_some_and(|n| n < 2) {
                    return Err(serde::de::Error::custom(
                        "oam_one_in must be at least 2 (one cell in N is OAM)",
                    ));
                }
                Ok(LinkLayerConfig {
                    encap: t.encap,
                    framing: t.framing,
                    overhead: t.overhead,
                    mpu: t.mpu,
                    oam_one_in: t.oam_one_in,
                })
            }
        }
        d.deserialize_any(V)
    }
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
        if let Some(o) = self.oam_one_in {
            l.oam_one_in = o;
        }
        l
    }

    /// This configuration with tc-style `overhead` / `mpu` given beside it (as in
    /// `{ kind = "htb", linklayer = "atm", overhead = 8 }`) taking precedence.
    pub fn with_overrides(mut self, overhead: Option<i32>, mpu: Option<u32>) -> LinkLayerConfig {
        if overhead.is_some() {
            self.overhead = overhead;
        }
        if mpu.is_some() {
            self.mpu = mpu;
        }
        self
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
    fn oam_share_is_an_average_not_a_cell_per_packet() {
        let mut l = LinkLayer::preset(Encapsulation::LlcSnapRouted);
        l.oam_one_in = 27;
        // 2 cells = 106 bytes, × 27/26 = 110.08 -> 110.
        assert_eq!(l.wire_len(40), 110);
        // 32 cells = 1696 bytes, × 27/26 = 1761.2 -> 1761.
        assert_eq!(l.wire_len(1500), 1761);
        l.oam_one_in = 2; // every other cell (extreme, for the arithmetic)
        assert_eq!(l.wire_len(40), 212);
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

    #[derive(Deserialize, Debug)]
    struct Holder {
        linklayer: LinkLayerConfig,
    }

    #[test]
    fn string_forms() {
        let h: Holder = toml::from_str("linklayer = \"atm\"").unwrap();
        assert_eq!(h.linklayer.build().framing, Framing::Atm);
        assert_eq!(h.linklayer.build().overhead, 0);
        let h: Holder = toml::from_str("linklayer = \"pppoa_vc_mux\"").unwrap();
        assert_eq!(
            h.linklayer.build(),
            LinkLayer::preset(Encapsulation::PppoaVcMux)
        );
        let e = toml::from_str::<Holder>("linklayer = \"atn\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("atn") && e.contains("llc_snap_routed"), "{e}");
        let e = toml::from_str::<Holder>("linklayer = { framing = \"atm\", oam_one_in = 1 }")
            .unwrap_err()
            .to_string();
        assert!(e.contains("oam_one_in"), "{e}");
        let e = toml::from_str::<Holder>("linklayer = { framin = \"atm\" }")
            .unwrap_err()
            .to_string();
        assert!(e.contains("framin"), "{e}");
        let c = h_with("atm").with_overrides(Some(8), None).build();
        assert_eq!((c.framing, c.overhead), (Framing::Atm, 8));
    }

    fn h_with(s: &str) -> LinkLayerConfig {
        s.parse().unwrap()
    }
}
