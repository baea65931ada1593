//! What a handler's timing costs in clock reads: two reads per handled message, with the
//! OS clock (`std::time::Instant`) and with quanta's (the CPU's time-stamp counter), which
//! per-type timing uses (bus-core's `timing.rs`). `cargo bench -p benches --bench clock`.

use std::hint::black_box;
use std::time::Instant;

/// ns per pair of reads (a start and an elapsed), the best of three runs of `reads`.
fn per_pair(reads: u32, mut pair: impl FnMut() -> u64) -> f64 {
    (0..3)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..reads {
                black_box(pair());
            }
            started.elapsed().as_nanos() as f64 / f64::from(reads)
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    // `cargo test --benches` (no `--bench`) is a smoke run.
    let reads = if std::env::args().any(|a| a == "--bench") {
        20_000_000
    } else {
        10_000
    };
    let _ = quanta::Instant::now(); // calibrates once, outside the runs
    let os = per_pair(reads, || Instant::now().elapsed().as_nanos() as u64);
    let tsc = per_pair(reads, || quanta::Instant::now().elapsed().as_nanos() as u64);
    println!("two clock reads per handled message: std {os:.1} ns, quanta {tsc:.1} ns");
}
