//! The configuration vocabulary of aggregate rate control, shared by the simulator's
//! `[nodes.conditioner]` and the live box's `aggregate` qdisc.
//!
//! ```toml
//! timer = "15ms"          # the shaping timer; "0s" = wake each waiting sender exactly
//! triggers = "own"        # or "aggregate" (§6.3)
//! [[policies]]
//! name = "site"
//! filter = { src = "192.0.2.10", src_port = 80 }
//! profile = { depth = "20KB", rate = "500kbit", peak = "10Mbit", max_packet = "1040B" }
//! action = { kind = "shape" }            # police_mark / police_drop
//! scheme = { kind = "logical", depth = "rtt" }
//! ```

use super::filter::Filter;
use crate::config::ConfigError;
use crate::units::{Bytes, Rate, Span};
use serde::Deserialize;

/// Which events serve the senders waiting for tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Triggers {
    /// The shaping timer, plus each connection's own output routine (an ACK or an
    /// application write on that connection checks whether *it* may send): the paper's
    /// simulator (§4.1) and its single-connection triggers (§6.2). A connection asking
    /// for itself is served whenever the tokens allow, ahead of earlier waiters.
    #[default]
    Own,
    /// Also every event on any connection of the aggregate — an ACK on a connection with
    /// nothing to send, a duplicate ACK, an application write into a closed window, a new
    /// connection (§6.3) — serves the waiters, and every service follows the policy's order
    /// (a connection asking for itself does not overtake earlier waiters).
    Aggregate,
}

/// How the bucket depth is shared among connections (partitioned and logical schemes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DepthShare {
    /// b_i = B / n.
    #[default]
    Equal,
    /// b_i = B · rtt_i / Σ rtt (§4.2.1: "a bucket depth proportionate to its rtt value"),
    /// from each connection's smallest RTT estimate.
    Rtt,
}

/// The order in which a common bucket serves its waiting connections (§4.2.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// A scan of the connection list from its head (join order).
    Sequential,
    /// First come, first served: by the time a connection became non-compliant.
    #[default]
    Fcfs,
    /// Least recently used: the connection that was least recently given tokens first.
    Lru,
}

/// How the aggregate's tokens are shared among its connections (§4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SchemeConfig {
    /// §4.2.1: one bucket per connection, ⟨r_m/n, b_i⟩, nothing shared.
    Partitioned {
        /// Depth share.
        #[serde(default)]
        depth: DepthShare,
    },
    /// §4.2.2: one bucket ⟨r_m, B⟩ for all, served in `order`.
    Common {
        /// Service order at the shaping timer.
        #[serde(default)]
        order: Order,
    },
    /// §4.2.3: a common bucket with logical partitions ⟨r_m/n, b_i⟩; what a full
    /// partition cannot hold is shared equally among the partitions that are not full.
    Logical {
        /// Depth share (the paper weighs by RTT).
        #[serde(default = "rtt_share")]
        depth: DepthShare,
    },
}

fn rtt_share() -> DepthShare {
    DepthShare::Rtt
}

/// What happens to a packet, in profile and out of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ActionConfig {
    /// Delay out-of-profile packets until they conform (optionally marking what is sent).
    Shape {
        /// DSCP set on every packet sent (absent: left as is).
        #[serde(default)]
        dscp: Option<u8>,
    },
    /// In-profile packets are marked `dscp`; out-of-profile ones go as `out_dscp`.
    PoliceMark {
        /// DSCP of in-profile packets (default 10, AF11).
        #[serde(default = "af11")]
        dscp: u8,
        /// DSCP of out-of-profile packets (default 0, best effort).
        #[serde(default)]
        out_dscp: u8,
    },
    /// In-profile packets go (marked `dscp` if set); out-of-profile ones are dropped.
    PoliceDrop {
        /// DSCP set on in-profile packets (absent: left as is).
        #[serde(default)]
        dscp: Option<u8>,
    },
}

fn af11() -> u8 {
    10
}

/// The traffic profile ⟨B, r_m, r_p, L_m⟩.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// B: the aggregate bucket depth.
    pub depth: Bytes,
    /// r_m: the average rate.
    pub rate: Rate,
    /// r_p: the peak rate (a bucket of depth L_m at r_p); absent = no peak limit.
    #[serde(default)]
    pub peak: Option<Rate>,
    /// L_m: the largest packet (IP bytes) the profile admits.
    #[serde(default = "default_max_packet")]
    pub max_packet: Bytes,
}

fn default_max_packet() -> Bytes {
    Bytes(1500)
}

/// One policy: a filter, a profile, an action and a token-sharing scheme.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Name (reports); default `policy<i>`.
    #[serde(default)]
    pub name: Option<String>,
    /// Which connections form the aggregate (default: all).
    #[serde(default)]
    pub filter: Filter,
    /// ⟨B, r_m, r_p, L_m⟩.
    pub profile: ProfileConfig,
    /// Shape or police.
    pub action: ActionConfig,
    /// Token sharing.
    pub scheme: SchemeConfig,
    /// RTT assumed for a connection with no estimate yet (RTT-weighted depths; the live
    /// box, which sees no RTTs, uses it for every connection). Absent: the mean of the known
    /// estimates, or equal shares while none is known.
    #[serde(default)]
    pub default_rtt: Option<Span>,
}

/// Aggregate rate control at a traffic source: policies plus the shaping timer.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerConfig {
    /// The shaping timer interval (one timer for all policies); `"0s"` wakes each waiting
    /// sender at the exact instant it conforms (per-connection fine-grained timers).
    #[serde(default = "default_timer")]
    pub timer: Span,
    /// Which events serve waiting senders.
    #[serde(default)]
    pub triggers: Triggers,
    /// At most this many connections are tracked; further ones are not conditioned
    /// (counted as `untracked`).
    #[serde(default = "default_max_conns")]
    pub max_conns: u32,
    /// The policies, matched in order (the first whose filter matches takes a connection;
    /// connections no filter matches are not conditioned).
    pub policies: Vec<PolicyConfig>,
}

fn default_timer() -> Span {
    Span(core::time::Duration::from_millis(15))
}

fn default_max_conns() -> u32 {
    4096
}

impl ControllerConfig {
    /// Check value ranges; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.timer.0 > core::time::Duration::from_secs(10) {
            return Err(ConfigError::new("timer", "must be at most 10s (0s: exact)"));
        }
        if self.max_conns == 0 {
            return Err(ConfigError::new("max_conns", "must be positive"));
        }
        if self.policies.is_empty() {
            return Err(ConfigError::new("policies", "give at least one policy"));
        }
        for (i, p) in self.policies.iter().enumerate() {
            let key = |k: &str| format!("policies[{i}].{k}");
            let pr = &p.profile;
            if pr.rate.0 == 0 {
                return Err(ConfigError::new(key("profile.rate"), "must be positive"));
            }
            if pr.peak.is_some_and(|r| r.0 == 0) {
                return Err(ConfigError::new(key("profile.peak"), "must be positive"));
            }
            if pr.peak.is_some_and(|r| r < pr.rate) {
                return Err(ConfigError::new(
                    key("profile.peak"),
                    format!(
                        "the peak rate {} is below the average rate {}",
                        pr.peak.unwrap_or_default(),
                        pr.rate
                    ),
                ));
            }
            if !(20..=65_535).contains(&pr.max_packet.0) {
                return Err(ConfigError::new(
                    key("profile.max_packet"),
                    "must be 20B..65535B",
                ));
            }
            if pr.depth.0 < pr.max_packet.0 {
                return Err(ConfigError::new(
                    key("profile.depth"),
                    format!(
                        "the depth {} cannot hold the largest packet {} (max_packet)",
                        pr.depth, pr.max_packet
                    ),
                ));
            }
            if pr.depth.0 > 1_000_000_000_000 {
                return Err(ConfigError::new(
                    key("profile.depth"),
                    "must be at most 1TB",
                ));
            }
            let dscps: &[Option<u8>] = match p.action {
                ActionConfig::Shape { dscp } | ActionConfig::PoliceDrop { dscp } => &[dscp, None],
                ActionConfig::PoliceMark { dscp, out_dscp } => &[Some(dscp), Some(out_dscp)],
            };
            if dscps.iter().flatten().any(|&d| d > 63) {
                return Err(ConfigError::new(key("action.dscp"), "a DSCP is 0..=63"));
            }
            if p.default_rtt.is_some_and(|r| r.0.is_zero()) {
                return Err(ConfigError::new(key("default_rtt"), "must be positive"));
            }
            if p.name.as_deref().is_some_and(str::is_empty) {
                return Err(ConfigError::new(key("name"), "must not be empty"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        timer = "15ms"
        [[policies]]
        filter = { src = "10.0.0.1", src_port = "*" }
        profile = { depth = "20KB", rate = "500kbit", max_packet = "1040B" }
        action = { kind = "shape" }
        scheme = { kind = "common", order = "lru" }
    "#;

    #[test]
    fn parses_with_defaults() {
        let c: ControllerConfig = toml::from_str(GOOD).unwrap();
        c.validate().unwrap();
        assert_eq!(c.triggers, Triggers::Own);
        assert_eq!(
            c.policies[0].scheme,
            SchemeConfig::Common { order: Order::Lru }
        );
        let l: SchemeConfig = toml::from_str("kind = \"logical\"").unwrap();
        assert_eq!(
            l,
            SchemeConfig::Logical {
                depth: DepthShare::Rtt
            }
        );
        let a: ActionConfig = toml::from_str("kind = \"police_mark\"").unwrap();
        assert_eq!(
            a,
            ActionConfig::PoliceMark {
                dscp: 10,
                out_dscp: 0
            }
        );
    }

    #[test]
    fn errors_name_the_key() {
        let bad = GOOD.replace("\"20KB\"", "\"1000B\"");
        let c: ControllerConfig = toml::from_str(&bad).unwrap();
        let e = c.validate().unwrap_err();
        assert_eq!(e.path, "policies[0].profile.depth");
        assert!(e.msg.contains("1040B"), "{e}");
        let e = toml::from_str::<ControllerConfig>(&GOOD.replace("lru", "lifo"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lifo"), "{e}");
        let e = toml::from_str::<ControllerConfig>(&GOOD.replace("order", "ordr"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ordr"), "{e}");
        let e = toml::from_str::<ControllerConfig>(&GOOD.replace("\"500kbit\"", "500000"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no unit"), "{e}");
        let c: ControllerConfig =
            toml::from_str(&GOOD.replace("max_packet", "peak = \"100kbit\", max_packet")).unwrap();
        assert_eq!(c.validate().unwrap_err().path, "policies[0].profile.peak");
        let c: ControllerConfig = toml::from_str("policies = []").unwrap();
        assert_eq!(c.validate().unwrap_err().path, "policies");
    }
}
