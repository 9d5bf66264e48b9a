//! Criterion micro-benchmarks of asymlink (`cargo bench -p asymlink-bench`): queue
//! disciplines of the core (`benches/qdisc.rs`) and the simulator's event queue
//! (`benches/event_queue.rs`). This library is empty; see `docs/performance.md`.
