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
