//! Partitioned runs: the nodes divided between threads, packets handed over at the links
//! between them.

use asymlink_sim::results::{ColumnData, Results};
use asymlink_sim::{RunOptions, Simulation};

fn build(src: &str, threads: usize) -> Simulation {
    let opts = RunOptions {
        threads,
        ..RunOptions::default()
    };
    Simulation::from_toml(src, opts).unwrap_or_else(|e| panic!("{e}"))
}

fn run(src: &str, threads: usize) -> (Results, Simulation) {
    let mut sim = build(src, threads);
    sim.run();
    sim.check_conservation().unwrap();
    (sim.results(), sim)
}

fn column<'a>(r: &'a Results, table: &str, col: &str) -> &'a ColumnData {
    r.table(table)
        .unwrap_or_else(|| panic!("no table {table}"))
        .column(col)
        .unwrap_or_else(|| panic!("no column {table}.{col}"))
}

/// One bulk transfer across two routers: the hosts run in one world, the routers in the
/// other.
const CHAIN: &str = r#"
name = "chain"
duration = "6s"
seed = 3
nodes = [
    { name = "a" },
    { name = "r1", kind = "router" },
    { name = "r2", kind = "router" },
    { name = "b" },
]
[[links]]
a = "a"
b = "r1"
rate = "100Mbit"
delay = "5ms"
[[links]]
a = "r1"
b = "r2"
delay = "10ms"
[links.to_b]
rate = "10Mbit"
queue = { kind = "fifo", limit = "50p" }
[links.to_a]
rate = "1Mbit"
[[links]]
a = "r2"
b = "b"
rate = "100Mbit"
delay = "5ms"
[[flows]]
name = "bulk"
from = "a"
to = "b"
[flows.app]
kind = "bulk"
[[flows]]
name = "up"
from = "b"
to = "a"
start = "1s"
[flows.app]
kind = "bulk"
[monitor]
interval = "100ms"
queues = true
links = true
events = true
"#;

/// Lines behind a DSLAM, each with a home router whose middlebox runs line mode, and
/// servers behind a core router.
fn access(lines: usize) -> String {
    let mut s = String::from(
        "name = \"access\"\nduration = \"4s\"\nseed = 7\ntcp = \"linux\"\nnodes = [\n\
         { name = \"core\", kind = \"router\" },\n{ name = \"dslam\", kind = \"router\" },\n\
         { name = \"srv0\" },\n{ name = \"srv1\" },\n",
    );
    for i in 0..lines {
        s += &format!("{{ name = \"home{i}\", kind = \"router\" }},\n{{ name = \"sub{i}\" }},\n");
    }
    s += "]\n[[links]]\nname = \"backhaul\"\na = \"core\"\nb = \"dslam\"\nrate = \"1Gbit\"\n\
          delay = \"2ms\"\n";
    for j in 0..2 {
        s += &format!(
            "[[links]]\nname = \"srv{j}\"\na = \"srv{j}\"\nb = \"core\"\nrate = \"1Gbit\"\n\
             delay = \"10ms\"\n"
        );
    }
    for i in 0..lines {
        s += &format!(
            "[[links]]\nname = \"lan{i}\"\na = \"sub{i}\"\nb = \"home{i}\"\nrate = \"1Gbit\"\n\
             delay = \"0.1ms\"\n[[links]]\nname = \"line{i}\"\na = \"home{i}\"\nb = \"dslam\"\n\
             delay = \"1ms\"\n[links.to_b]\nrate = \"1Mbit\"\n[links.to_a]\nrate = \"8Mbit\"\n\
             queue = {{ kind = \"fifo\", limit = \"100p\" }}\n"
        );
    }
    for i in 0..lines {
        s += &format!(
            "[[middleboxes]]\nnode = \"home{i}\"\na = \"lan{i}\"\nb = \"line{i}\"\n\
             [middleboxes.line]\ndown = \"8Mbit\"\nup = \"1Mbit\"\n"
        );
    }
    for i in 0..lines {
        let srv = i % 2;
        s += &format!(
            "[[flows]]\nname = \"dl{i}\"\nfrom = \"srv{srv}\"\nto = \"sub{i}\"\n\
             start = \"{}ms\"\n[flows.app]\nkind = \"bulk\"\n\
             [[flows]]\nname = \"ul{i}\"\nfrom = \"sub{i}\"\nto = \"srv{srv}\"\n\
             start = \"{}ms\"\n[flows.app]\nkind = \"bulk\"\n",
            37 * i % 500,
            500 + 53 * i % 700
        );
    }
    s += "[monitor]\ninterval = \"250ms\"\nqueues = true\nlinks = true\nevents = true\n";
    s
}

#[test]
fn a_chain_run_on_two_threads_gives_the_one_thread_results() {
    let (one, _) = run(CHAIN, 1);
    let (two, sim) = run(CHAIN, 2);
    assert_eq!(sim.threads(), 2);
    assert_eq!(two.threads, 2);
    assert_eq!(two.late_handovers, 0);
    assert_eq!(one.packet_hops, two.packet_hops);
    // The same transmissions, so the same flows and queues, to the byte.
    for (table, cols) in [
        (
            "flow_summary",
            &["bytes_delivered", "retransmits", "timeouts", "bytes_sent"][..],
        ),
        ("queue_summary", &["dropped", "dequeued", "tx_bytes"][..]),
    ] {
        for c in cols {
            assert_eq!(
                column(&one, table, c),
                column(&two, table, c),
                "{table}.{c}"
            );
        }
    }
    // The series: the same rows (sampled before the events of their instant).
    for (table, c) in [("queues", "packets"), ("links", "tx_bytes")] {
        let (a, b) = (column(&one, table, c), column(&two, table, c));
        assert_eq!(a.len(), b.len(), "{table}.{c}");
    }
    let drops = |r: &Results| column(r, "events", "t").len();
    assert!(drops(&one) > 0, "the 50-packet queue overflows");
    assert_eq!(drops(&one), drops(&two));
}

#[test]
fn a_partitioned_access_network_is_deterministic_and_close_to_one_thread() {
    let src = access(12);
    let (a, sim) = run(&src, 2);
    assert_eq!(sim.threads(), 2);
    assert_eq!(a.late_handovers, 0);
    let t = sim.thread_times();
    assert_eq!(t.len(), 2);
    let (b, _) = run(&src, 2);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.packet_hops, b.packet_hops);
    assert_eq!(
        column(&a, "flow_summary", "bytes_delivered"),
        column(&b, "flow_summary", "bytes_delivered")
    );
    let (one, _) = run(&src, 1);
    assert_ne!(one.trace_hash, a.trace_hash, "its own trace");
    // Every line's download and upload carry what they carry with one thread, within a
    // few percent (events of the two worlds at one instant are ordered differently).
    let ColumnData::I64(d1) = column(&one, "flow_summary", "bytes_delivered") else {
        panic!()
    };
    let ColumnData::I64(d2) = column(&a, "flow_summary", "bytes_delivered") else {
        panic!()
    };
    let (s1, s2): (i64, i64) = (d1.iter().sum(), d2.iter().sum());
    assert!(s1 > 10_000_000, "{s1}");
    assert!((s1 - s2).abs() * 100 < s1, "{s1} vs {s2}");
    for (x, y) in d1.iter().zip(d2) {
        assert!((x - y).abs() * 10 < *x.max(y), "{d1:?} vs {d2:?}");
    }
}

#[test]
fn results_in_the_middle_of_a_partitioned_run_leave_it_as_it_was() {
    let src = access(6);
    let (whole, _) = run(&src, 2);
    let mut sim = build(&src, 2);
    for step in 1..8 {
        sim.run_until(asymlink_core::time::Instant::from_nanos(step * 500_000_000));
        let r = sim.results();
        assert!(r.duration_s > 0.0);
        sim.check_conservation().unwrap();
    }
    sim.run();
    let r = sim.results();
    assert_eq!(r.trace_hash, whole.trace_hash);
    assert_eq!(r.packet_hops, whole.packet_hops);
    assert_eq!(column(&r, "events", "t"), column(&whole, "events", "t"));
    assert_eq!(
        column(&r, "queues", "packets"),
        column(&whole, "queues", "packets")
    );
}

#[test]
fn nodes_joined_by_links_without_delay_stay_in_one_world() {
    let zero = CHAIN.replace("delay = \"5ms\"", "delay = \"0ms\"");
    let (r, sim) = run(&zero, 2);
    assert_eq!(
        sim.threads(),
        1,
        "every router is joined to a host without delay"
    );
    let (one, _) = run(&zero, 1);
    assert_eq!(r.trace_hash, one.trace_hash);
}

#[test]
fn too_many_threads_are_refused() {
    let Err(e) = Simulation::from_toml(
        CHAIN,
        RunOptions {
            threads: 65,
            ..RunOptions::default()
        },
    ) else {
        panic!("65 threads were accepted")
    };
    assert_eq!(e.to_string(), "threads: at most 64 threads, got 65");
}

#[test]
fn captures_need_one_thread() {
    let src = format!("{CHAIN}capture = [{{ link = \"a-r1\", file = \"a.pcap\" }}]\n");
    let opts = RunOptions {
        threads: 2,
        out_dir: Some(std::env::temp_dir()),
        ..RunOptions::default()
    };
    let Err(e) = Simulation::from_toml(&src, opts) else {
        panic!("captures were accepted with two threads")
    };
    assert!(e.to_string().contains("monitor.capture"), "{e}");
}

#[test]
fn the_threads_timing_does_not_change_a_partitioned_run() {
    // Several runs at once, more threads than cores: each world waits on the others at
    // different moments in each run, and the traces must not care.
    let src = access(8).replace("duration = \"4s\"", "duration = \"2s\"");
    for threads in [2, 3] {
        let hashes: Vec<(u64, u64, u64)> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        let (r, sim) = run(&src, threads);
                        assert_eq!(sim.threads(), threads);
                        (r.trace_hash, r.packet_hops, r.late_handovers)
                    })
                })
                .collect();
            runs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            hashes.iter().all(|h| *h == hashes[0]),
            "{threads} threads: {hashes:?}"
        );
        assert_eq!(hashes[0].2, 0);
    }
}

/// A conditioner that panics on its first call.
struct Fails;

impl asymlink_sim::tcp::Conditioner for Fails {
    fn admit(
        &mut self,
        _now: asymlink_core::time::Instant,
        _conn: asymlink_sim::packet::ConnId,
        _ip_len: u32,
    ) -> asymlink_sim::tcp::Admit {
        panic!("the conditioner failed")
    }
}

#[test]
fn a_panic_in_one_world_ends_the_run_instead_of_hanging_the_others() {
    // The panic happens in world 0 (the hosts'); world 1 must stop waiting for its clock
    // and the panic reach the caller, as with one thread.
    let mut sim = build(CHAIN, 2);
    sim.set_conditioner("a", Box::new(Fails)).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run()));
    let msg = r.expect_err("the run panicked");
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"the conditioner failed"));
}
