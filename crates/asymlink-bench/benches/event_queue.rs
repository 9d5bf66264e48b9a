//! The pending-event set in the "hold" model: at a steady size N, pop the earliest event
//! and push one a random time later (what a simulator does per event).
//!
//! `cargo bench -p asymlink-sim --bench event_queue`

use asymlink_core::rand::Rng;
use asymlink_core::time::Instant;
use asymlink_sim::queue::EventQueue;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::hint::black_box;

fn hold(c: &mut Criterion) {
    let mut g = c.benchmark_group("event_queue_hold");
    for n in [1_000usize, 100_000, 1_000_000] {
        g.bench_function(format!("n={n}"), |b| {
            b.iter_batched_ref(
                || {
                    let mut rng = Rng::new(1);
                    let mut q = EventQueue::new();
                    for i in 0..n {
                        q.push(Instant(rng.below(1_000_000_000)), i as u32);
                    }
                    (q, rng)
                },
                |(q, rng)| {
                    for _ in 0..1000 {
                        let (t, e) = q.pop_until(Instant::MAX).expect("non-empty");
                        q.push(Instant(t.0 + 1 + rng.below(10_000_000)), black_box(e));
                    }
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, hold);
criterion_main!(benches);
