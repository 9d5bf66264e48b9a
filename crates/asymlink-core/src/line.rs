//! Line mode: one key describes an asymmetric access line, and expands into a complete
//! configuration of both directions of a middlebox.
//!
//! ```toml
//! line = { down = "8Mbit", up = "512kbit", linklayer = { encap = "llc_snap_routed" } }
//! ```
//!
//! Side a is the home network and side b the line (`at = "home"`, the default); with
//! `at = "isp"` the line is on side a, for a box at the provider's end. The direction
//! toward the line is shaped before it (egress); the direction coming off the line is
//! shaped after it (ingress), a little below the line rate, so that the standing queue
//! moves from the modem's or DSLAM's buffer into the box, where flow queueing and CoDel
//! keep it short.
//!
//! * Toward the line: HTB at `up_fraction` (or `down_fraction`) of the line rate, charged
//!   in the line's wire bytes, with two classes under it: interactive traffic (a tenth;
//!   DSCP EF/CS6/CS7, or IP packets of at most 200 bytes that are not pure ACKs;
//!   `fq_codel`), first for what it needs, and everything else (the rest; fair between
//!   hosts and then between each host's flows, `host_fq_codel`, with the ACK filter of the
//!   flow queues). A download's ACKs are a flow of their own there: they wait their
//!   fair-queueing turn behind an upload, and while they wait each newer ACK supersedes
//!   the one before it, so fewer, larger ACKs cross the line and the upload keeps its
//!   share — CAKE's `ack-filter` design. A fixed-rate ACK class was measured against it
//!   and lost on both transfers (docs/adsl.md).
//! * Off the line: HTB in ingress mode (a packet it drops has already crossed the line
//!   and is charged as sent) with one `host_fq_codel` leaf, fair between the home hosts.
//!
//! Explicit `to_a` / `to_b` keys next to `line` replace the matching parts of the
//! expansion (`to_b.qdisc` replaces the uplink's discipline, `to_b.classifier` its
//! classifier); `rewrite` rules are kept. [`expand`] works on the configuration table, so
//! the simulator's middleboxes, the box and the lab share it, and the effective
//! configuration can be printed.

use crate::config::ConfigError;
use crate::overhead::LinkLayerConfig;
use crate::units::Rate;
use serde::Deserialize;
use toml::{Table, Value};

/// Where the box sits on the line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineEnd {
    /// At the home end: side a is the home network, side b the line.
    #[default]
    Home,
    /// At the provider's end: side a is the line, side b the provider's network.
    Isp,
}

fn fraction_default() -> f64 {
    0.95
}

fn yes() -> bool {
    true
}

/// The `line` key.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineConfig {
    /// Downstream line rate (toward the home).
    pub down: Rate,
    /// Upstream line rate (from the home).
    pub up: Rate,
    /// The line's framing: `"atm"`, `"ptm"`, a preset such as `"llc_snap_routed"`, or a
    /// table (as for HTB). Default: IP lengths.
    #[serde(default)]
    pub linklayer: LinkLayerConfig,
    /// Which end of the line the box is at (default `home`).
    #[serde(default)]
    pub at: LineEnd,
    /// Fraction of the upstream rate the box shapes to (default 0.95).
    #[serde(default = "fraction_default")]
    pub up_fraction: f64,
    /// Fraction of the downstream rate the box shapes to (default 0.95).
    #[serde(default = "fraction_default")]
    pub down_fraction: f64,
    /// Filter superseded pure ACKs in the flow queues toward the line (default true).
    #[serde(default = "yes")]
    pub ack_filter: bool,
}

/// The direction keys of the upstream and the downstream: upstream traffic always travels
/// from side a to side b (home → line at the home end; line → provider at the provider's).
const DIRS: [(&str, Way); 2] = [("to_b", Way::Up), ("to_a", Way::Down)];

/// Which way traffic flows relative to the home.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Up,
    Down,
}

impl LineConfig {
    fn rate(&self, way: Way) -> Rate {
        let (r, f) = match way {
            Way::Up => (self.up, self.up_fraction),
            Way::Down => (self.down, self.down_fraction),
        };
        Rate((r.0 as f64 * f).round() as u64)
    }

    /// CoDel's target and interval (µs) for the direction `way` coming off the line: the
    /// target covers half of one MTU's serialisation the other way (within 5-20 ms), the
    /// interval grows by as much (CAKE's rule for a raised target). Under an upload, the
    /// download's ACKs wait behind upload packets and reach the sender in bunches up to
    /// an MTU's time apart, so the download's queue in the box swings that far without
    /// standing; a 5 ms target there cut the download during an upload by 5 % (in the
    /// simulator and the lab; docs/adsl.md).
    fn ingress_codel(&self, way: Way) -> (u64, u64) {
        let other = match way {
            Way::Up => Way::Down,
            Way::Down => Way::Up,
        };
        let mtu_bits = 8 * u64::from(self.linklayer.build().wire_len(1500));
        let mtu_us = mtu_bits * 1_000_000 / self.rate(other).0.max(1);
        let target = (mtu_us / 2).clamp(5_000, 20_000);
        (target, 100_000 + (target - 5_000))
    }

    /// Whether `way` leaves the box toward the line (otherwise it comes off the line).
    fn toward_line(&self, way: Way) -> bool {
        matches!(
            (self.at, way),
            (LineEnd::Home, Way::Up) | (LineEnd::Isp, Way::Down)
        )
    }

    /// The expansion of one direction, without the link layer.
    fn direction(&self, way: Way) -> String {
        let s = self.rate(way).0;
        // Upstream packets come from home hosts; downstream packets go to them.
        let hosts = match way {
            Way::Up => "src",
            Way::Down => "dst",
        };
        if !self.toward_line(way) {
            let (target, interval) = self.ingress_codel(way);
            return format!(
                "[qdisc]\nkind = \"htb\"\ningress = true\ndefault = \"all\"\nclasses = [\n  \
                 {{ name = \"all\", rate = \"{s}bit\", queue = {{ kind = \"host_fq_codel\", \
                 hosts = \"{hosts}\", target = \"{target}us\", interval = \"{interval}us\" }} }},\n]\n"
            );
        }
        format!(
            "[classifier]\ndefault = \"bulk\"\nrules = [\n  \
             {{ class = \"interactive\", match = {{ dscp = [46, 48, 56] }} }},\n  \
             {{ class = \"interactive\", match = {{ max_len = 200, pure_ack = false }} }},\n]\n\
             [qdisc]\nkind = \"htb\"\ndefault = \"bulk\"\nclasses = [\n  \
             {{ name = \"line\", rate = \"{s}bit\" }},\n  \
             {{ name = \"interactive\", parent = \"line\", rate = \"{int}bit\", \
             ceil = \"{s}bit\", prio = 0, queue = {{ kind = \"fq_codel\" }} }},\n  \
             {{ name = \"bulk\", parent = \"line\", rate = \"{bulk}bit\", ceil = \"{s}bit\", \
             prio = 1, queue = {{ kind = \"host_fq_codel\", hosts = \"{hosts}\", \
             ack_filter = {ack_filter} }} }},\n]\n",
            int = s / 10,
            bulk = s - s / 10,
            ack_filter = self.ack_filter,
        )
    }
}

fn err(key: &str, msg: impl Into<String>) -> ConfigError {
    ConfigError::new(key, msg)
}

/// Expand a `line` key of `table` (a middlebox's configuration) in place into `to_a` and
/// `to_b`, keeping what `table` gives explicitly for those. Returns whether there was a
/// `line`. Errors name the key below `line`.
pub fn expand(table: &mut Table) -> Result<bool, ConfigError> {
    let Some(raw) = table.remove("line") else {
        return Ok(false);
    };
    let cfg: LineConfig = raw
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| err("line", e.message().trim().to_string()))?;
    for (k, r) in [("down", cfg.down), ("up", cfg.up)] {
        if r.0 == 0 {
            return Err(err(&format!("line.{k}"), "must be positive"));
        }
    }
    for (k, f) in [
        ("up_fraction", cfg.up_fraction),
        ("down_fraction", cfg.down_fraction),
    ] {
        if !(f > 0.0 && f <= 1.0) {
            return Err(err(&format!("line.{k}"), "must be in (0, 1]"));
        }
    }
    let linklayer = raw.get("linklayer").cloned();
    for (dir, way) in DIRS {
        let mut generated: Table = cfg
            .direction(way)
            .parse()
            .map_err(|e: toml::de::Error| err("line", format!("expansion: {e}")))?;
        if let (Some(ll), Some(Value::Table(q))) = (&linklayer, generated.get_mut("qdisc")) {
            q.insert("linklayer".into(), ll.clone());
        }
        match table.remove(dir) {
            None => {}
            Some(Value::Table(explicit)) => generated.extend(explicit),
            Some(_) => return Err(err(dir, "must be a table")),
        }
        table.insert(dir.into(), Value::Table(generated));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::pipeline::{Middlebox, MiddleboxConfig};

    fn expanded(src: &str) -> Table {
        let mut t: Table = src.parse().unwrap();
        assert!(expand(&mut t).unwrap());
        t
    }

    fn build(t: &Table) -> Middlebox<HeaderPacket> {
        let cfg: MiddleboxConfig = Value::Table(t.clone()).try_into().unwrap();
        Middlebox::new(&cfg, [None, None], 1).unwrap_or_else(|e| panic!("{e}\n{t:#?}"))
    }

    #[test]
    fn one_line_builds_both_directions() {
        let t = expanded(
            "line = { down = \"8Mbit\", up = \"512kbit\", linklayer = { encap = \"llc_snap_routed\" } }",
        );
        let up = &t["to_b"]["qdisc"];
        assert_eq!(up["kind"].as_str(), Some("htb"));
        assert_eq!(up["classes"][0]["rate"].as_str(), Some("486400bit"));
        assert_eq!(
            up["linklayer"]["encap"].as_str(),
            Some("llc_snap_routed"),
            "charged in the line's cells"
        );
        assert_eq!(
            t["to_b"]["classifier"]["rules"][0]["class"].as_str(),
            Some("interactive")
        );
        let down = &t["to_a"]["qdisc"];
        assert_eq!(down["ingress"].as_bool(), Some(true));
        assert_eq!(down["classes"][0]["rate"].as_str(), Some("7600000bit"));
        // Half of a 1500-byte packet's 32 cells (13 568 bits) at 486.4 kbit/s: 13.9 ms.
        let q = &down["classes"][0]["queue"];
        assert_eq!(q["target"].as_str(), Some("13947us"));
        assert_eq!(q["interval"].as_str(), Some("108947us"));
        assert_eq!(
            down["classes"][0]["queue"]["hosts"].as_str(),
            Some("dst"),
            "fair between the home hosts"
        );
        let mb = build(&t);
        assert_eq!(mb.egress(crate::pipeline::Dir::ToB).qdisc().kind(), "htb");
    }

    #[test]
    fn acks_share_the_flow_queues_and_are_filtered_there() {
        let t = expanded("line = { down = \"8Mbit\", up = \"512kbit\" }");
        let bulk = &t["to_b"]["qdisc"]["classes"][2];
        assert_eq!(bulk["name"].as_str(), Some("bulk"));
        assert_eq!(bulk["queue"]["ack_filter"].as_bool(), Some(true));
        // A pure ACK is never "interactive", however small.
        let rule = &t["to_b"]["classifier"]["rules"][1]["match"];
        assert_eq!(rule["pure_ack"].as_bool(), Some(false));
        let t = expanded("line = { down = \"8Mbit\", up = \"512kbit\", ack_filter = false }");
        assert_eq!(
            t["to_b"]["qdisc"]["classes"][2]["queue"]["ack_filter"].as_bool(),
            Some(false)
        );
        build(&t);
    }

    #[test]
    fn at_the_isp_the_line_is_on_side_a() {
        let t = expanded("line = { down = \"8Mbit\", up = \"1Mbit\", at = \"isp\" }");
        // The downlink leaves toward the line (side a): the classful egress tree.
        assert!(t["to_a"].get("classifier").is_some());
        assert_eq!(
            t["to_a"]["qdisc"]["classes"][0]["rate"].as_str(),
            Some("7600000bit")
        );
        // The uplink comes off the line: ingress, fair between the sending home hosts.
        assert_eq!(t["to_b"]["qdisc"]["ingress"].as_bool(), Some(true));
        assert_eq!(
            t["to_b"]["qdisc"]["classes"][0]["queue"]["hosts"].as_str(),
            Some("src")
        );
        build(&t);
    }

    #[test]
    fn explicit_parts_replace_the_expansion() {
        let t = expanded(
            "line = { down = \"8Mbit\", up = \"512kbit\" }\n\
             rewrite = [{ kind = \"set_dscp\", dscp = 8 }]\n\
             [to_b]\nqdisc = { kind = \"fifo\", limit = \"50p\" }\n",
        );
        assert_eq!(t["to_b"]["qdisc"]["kind"].as_str(), Some("fifo"));
        assert!(t["to_b"].get("classifier").is_some(), "the rest stays");
        assert_eq!(t["to_a"]["qdisc"]["kind"].as_str(), Some("htb"));
        assert!(t.get("rewrite").is_some());
        build(&t);
    }

    #[test]
    fn errors_name_the_key() {
        let e = |src: &str| {
            let mut t: Table = src.parse().unwrap();
            expand(&mut t).unwrap_err().to_string()
        };
        assert!(
            e("line = { down = \"8Mbit\" }").contains("up"),
            "missing up"
        );
        let m = e("line = { down = \"8Mbit\", up = \"1Mbit\", upp = 1 }");
        assert!(m.starts_with("line:") && m.contains("upp"), "{m}");
        let m = e("line = { down = \"0bit\", up = \"1Mbit\" }");
        assert!(m.starts_with("line.down:"), "{m}");
        let m = e("line = { down = \"8Mbit\", up = \"1Mbit\", up_fraction = 1.5 }");
        assert!(m.starts_with("line.up_fraction:"), "{m}");
        let m = e("line = { down = \"8Mbit\", up = \"1Mbit\", linklayer = \"atmm\" }");
        assert!(m.contains("atmm"), "{m}");
        let mut t: Table = "to_b = 1".parse().unwrap();
        assert!(!expand(&mut t).unwrap(), "no line: untouched");
    }
}
