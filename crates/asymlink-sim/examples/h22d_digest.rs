// Local helper (not committed): digest of every results table.
fn main() {
    for path in std::env::args().skip(1) {
        let p = std::path::Path::new(&path);
        let src = std::fs::read_to_string(p).expect("scenario file");
        let opts = asymlink_sim::RunOptions {
            out_dir: None,
            seed: None,
        };
        let mut sim = asymlink_sim::Simulation::from_toml_in(&src, p.parent(), opts).unwrap();
        sim.run();
        let r = sim.results();
        print!(
            "{path} {:016x} {} {}",
            r.trace_hash, r.events, r.packet_hops
        );
        for t in &r.tables {
            let s = format!("{:?}", t.columns);
            let mut h: u64 = 0xcbf29ce484222325;
            for b in s.bytes() {
                h = (h ^ b as u64).wrapping_mul(0x100000001b3);
            }
            print!(" {}={:08x}", t.name, h as u32);
        }
        if let Some(t) = r.table("links") {
            if let (
                Some(asymlink_sim::results::ColumnData::Str(l)),
                Some(asymlink_sim::results::ColumnData::F64(u)),
            ) = (t.column("link"), t.column("utilization"))
            {
                let v: Vec<f64> = l
                    .iter()
                    .zip(u)
                    .filter(|(l, _)| *l == "backhaul:to_b")
                    .map(|(_, u)| *u)
                    .collect();
                if !v.is_empty() {
                    print!(
                        " backhaul_to_b_util={:.4} (n={})",
                        v.iter().sum::<f64>() / v.len() as f64,
                        v.len()
                    );
                }
            }
        }
        println!();
    }
}
