//! The message lifecycle's cost (docs/performance.md "Message lifecycle"): what
//! a send or a handle costs with each feature used, against the same without it, in the
//! same run. A plain `main` that prints a table:
//!
//! `cargo bench -p benches --bench lifecycle` (`ROUNDS=n` repeats the set; `MESSAGES=n`
//! changes the messages per phase, 50,000 by default).
//!
//! Sends: single sends with 1,000 in flight (the bus coalesces them), plain, with a
//! deadline (`expires_in`) and with a deduplication key (`send_once_batch.lua`, concurrent
//! sends sharing calls), and batches of 100, plain (`send_batch`) and each command with its own
//! deduplication key (`send_batch_deduplicated`, one `send_once_batch.lua` per batch), 10
//! in flight. Handles: a pre-filled queue processed by one host (1,000 handlers running
//! and 1,000 prefetched, every other setting at its default), with a no-op handler and with one whose work is one `ctx.once` step.
//! Requests: `Bus::request` round trips, 100 in flight, answered by a host's `ctx.reply`.
//! Reported: msg/s, and per message the CPU of the redis-server and of this process over
//! the timed phase (`/proc/<pid>/stat`, 10 ms resolution) and Redis's command time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use benches::cpu::Figure;
use benches::env::{BenchEnv, RunSettings};
use benches::layout::unsettled;
use benches::messages::{order, Noop, Order};
use bus_core::transport::Source;
use bus_core::{Bus, BusConfig, CommandProcessor, Context, Host, ProcessError, SendOptions};
use bus_redis::RedisTransport;
use futures::StreamExt;

const IN_FLIGHT: usize = 1_000;

/// What each send of a send phase carries.
#[derive(Clone, Copy)]
enum SendKind {
    Plain,
    Deadline,
    Dedup,
}

/// Times `count` single sends of one kind, 1,000 in flight.
async fn sends(env: &BenchEnv, kind: SendKind, count: u64) -> Figure {
    let transport = env.transport('s').await;
    let bus = Bus::new(transport.clone(), BusConfig::default());
    env.reset_stats().await;
    let started = env.meter.start();
    let sends = (0..count).map(|n| {
        let bus = bus.clone();
        async move {
            let options = match kind {
                SendKind::Plain => SendOptions::new(),
                SendKind::Deadline => SendOptions::new().expires_in(Duration::from_secs(3_600)),
                SendKind::Dedup => SendOptions::new().dedup_key(format!("order-{n}")),
            };
            bus.send_with(&order(n), &options).await
        }
    });
    let mut sends = futures::stream::iter(sends).buffer_unordered(IN_FLIGHT);
    while let Some(sent) = sends.next().await {
        sent.unwrap();
    }
    let mut figure = env.meter.stop(started, count);
    // A deduplicated send is one script whose GET, SET and RPUSH count again under their
    // own names: only its EVALSHA is counted.
    let commands: &[&str] = match kind {
        SendKind::Plain | SendKind::Deadline => &["evalsha", "rpush"],
        SendKind::Dedup => &["evalsha"],
    };
    figure.command_us = env.command_us("sends", count, commands).await;
    figure
}

/// Commands per batch of a batch phase, and batches in flight (1,000 messages, as the
/// single sends).
const BATCH: u64 = 100;
const BATCHES_IN_FLIGHT: usize = 10;

/// Times `count` commands sent in batches of [`BATCH`]: plain (`send_batch`, coalesced
/// pushes) or each with its own deduplication key (`send_batch_deduplicated`).
async fn batches(env: &BenchEnv, dedup: bool, count: u64) -> Figure {
    let transport = env.transport('b').await;
    let bus = Bus::new(transport.clone(), BusConfig::default());
    env.reset_stats().await;
    let started = env.meter.start();
    let batches = (0..count.div_ceil(BATCH)).map(|b| {
        let bus = bus.clone();
        async move {
            let range = b * BATCH..((b + 1) * BATCH).min(count);
            let orders: Vec<Order> = range.clone().map(order).collect();
            if dedup {
                let keys: Vec<String> = range.map(|n| format!("order-{n}")).collect();
                let options = SendOptions::new();
                let sent = bus
                    .send_batch_deduplicated(&orders, &keys, &options)
                    .await?;
                assert!(sent.iter().all(|s| !s.duplicate));
            } else {
                bus.send_batch(&orders).await?;
            }
            Ok::<_, bus_core::Error>(())
        }
    });
    let mut batches = futures::stream::iter(batches).buffer_unordered(BATCHES_IN_FLIGHT);
    while let Some(sent) = batches.next().await {
        sent.unwrap();
    }
    let mut figure = env.meter.stop(started, count);
    // As for single sends: a script's inner commands are not counted again.
    let commands: &[&str] = if dedup {
        &["evalsha"]
    } else {
        &["evalsha", "rpush"]
    };
    figure.command_us = env.command_us("batches", count, commands).await;
    figure
}

/// A handler whose work is one step run through `ctx.once` (its mark written to Redis).
#[derive(Clone, Default)]
struct OnceStep(Arc<AtomicU64>);

#[async_trait::async_trait]
impl CommandProcessor<Order> for OnceStep {
    async fn process(&self, order: Order, ctx: &Context) -> Result<(), ProcessError> {
        let n: u64 = ctx
            .once("step", || async { Ok::<_, ProcessError>(order.n) })
            .await?;
        assert_eq!(n, order.n);
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn settings(&self) -> bus_core::ProcessingSettings {
        <Noop as CommandProcessor<Order>>::settings(&Noop::default())
    }
}

/// Pre-fills a queue with `count` messages, then times one host handling them all with
/// `once_step` (else a no-op handler).
async fn handles(env: &BenchEnv, once_step: bool, count: u64) -> Figure {
    let transport = env.transport('h').await;
    let keys = transport.keys(&Source::queue("bench").unwrap());
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let orders: Vec<Order> = (0..count).map(order).collect();
    for batch in orders.chunks(1_000) {
        bus.send_batch(batch).await.unwrap();
    }
    let noop = Noop::default();
    let step = OnceStep::default();
    let builder = Host::builder().transport(transport.clone());
    let host = if once_step {
        builder.command::<Order, _>(step.clone())
    } else {
        builder.command::<Order, _>(noop.clone())
    }
    .build()
    .unwrap();
    let handled = || noop.handled() + step.0.load(Ordering::Relaxed);
    env.reset_stats().await;
    let started = env.meter.start();
    let running = host.start().await.unwrap();
    loop {
        if handled() >= count && unsettled(transport.client(), &keys).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut figure = env.meter.stop(started, count);
    // `ctx.once` sends its GET and SET itself.
    let commands = ["evalsha", "blmove", "get", "set"];
    figure.command_us = env.command_us("handles", count, &commands).await;
    running.shutdown().await.unwrap();
    figure
}

/// Answers each `Order` with its number.
struct Responder;

#[async_trait::async_trait]
impl CommandProcessor<Order> for Responder {
    async fn process(&self, order: Order, ctx: &Context) -> Result<(), ProcessError> {
        ctx.reply(&order.n).await?;
        Ok(())
    }
    fn settings(&self) -> bus_core::ProcessingSettings {
        <Noop as CommandProcessor<Order>>::settings(&Noop::default())
    }
}

/// Times `count` request/reply round trips, 100 in flight, against one responding host.
async fn requests(env: &BenchEnv, count: u64) -> Figure {
    let transport: RedisTransport = env.transport('r').await;
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Order, _>(Responder)
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    let bus = Bus::new(transport.clone(), BusConfig::default());
    // The inbox opens at the first request: not part of the timed phase.
    let _: u64 = bus
        .request(&order(0), Duration::from_secs(30))
        .await
        .unwrap();
    env.reset_stats().await;
    let started = env.meter.start();
    let asks = (0..count).map(|n| {
        let bus = bus.clone();
        async move {
            let reply: u64 = bus.request(&order(n), Duration::from_secs(30)).await?;
            assert_eq!(reply, n);
            Ok::<_, bus_core::Error>(())
        }
    });
    let mut asks = futures::stream::iter(asks).buffer_unordered(100);
    while let Some(asked) = asks.next().await {
        asked.unwrap();
    }
    let mut figure = env.meter.stop(started, count);
    // The requests' pushes, the scripts (reserve, ack, reply.lua), the inbox's reads.
    // reply.lua's RPUSH counts twice (inside the script and under `rpush`).
    let commands = ["evalsha", "rpush", "blmove", "lrange", "ltrim"];
    figure.command_us = env.command_us("requests", count, &commands).await;
    running.shutdown().await.unwrap();
    figure
}

fn ratio(name: &str, with: Figure, without: Figure) {
    println!(
        "   {name}: throughput {:.1}%, Redis CPU per message {:.2}x, client CPU per message {:.2}x",
        with.rate / without.rate * 100.0,
        with.redis_us / without.redis_us,
        with.client_us / without.client_us
    );
}

fn main() {
    let run = RunSettings::from_env(1_000, 50_000);
    let (count, rounds) = (run.messages, run.rounds);
    let rt = run.runtime();
    rt.block_on(async {
        let env = BenchEnv::start().await;
        for round in 1..=rounds {
            println!("\n== round {round}/{rounds}: {count} messages per phase ==");
            let plain = sends(&env, SendKind::Plain, count).await;
            plain.print("send, plain (baseline)");
            let deadline = sends(&env, SendKind::Deadline, count).await;
            deadline.print("send with a deadline (expires_in)");
            let dedup = sends(&env, SendKind::Dedup, count).await;
            dedup.print("send with a deduplication key");
            let batch = batches(&env, false, count).await;
            batch.print("send_batch of 100, plain (baseline)");
            let dedup_batch = batches(&env, true, count).await;
            dedup_batch.print("send_batch_deduplicated of 100");
            let noop = handles(&env, false, count).await;
            noop.print("handle, no-op handler (baseline)");
            let once = handles(&env, true, count).await;
            once.print("handle with one ctx.once step");
            let asked = requests(&env, count / 5).await;
            asked.print("request/reply round trip, 100 in flight");
            println!("-- ratios of this round (with / without):");
            ratio("deadline", deadline, plain);
            ratio("deduplication key", dedup, plain);
            ratio("deduplicated batch / plain batch", dedup_batch, batch);
            ratio(
                "deduplicated batch / plain single sends",
                dedup_batch,
                plain,
            );
            ratio(
                "deduplicated batch / deduplicated single sends",
                dedup_batch,
                dedup,
            );
            ratio("ctx.once step", once, noop);
        }
        env.close().await;
    });
}
