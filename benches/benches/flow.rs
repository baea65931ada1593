//! Flow control's cost (docs/performance.md "Per-key ordering"): per-key
//! ordering over 10,000 keys and a rate-limited queue, against an unordered queue in the
//! same run. A plain `main` that prints a table:
//!
//! `cargo bench -p benches --bench flow` (`ROUNDS=n` repeats the set; `MESSAGES=n`
//! changes the messages per phase, 100,000 by default; `RATE=n` the rate limit's starts
//! per second, 20,000 by default).
//!
//! Every phase pre-fills its queue, then one host (a no-op handler, 1,000 running and
//! 1,000 prefetched, every other setting at its default) processes it; reported are msg/s and the CPU the redis-server and this process spent
//! per message over the timed phase (`/proc/<pid>/stat`, 10 ms resolution), and Redis's own
//! account of its command time (`INFO commandstats`).

use std::time::Duration;

use benches::cpu::Figure;
use benches::env::{env_number, BenchEnv as Env, RunSettings};
use benches::layout::unsettled;
use benches::messages::{order, Noop, Order};
use bus_core::flow::{PerKey, RateLimit};
use bus_core::transport::Source;
use bus_core::{Bus, BusConfig, Host};
use bus_redis::admin::Admin;
use futures::StreamExt;

const KEYS: u64 = 10_000;

/// How a phase's queue is set up and filled.
#[derive(Clone, Copy)]
enum Setup {
    /// Unordered, plain batches: the baseline.
    Plain,
    /// Ordered one at a time per key, the messages spread over [`KEYS`] keys.
    Ordered,
    /// Unordered, at most `rate` starts per second.
    Rated(u32),
}

/// Fills a queue as `setup` says, then times one host processing all `count` messages.
async fn phase(env: &Env, setup: Setup, count: u64) -> Figure {
    let transport = env.transport('f').await;
    let source = Source::queue("bench").unwrap();
    let keys = transport.keys(&source);
    let admin = Admin::new(transport.clone());
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let orders: Vec<Order> = (0..count).map(order).collect();
    match setup {
        Setup::Plain | Setup::Rated(_) => {
            for batch in orders.chunks(1_000) {
                bus.send_batch(batch).await.unwrap();
            }
        }
        Setup::Ordered => {
            admin
                .order_per_key(&source, Some(PerKey::fifo()))
                .await
                .unwrap();
            // Key k gets messages k, k + KEYS, ...: interleaved, one batch per key.
            let keys_used = KEYS.min(count);
            let sends = (0..keys_used).map(|k| {
                let batch: Vec<Order> = (k..count).step_by(keys_used as usize).map(order).collect();
                let bus = bus.clone();
                async move { bus.send_batch_keyed(&batch, &format!("key-{k}")).await }
            });
            let mut sends = futures::stream::iter(sends).buffer_unordered(256);
            while let Some(sent) = sends.next().await {
                sent.unwrap();
            }
        }
    }
    if let Setup::Rated(rate) = setup {
        let limit = RateLimit::new(rate, Duration::from_secs(1)).unwrap();
        admin.limit_rate(&source, Some(limit)).await.unwrap();
    }
    let noop = Noop::default();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Order, _>(noop.clone())
        .build()
        .unwrap();
    env.reset_stats().await;
    let started = env.meter.start();
    let running = host.start().await.unwrap();
    loop {
        if noop.handled() >= count && unsettled(transport.client(), &keys).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut figure = env.meter.stop(started, count);
    figure.command_us = env
        .command_us("flow", count, &["evalsha", "rpush", "blmove"])
        .await;
    running.shutdown().await.unwrap();
    figure
}

fn main() {
    let run = RunSettings::from_env(2_000, 100_000);
    let (count, rounds) = (run.messages, run.rounds);
    let rt = run.runtime();
    let rate: u64 = env_number("RATE").unwrap_or(20_000);
    let rate = u32::try_from(rate).unwrap_or(u32::MAX);
    // The rate-limited phase moves two seconds' worth (at least 1,000 messages).
    let rated_count = (u64::from(rate) * 2).clamp(1_000, count.max(1_000));
    rt.block_on(async {
        let env = Env::start().await;
        for round in 1..=rounds {
            println!(
                "\n== round {round}/{rounds}: {count} messages, one host, no-op handler, 1,000 running + 1,000 prefetched =="
            );
            let plain = phase(&env, Setup::Plain, count).await;
            plain.print("unordered queue, pre-filled (baseline)");
            let ordered = phase(&env, Setup::Ordered, count).await;
            ordered.print(&format!("ordered per key (n = 1), {} keys", KEYS.min(count)));
            let rated = phase(&env, Setup::Rated(rate), rated_count).await;
            rated.print(&format!("rate limit {rate}/s, {rated_count} messages"));
            println!("-- ratios of this round:");
            println!(
                "   ordered / unordered: throughput {:.1}%, Redis CPU per message {:.2}x, Redis command time {:.2}x",
                ordered.rate / plain.rate * 100.0,
                ordered.redis_us / plain.redis_us,
                ordered.command_us / plain.command_us
            );
            // A sliding window of one second starts `rate` at once, then `rate` more
            // one window later: n messages need at least ceil(n / rate) - 1 seconds.
            let windows = rated_count.div_ceil(u64::from(rate)).saturating_sub(1).max(1);
            let fastest = rated_count as f64 / windows as f64;
            println!(
                "   rate-limited: {:.1}% of the fastest its limit allows ({fastest:.0} msg/s over {rated_count} messages), Redis CPU per message {:.2}x the unordered queue's",
                rated.rate / fastest * 100.0,
                rated.redis_us / plain.redis_us
            );
        }
        env.close().await;
    });
}
