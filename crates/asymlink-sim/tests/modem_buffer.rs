//! A link's modem buffer: the drop-tail FIFO between the discipline and the line.

use asymlink_sim::results::ColumnData;
use asymlink_sim::{RunOptions, Simulation};

/// 2 Mbit/s of 1000-byte datagrams into a 1 Mbit/s line for 2 s.
fn run(line: &str) -> Simulation {
    let src = format!(
        r#"
duration = "2s"
[[nodes]]
name = "s"
[[nodes]]
name = "r"
kind = "router"
[[nodes]]
name = "c"
[[links]]
name = "lan"
a = "s"
b = "r"
rate = "100Mbit"
[[links]]
name = "line"
a = "r"
b = "c"
rate = "1Mbit"
{line}
[[flows]]
from = "s"
to = "c"
app = {{ kind = "cbr", rate = "2Mbit", size = "1000B" }}
"#
    );
    let mut sim = Simulation::from_toml(&src, RunOptions::default()).unwrap();
    sim.run();
    sim.check_conservation().unwrap();
    sim
}

/// The value of `col` in the row of `table` whose `key_col` is `key`.
fn cell(sim: &Simulation, table: &str, key_col: &str, key: &str, col: &str) -> i64 {
    let r = sim.results();
    let t = r.table(table).unwrap();
    let ColumnData::Str(keys) = t.column(key_col).unwrap() else {
        panic!()
    };
    let i = keys.iter().position(|k| k == key).unwrap();
    match t.column(col).unwrap() {
        ColumnData::I64(v) => v[i],
        c => panic!("{c:?}"),
    }
}

#[test]
fn the_modem_buffer_takes_the_queue_and_the_overflow() {
    // A 1000-packet FIFO with a 5-packet modem buffer behind it: the discipline is drained
    // into the modem as fast as packets come, so the FIFO never holds anything and the
    // modem drops what the line cannot carry.
    let sim = run("queue = { kind = \"fifo\", limit = \"1000p\" }\nmodem_buffer = \"5p\"");
    let sent = cell(&sim, "queue_summary", "queue", "line:to_b", "tx_packets");
    let dropped = cell(
        &sim,
        "queue_summary",
        "queue",
        "line:to_b",
        "modem_buffer_full",
    );
    let fifo_drops = cell(
        &sim,
        "queue_summary",
        "queue",
        "line:to_b",
        "dropped_queue_full",
    );
    // 1000-byte IP packets take 8 ms each at 1 Mbit/s: about 250 in 2 s.
    assert!((245..=251).contains(&sent), "{sent} sent");
    assert!(dropped > 200, "{dropped} dropped in the modem");
    assert_eq!(fifo_drops, 0, "the discipline never overflows");
    // Without the modem buffer the same overflow happens in the discipline.
    let sim = run("queue = { kind = \"fifo\", limit = \"5p\" }");
    let fifo_drops = cell(
        &sim,
        "queue_summary",
        "queue",
        "line:to_b",
        "dropped_queue_full",
    );
    let dropped = cell(
        &sim,
        "queue_summary",
        "queue",
        "line:to_b",
        "modem_buffer_full",
    );
    assert!(fifo_drops > 200, "{fifo_drops}");
    assert_eq!(dropped, 0);
}
