//! Policy filters: ⟨source address, destination address, source port, destination port⟩
//! with wildcards (the paper's `ANY_ADDR` / `ANY_PORT`).
//!
//! "Source" is the traffic source the policy controls: the server's own address and port
//! for a conditioner at the server's TCP output, the packet's source for an egress qdisc.
//! A missing field, or `"*"`, matches anything; addresses may be prefixes
//! (`"10.1.0.0/16"`), ports ranges (`"8000-8080"`).
//!
//! ```toml
//! filter = { src = "192.0.2.10", src_port = 80 }          # <a.b.c.d, 80, ANY, ANY>
//! filter = { dst = "198.51.100.0/24", dst_port = "*" }
//! ```

use crate::classify::{Cidr, PortRange};
use core::net::IpAddr;
use serde::de::{self, Deserializer};
use serde::Deserialize;

/// The four fields a filter looks at, oriented from the controlled source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowTuple {
    /// The controlled end's address (the server).
    pub src: IpAddr,
    /// The controlled end's port.
    pub src_port: u16,
    /// The far end's address (the client).
    pub dst: IpAddr,
    /// The far end's port.
    pub dst_port: u16,
}

/// A filter field: a value or the wildcard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Field<T> {
    /// Matches anything (`"*"` or absent).
    #[default]
    Any,
    /// Matches this value.
    Is(T),
}

impl<'de, T> Deserialize<'de> for Field<T>
where
    T: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(core::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for V<T> {
            type Value = Field<T>;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("a value or \"*\" (any)")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Field<T>, E> {
                if s.trim() == "*" {
                    return Ok(Field::Any);
                }
                T::deserialize(de::value::StrDeserializer::<E>::new(s)).map(Field::Is)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Field<T>, E> {
                T::deserialize(de::value::I64Deserializer::<E>::new(n)).map(Field::Is)
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Field<T>, E> {
                T::deserialize(de::value::U64Deserializer::<E>::new(n)).map(Field::Is)
            }
        }
        d.deserialize_any(V(core::marker::PhantomData))
    }
}

/// A filter: each field matches or is a wildcard.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Source address or prefix (the controlled end).
    #[serde(default)]
    pub src: Field<Cidr>,
    /// Destination address or prefix.
    #[serde(default)]
    pub dst: Field<Cidr>,
    /// Source port or range.
    #[serde(default)]
    pub src_port: Field<PortRange>,
    /// Destination port or range.
    #[serde(default)]
    pub dst_port: Field<PortRange>,
}

impl Filter {
    /// The filter that matches everything.
    pub const ANY: Filter = Filter {
        src: Field::Any,
        dst: Field::Any,
        src_port: Field::Any,
        dst_port: Field::Any,
    };

    /// Whether `t` matches every field.
    pub fn matches(&self, t: &FlowTuple) -> bool {
        let addr = |f: &Field<Cidr>, a: IpAddr| match f {
            Field::Any => true,
            Field::Is(c) => c.contains(a),
        };
        let port = |f: &Field<PortRange>, p: u16| match f {
            Field::Any => true,
            Field::Is(r) => r.contains(p),
        };
        addr(&self.src, t.src)
            && addr(&self.dst, t.dst)
            && port(&self.src_port, t.src_port)
            && port(&self.dst_port, t.dst_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(src: &str, sp: u16, dst: &str, dp: u16) -> FlowTuple {
        FlowTuple {
            src: src.parse().unwrap(),
            src_port: sp,
            dst: dst.parse().unwrap(),
            dst_port: dp,
        }
    }

    #[test]
    fn wildcards_prefixes_and_ranges() {
        let f: Filter = toml::from_str("src = \"128.34.16.8\"\nsrc_port = 80").unwrap();
        assert!(f.matches(&tuple("128.34.16.8", 80, "141.213.8.108", 40001)));
        assert!(!f.matches(&tuple("128.34.16.8", 81, "141.213.8.108", 40001)));
        assert!(!f.matches(&tuple("128.34.16.4", 80, "141.213.8.108", 40001)));
        let f: Filter =
            toml::from_str("src = \"*\"\ndst = \"141.213.0.0/16\"\ndst_port = \"40000-40010\"")
                .unwrap();
        assert!(f.matches(&tuple("1.2.3.4", 1, "141.213.8.108", 40001)));
        assert!(!f.matches(&tuple("1.2.3.4", 1, "141.214.8.108", 40001)));
        assert!(!f.matches(&tuple("1.2.3.4", 1, "141.213.8.108", 39999)));
        assert!(Filter::ANY.matches(&tuple("::1", 1, "::2", 2)));
        assert_eq!(Filter::default(), Filter::ANY);
    }

    #[test]
    fn bad_fields_are_named() {
        let e = toml::from_str::<Filter>("src = \"10.0.0.300\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("10.0.0.300"), "{e}");
        let e = toml::from_str::<Filter>("sport = 80")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sport"), "{e}");
        let e = toml::from_str::<Filter>("dst_port = \"90-80\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("90-80"), "{e}");
    }
}
