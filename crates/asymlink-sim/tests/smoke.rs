use asymlink_sim::{RunOptions, Simulation};

#[test]
fn smoke() {
    let src = r#"
        duration = "20s"
        tcp = "paper"
        [[nodes]]
        name = "s"
        [[nodes]]
        name = "r"
        kind = "router"
        [[nodes]]
        name = "c"
        [[links]]
        a = "s"
        b = "r"
        rate = "10Mbit"
        delay = "1ms"
        [[links]]
        a = "r"
        b = "c"
        rate = "10Mbit"
        delay = "49ms"
        to_a = { rate = "100kbit" }
        [[flows]]
        from = "s"
        to = "c"
        app = { kind = "bulk", bytes = "2MB" }
    "#;
    let mut sim = Simulation::from_toml(src, RunOptions::default()).unwrap();
    sim.run();
    let r = sim.results();
    for t in &r.tables {
        println!("{} rows={}", t.name, t.rows());
    }
    println!(
        "{:?} events={} hops={} wall={}",
        r.table("flow_summary").unwrap(),
        r.events,
        r.packet_hops,
        r.wall_s
    );
    println!("{:?}", r.table("measurements"));
}
