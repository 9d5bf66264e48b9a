//! Configuration errors and the one way TOML becomes a typed configuration.
//!
//! Every configuration in asymlink — a simulator scenario, the live box's file, a queue
//! discipline, a unit such as `512kbit` — reports a problem as one [`ConfigError`]: the
//! key path of the offending value (`links[1].to_a.rate`) and what is wrong. A component
//! validates its own table and names keys relative to it; whoever embeds it places the
//! error with [`ConfigError::within`]. [`from_toml`] deserialises with key paths and turns
//! byte offsets into line numbers, so every error is one line naming the key:
//!
//! ```text
//! links[1].to_a.rate: rate '100' has no unit; write e.g. '512kbit' (line 14)
//! ```

use core::fmt;
use serde::de::DeserializeOwned;

/// A configuration error: where (the key path; empty for the whole document or a bare
/// value) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The key path, e.g. `links[2].rate` or `to_b.qdisc.bands[0].classes`.
    pub path: String,
    /// What is wrong.
    pub msg: String,
}

impl ConfigError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, msg: impl Into<String>) -> ConfigError {
        ConfigError {
            path: path.into(),
            msg: msg.into(),
        }
    }

    /// An error about a value whose key is not known here (a unit that does not parse);
    /// the caller places it with [`ConfigError::within`].
    pub fn value(msg: impl Into<String>) -> ConfigError {
        ConfigError::new("", msg)
    }

    /// The same error, its path seen from the table that contains `prefix`:
    /// `ConfigError::new("rate", m).within("links[1].to_a")` is at `links[1].to_a.rate`.
    pub fn within(mut self, prefix: impl AsRef<str>) -> ConfigError {
        self.path = join_path(prefix.as_ref(), &self.path);
        self
    }

    /// The same error with the line of its key in `src` appended (`(line 14)`), unless it
    /// already names a line or the key is not found.
    pub fn with_line(mut self, src: &str) -> ConfigError {
        if !self.path.is_empty() && !self.msg.contains("(line ") {
            if let Some(line) = line_of_key(src, &self.path) {
                self.msg = format!("{} (line {line})", self.msg);
            }
        }
        self
    }
}

/// `prefix.path`, written as errors write paths (`a[1].b`).
fn join_path(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.msg)
        } else {
            write!(f, "{}: {}", self.path, self.msg)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Deserialise TOML text into `T`. A syntax error names its line; a type error names the
/// key path (`links[1].to_a.rate`) and the line of the value.
pub fn from_toml<T: DeserializeOwned>(src: &str) -> Result<T, ConfigError> {
    let at_line = |msg: &str, span: Option<core::ops::Range<usize>>| match span {
        Some(s) => format!(
            "{} (line {})",
            msg.trim_end(),
            src[..s.start.min(src.len())].matches('\n').count() + 1
        ),
        None => msg.trim_end().to_string(),
    };
    let de = toml::Deserializer::parse(src)
        .map_err(|e| ConfigError::value(at_line(e.message(), e.span())))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let path = if path == "." { String::new() } else { path };
        let refined = refine_path(src, path.clone(), inner.message());
        // Serde's span is the table's when the key was found inside it: name the key's line.
        let msg = if refined == path {
            at_line(inner.message(), inner.span())
        } else {
            inner.message().trim_end().to_string()
        };
        ConfigError::new(refined, msg).with_line(src)
    })
}

/// Deserialise `table`, parsed from `src` and then rewritten (a `line` expanded): errors
/// name the key path, and the line where that key is written in `src` if it is.
pub fn from_toml_table<T: DeserializeOwned>(
    table: toml::Table,
    src: &str,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let msg = e.into_inner().message().trim().to_string();
        ConfigError::new(refine_path(src, path, &msg), msg).with_line(src)
    })
}

/// Inside a tagged table (`{ kind = "...", ... }`) serde reports errors at the table; name
/// the key itself when the message says which: an unknown field, or an unknown variant
/// written as the value of one key of the table.
fn refine_path(src: &str, path: String, msg: &str) -> String {
    let quoted = |prefix: &str| {
        let rest = &msg[msg.find(prefix)? + prefix.len()..];
        Some(rest[..rest.find('`')?].to_string())
    };
    if let Some(field) = quoted("unknown field `") {
        let candidate = join_path(&path, &field);
        if matches!(span_of_key(src, &candidate), Some((_, true))) {
            return candidate;
        }
    } else if let Some(variant) = quoted("unknown variant `") {
        if let Some(key) = key_with_string(src, &path, &variant) {
            return join_path(&path, &key);
        }
    } else if let Some(key) = key_with_quoted_value(src, &path, msg) {
        return join_path(&path, &key);
    }
    path
}

/// A bad value inside a tagged table: serde names the table, the message quotes the value
/// (`rate '100' has no unit`, `invalid type: string "x"`, ``integer `5` ``). The key under
/// the table at `path` (at any depth) holding the first quoted value that some key holds,
/// if exactly one key holds it.
fn key_with_quoted_value(src: &str, path: &str, msg: &str) -> Option<String> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(src).ok()?;
    let (table @ DeValue::Table(_), _, true) = lookup(doc.get_ref(), path)? else {
        return None;
    };
    let mut leaves = Vec::new();
    collect_leaves(table, String::new(), &mut leaves);
    quoted_values(msg).into_iter().find_map(|q| {
        let mut hits = leaves.iter().filter(|(_, v)| *v == q);
        match (hits.next(), hits.next()) {
            (Some((key, _)), None) => Some(Some(key.clone())),
            (Some(_), Some(_)) => Some(None),
            _ => None,
        }
    })?
}

/// Every scalar under `v` with its key path relative to `v`, as text.
fn collect_leaves(v: &toml::de::DeValue<'_>, at: String, out: &mut Vec<(String, String)>) {
    use toml::de::DeValue;
    let text = match v {
        DeValue::Table(t) => {
            for (k, v) in t.iter() {
                collect_leaves(v.get_ref(), join_path(&at, k.get_ref()), out);
            }
            return;
        }
        DeValue::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                collect_leaves(v.get_ref(), format!("{at}[{i}]"), out);
            }
            return;
        }
        DeValue::String(s) => s.to_string(),
        DeValue::Integer(i) => i.as_str().to_string(),
        DeValue::Float(f) => f.as_str().to_string(),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(_) => return,
    };
    out.push((at, text));
}

/// The values a message quotes, in order: between '…', "…" or `…`.
fn quoted_values(msg: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = msg;
    while let Some(i) = rest.find(['\'', '"', '`']) {
        let q = rest[i..].chars().next().unwrap_or('"');
        let after = &rest[i + 1..];
        let Some(j) = after.find(q) else { break };
        out.push(&after[..j]);
        rest = &after[j + 1..];
    }
    out
}

/// The key of the table at `path` whose value is the string `value`.
fn key_with_string(src: &str, path: &str, value: &str) -> Option<String> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(src).ok()?;
    let (DeValue::Table(t), _, true) = lookup(doc.get_ref(), path)? else {
        return None;
    };
    t.iter().find_map(|(k, v)| match v.get_ref() {
        DeValue::String(s) if s.as_ref() == value => Some(k.get_ref().to_string()),
        _ => None,
    })
}

/// The segments of a key path written as in errors (`links[1].to_a.rate`) or dotted
/// (`links.1.to_a.rate`): names and array indices.
fn segments(key: &str) -> Vec<Result<usize, &str>> {
    let mut parts = Vec::new();
    for seg in key.split('.') {
        let (name, rest) = seg.split_once('[').unwrap_or((seg, ""));
        if let Ok(i) = name.parse::<usize>() {
            parts.push(Ok(i));
        } else if !name.is_empty() {
            parts.push(Err(name));
        }
        for idx in rest.split('[') {
            if let Ok(i) = idx.trim_end_matches(']').parse::<usize>() {
                parts.push(Ok(i));
            }
        }
    }
    parts
}

/// The value at `key` under `doc` (or the deepest one on the path that exists), its span,
/// and `true` when it is the value at `key` itself.
fn lookup<'a, 'd>(
    doc: &'a toml::de::DeTable<'d>,
    key: &str,
) -> Option<(&'a toml::de::DeValue<'d>, core::ops::Range<usize>, bool)> {
    use toml::de::{DeArray, DeValue};
    let parts = segments(key);
    let total = parts.len();
    let mut found = None;
    let mut table = Some(doc);
    let mut array: Option<&'a DeArray<'d>> = None;
    for (depth, part) in parts.into_iter().enumerate() {
        let value = match (part, table, array) {
            (Err(name), Some(t), _) => t.iter().find(|(k, _)| k.get_ref() == name).map(|(_, v)| v),
            (Ok(i), _, Some(a)) => a.get(i),
            // An array of named tables (links, nodes, flows) is also indexed by name.
            (Err(name), _, Some(a)) => a.iter().find(|item| named(item.get_ref(), name)),
            _ => None,
        };
        let Some(value) = value else { break };
        found = Some((value.get_ref(), value.span(), depth + 1 == total));
        (table, array) = match value.get_ref() {
            DeValue::Table(t) => (Some(t), None),
            DeValue::Array(a) => (None, Some(a)),
            _ => (None, None),
        };
    }
    found
}

/// Whether `v` is a table with `name = "<name>"`.
fn named(v: &toml::de::DeValue<'_>, name: &str) -> bool {
    use toml::de::DeValue;
    let DeValue::Table(t) = v else { return false };
    t.iter().any(|(k, v)| {
        k.get_ref() == "name" && matches!(v.get_ref(), DeValue::String(s) if s.as_ref() == name)
    })
}

/// Where the value at `key` is written in the TOML `src`: its byte range, and whether that
/// is the value itself (`true`) or the deepest table on the path that exists (`false`: a
/// missing key is reported where it belongs). The key path is written as in errors
/// (`links[1].to_a.rate`) or dotted (`links.1.to_a.rate`); an element of an array of
/// named tables may be addressed by its name (`links.access.to_a.rate`). `None` if the
/// text does not parse or the path does not start in it.
pub fn span_of_key(src: &str, key: &str) -> Option<(core::ops::Range<usize>, bool)> {
    let doc = toml::de::DeTable::parse(src).ok()?;
    lookup(doc.get_ref(), key).map(|(_, span, exact)| (span, exact))
}

/// The line (1-based) of the value at `key` in `src`, or of the deepest table on the path
/// that exists (see [`span_of_key`]).
pub fn line_of_key(src: &str, key: &str) -> Option<usize> {
    let (span, _) = span_of_key(src, key)?;
    let start = span.start.min(src.len());
    Some(src[..start].matches('\n').count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Rate;
    use serde::Deserialize;

    #[test]
    fn within_joins_paths_as_errors_write_them() {
        let e = ConfigError::new("rate", "must be positive");
        assert_eq!(e.clone().within("links[1].to_a").path, "links[1].to_a.rate");
        assert_eq!(e.clone().within("").path, "rate");
        assert_eq!(
            ConfigError::new("[0].x", "m").within("bands").path,
            "bands[0].x"
        );
        assert_eq!(
            ConfigError::value("m").within("links[0].rate").path,
            "links[0].rate"
        );
        assert_eq!(e.to_string(), "rate: must be positive");
        assert_eq!(ConfigError::value("bad").to_string(), "bad");
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Dir {
        #[allow(dead_code)]
        rate: Rate,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        #[allow(dead_code)]
        links: Vec<Dir>,
    }

    #[test]
    fn from_toml_names_key_and_line() {
        let src = "[[links]]\nrate = \"1Mbit\"\n[[links]]\nrate = \"100\"\n";
        let e = from_toml::<Doc>(src).unwrap_err();
        assert_eq!(e.path, "links[1].rate");
        assert!(
            e.msg.contains("no unit") && e.msg.ends_with("(line 4)"),
            "{e}"
        );
        assert!(!e.to_string().contains('\n'), "{e}");
        let e = from_toml::<Doc>("links = [\n").unwrap_err();
        assert_eq!(e.path, "");
        assert!(e.msg.contains("(line "), "{e}");
        let e = from_toml::<Doc>("[[links]]\nrat = \"1Mbit\"\n").unwrap_err();
        assert!(
            e.path.starts_with("links[0]") && e.msg.contains("rat"),
            "{e}"
        );
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
    #[allow(dead_code)]
    enum App {
        Bulk { bytes: Option<u32> },
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Flows {
        flows: Vec<Flow>,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Flow {
        app: App,
    }

    #[test]
    fn errors_inside_tagged_tables_name_the_key() {
        let e = from_toml::<Flows>("[[flows]]\napp = { kind = \"bulk\", size = 1 }\n").unwrap_err();
        assert_eq!(e.path, "flows[0].app.size", "{e}");
        assert!(e.msg.ends_with("(line 2)"), "{e}");
        let e = from_toml::<Flows>("[[flows]]\n[flows.app]\nkind = \"bulkk\"\n").unwrap_err();
        assert_eq!(e.path, "flows[0].app.kind", "{e}");
        assert!(e.msg.ends_with("(line 3)"), "{e}");
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
    #[allow(dead_code)]
    enum Shaper {
        Tbf { rate: Rate, burst: Option<u32> },
        Prio { bands: Vec<Band> },
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Band {
        qdisc: Shaper,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Queue {
        queue: Shaper,
    }

    #[test]
    fn bad_values_inside_tagged_tables_name_their_key() {
        let e = from_toml::<Queue>("queue = { kind = \"tbf\", rate = \"100\" }\n").unwrap_err();
        assert_eq!(e.path, "queue.rate", "{e}");
        assert!(
            e.msg.contains("no unit") && e.msg.ends_with("(line 1)"),
            "{e}"
        );
        let e = from_toml::<Queue>("[queue]\nkind = \"tbf\"\nrate = \"1Mbit\"\nburst = \"x\"\n")
            .unwrap_err();
        assert_eq!(e.path, "queue.burst", "{e}");
        assert!(e.msg.ends_with("(line 4)"), "{e}");
        let src = "[queue]\nkind = \"prio\"\n[[queue.bands]]\nqdisc = { kind = \"tbf\", rate = \"1Mbit\" }\n\
                   [[queue.bands]]\nqdisc = { kind = \"tbf\", rate = \"2Mbitz\" }\n";
        let e = from_toml::<Queue>(src).unwrap_err();
        assert_eq!(e.path, "queue.bands[1].qdisc.rate", "{e}");
        assert!(e.msg.ends_with("(line 6)"), "{e}");
        // The same bad value under two keys: the table is as precise as it gets.
        let e = from_toml::<Queue>(
            "queue = { kind = \"prio\", bands = [{ qdisc = { kind = \"tbf\", rate = \"9\" } }, \
             { qdisc = { kind = \"tbf\", rate = \"9\" } }] }\n",
        )
        .unwrap_err();
        assert_eq!(e.path, "queue", "{e}");
    }

    #[test]
    fn quoted_values_in_order() {
        assert_eq!(
            quoted_values("rate '100' has no unit; write e.g. '512kbit'"),
            ["100", "512kbit"]
        );
        assert_eq!(
            quoted_values("invalid type: string \"x\", expected u32"),
            ["x"]
        );
        assert_eq!(quoted_values("invalid value: integer `5`"), ["5"]);
        assert!(quoted_values("nothing quoted").is_empty());
    }

    #[test]
    fn with_line_finds_the_key() {
        let src = "a = 1\n[t]\nb = [1, 2]\n";
        let e = ConfigError::new("t.b[1]", "too big").with_line(src);
        assert_eq!(e.msg, "too big (line 3)");
        assert_eq!(line_of_key(src, "t.b"), Some(3));
        assert_eq!(line_of_key(src, "t.missing"), Some(2));
        let src = "[[links]]\nname = \"up\"\nrate = \"1Mbit\"\n[[links]]\nname = \"down\"\nrate = \"8Mbit\"\n";
        let (span, exact) = span_of_key(src, "links.down.rate").unwrap();
        assert!(exact);
        assert_eq!(&src[span], "\"8Mbit\"");
        assert_eq!(line_of_key(src, "links.1.rate"), Some(6));
    }
}
