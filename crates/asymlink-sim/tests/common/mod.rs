//! Helpers shared by the simulator's integration tests.

use asymlink_sim::results::{ColumnData, Results};
use asymlink_sim::{RunOptions, Simulation};

/// Run a scenario to its end, check conservation, and return its results.
pub fn run(src: &str) -> Results {
    let mut sim =
        Simulation::from_toml(src, RunOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    sim.run();
    sim.check_conservation().unwrap();
    sim.results()
}

/// Column `col` of `table` at the row whose `key_col` is `key`.
pub fn value(r: &Results, table: &str, key_col: &str, key: &str, col: &str) -> f64 {
    let t = r.table(table).unwrap();
    let ColumnData::Str(names) = t.column(key_col).unwrap() else {
        panic!("{table}.{key_col} is not a text column")
    };
    let i = names
        .iter()
        .position(|n| n == key)
        .unwrap_or_else(|| panic!("no {key} in {table}: {names:?}"));
    match t.column(col).unwrap() {
        ColumnData::F64(v) => v[i],
        ColumnData::I64(v) => v[i] as f64,
        ColumnData::Str(_) => panic!("{table}.{col} is not numeric"),
    }
}

/// Goodput of `flow` in bit/s between the monitor samples nearest `from` and `to` seconds
/// (from the `flows` table's `bytes_delivered`).
#[allow(dead_code)] // each test binary compiles this module; not all use this helper
pub fn goodput_between(r: &Results, flow: &str, from: f64, to: f64) -> f64 {
    let t = r.table("flows").unwrap();
    let (ColumnData::F64(at), ColumnData::Str(names), ColumnData::I64(bytes)) = (
        t.column("t").unwrap(),
        t.column("flow").unwrap(),
        t.column("bytes_delivered").unwrap(),
    ) else {
        panic!("flows table columns")
    };
    let rows: Vec<(f64, i64)> = (0..at.len())
        .filter(|&i| names[i] == flow)
        .map(|i| (at[i], bytes[i]))
        .collect();
    let near = |x: f64| {
        *rows
            .iter()
            .min_by(|a, b| (a.0 - x).abs().total_cmp(&(b.0 - x).abs()))
            .unwrap_or_else(|| panic!("no samples of {flow}"))
    };
    let ((t0, b0), (t1, b1)) = (near(from), near(to));
    (b1 - b0) as f64 * 8.0 / (t1 - t0)
}
