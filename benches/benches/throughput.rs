//! Throughput against honest baselines, measured in the same run (docs/performance.md).
//! A plain `main` that prints a table:
//!
//! `cargo bench -p benches --bench throughput` (`ROUNDS=n` repeats the whole set; `ONLY=<parts of
//! phases' function names, comma-separated>` runs only those phases;
//! `COMMANDSTATS=1` prints Redis's `INFO commandstats` of each Redis phase; `MESSAGES=n`
//! changes the number of messages per phase; `E2E_TIMING=off` runs the end-to-end phase
//! without per-type timing). The pre-filled bus phase runs between two runs of a bare host
//! (no per-type timing, no heartbeat), and `OBSERVER_PAIRS=n` (3) alternations of the two in
//! all: the cost of the observers a host runs by default.
//!
//! Every phase moves 100,000 messages with a ~100-byte JSON body, and reports msg/s and
//! the CPU that the redis-server and this process spent per message over the timed phase
//! (utime + stime from `/proc/<pid>/stat`, 10 ms resolution).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use benches::cpu::Figure;
use benches::env::{env_number, BenchEnv as Env};
use benches::layout::unsettled;
use benches::messages::{envelopes, order, Noop, Order};
use benches::producer::{Produce, Producer};
use bus_core::transport::Source;
use bus_core::{Bus, BusConfig, Host, MemoryTransport};
use bus_redis::keys::QueueKeys;
use bytes::Bytes;
use fred::prelude::{ClientLike, KeysInterface, ListInterface};
use fred::types::scripts::Script;
use fred::types::{Key, Value};
use futures::StreamExt;

/// Messages per phase: 100,000 under `cargo bench`; a quick smoke run of 2,000 when
/// `cargo test --all-targets` runs this target (it passes no `--bench`).
static COUNT_SET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
fn count() -> u64 {
    *COUNT_SET.get().unwrap_or(&100_000)
}
const CONSUMERS: usize = 4;
const BATCH: usize = 100;
const IN_FLIGHT: usize = 1_000;

// ---- the environment ------------------------------------------------------------

/// What this bench's clients send themselves (scripts, the producers' pushes, the wake
/// wait): Redis's time in them is the phase's command time.
const CLIENT_COMMANDS: &[&str] = &["evalsha", "rpush", "blmove"];

fn cmd(name: &'static str) -> fred::types::CustomCommand {
    fred::types::CustomCommand::new_static(name, None, false)
}

// ---- (a) the plain circular list, done well ------------------------------------

/// Moves up to ARGV[1] messages from the ready list into this consumer's processing list.
const CIRCULAR_MOVE: &str = "local out = {}
for i = 1, tonumber(ARGV[1]) do
  local v = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not v then break end
  out[i] = v
end
return out";

/// Acks a batch: one LREM per message, from the head of the processing list (where
/// they are, in order: the cheapest case).
const CIRCULAR_ACK: &str = "for i = 1, #ARGV do redis.call('LREM', KEYS[1], 1, ARGV[i]) end
return #ARGV";

struct Circular {
    ready: String,
    prefix: String,
}

impl Circular {
    fn new(env: &Env) -> Circular {
        let prefix = env.namespace('c');
        Circular {
            ready: format!("{prefix}:ready"),
            prefix,
        }
    }

    /// Runs CONSUMERS consumers until `count` messages are processed and acked.
    async fn consume(&self, env: &Env, count: u64) {
        let done = Arc::new(AtomicU64::new(0));
        let (mv, ack) = (
            Arc::new(Script::from_lua(CIRCULAR_MOVE)),
            Arc::new(Script::from_lua(CIRCULAR_ACK)),
        );
        let mut tasks = Vec::new();
        for c in 0..CONSUMERS {
            let client = env.client().await;
            let keys: Vec<Key> = vec![
                self.ready.as_str().into(),
                format!("{}:processing:{c}", self.prefix).into(),
            ];
            let (done, mv, ack) = (Arc::clone(&done), Arc::clone(&mv), Arc::clone(&ack));
            tasks.push(tokio::spawn(async move {
                while done.load(Ordering::Relaxed) < count {
                    let mut got: Vec<Bytes> = mv
                        .evalsha_with_reload(&client, keys.clone(), vec![Value::from(BATCH as i64)])
                        .await
                        .unwrap();
                    if got.is_empty() {
                        // Idle: block for the next one (into the processing list too).
                        let one: Option<Bytes> = client
                            .blmove(
                                &keys[0],
                                &keys[1],
                                fred::types::lists::LMoveDirection::Left,
                                fred::types::lists::LMoveDirection::Right,
                                0.05,
                            )
                            .await
                            .ok()
                            .flatten();
                        got.extend(one);
                        if got.is_empty() {
                            continue;
                        }
                    }
                    let n = got.len() as u64;
                    let args: Vec<Value> = got.into_iter().map(Value::Bytes).collect();
                    let _: i64 = ack
                        .evalsha_with_reload(&client, vec![keys[1].clone()], args)
                        .await
                        .unwrap();
                    done.fetch_add(n, Ordering::Relaxed);
                }
                let _: () = client.quit().await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    }
}

async fn circular_prefilled(env: &Env) -> Figure {
    let circular = Circular::new(env);
    let payloads = envelopes(count());
    for batch in payloads.chunks(1_000) {
        let _: i64 = env
            .admin
            .rpush(&circular.ready, batch.to_vec())
            .await
            .unwrap();
    }
    env.reset_stats().await;
    let started = env.meter.start();
    circular.consume(env, count()).await;
    let mut figure = env.meter.stop(started, count());
    figure.command_us = env
        .command_us("circular, pre-filled", count(), CLIENT_COMMANDS)
        .await;
    figure
}

/// The producer runs in a process of its own (`benches::producer`), as in production; the
/// client CPU is the consumer's and the producer's.
async fn circular_end_to_end(env: &Env) -> Figure {
    let circular = Circular::new(env);
    let mut producer = Producer::spawn(Produce::Rpush, &env.redis.url, &circular.ready, count());
    env.reset_stats().await;
    let started = env.meter.start();
    producer.go();
    circular.consume(env, count()).await;
    let mut figure = env.meter.stop(started, count());
    let producer_cpu = tokio::task::spawn_blocking(move || producer.finish())
        .await
        .unwrap();
    figure.client_us += producer_cpu * 1e6 / count() as f64;
    figure.command_us = env
        .command_us("circular, end to end", count(), CLIENT_COMMANDS)
        .await;
    figure
}

// ---- (b) our own layout, raw: the consumer's scripts without the host -----------

async fn layout_consume(env: &Env, keys: &QueueKeys, count: u64) {
    let done = Arc::new(AtomicU64::new(0));
    let (reserve, ack) = (
        bus_redis::raw::reserve_script(),
        bus_redis::raw::ack_script(),
    );
    let script_keys = bus_redis::keys::ScriptKeys::new(keys);
    let (reserve_keys, ack_keys) = (script_keys.reserve, script_keys.ack);
    let mut tasks = Vec::new();
    for _ in 0..CONSUMERS {
        let client = env.client().await;
        let done = Arc::clone(&done);
        let (reserve_keys, ack_keys) = (reserve_keys.clone(), ack_keys.clone());
        tasks.push(tokio::spawn(async move {
            while done.load(Ordering::Relaxed) < count {
                let args = vec![
                    Value::from(BATCH as i64),
                    Value::from(60_000),
                    Value::from("raw"),
                    Value::from(BATCH as i64),
                ];
                let reply = reserve
                    .run(&client, reserve_keys.clone(), args)
                    .await
                    .unwrap();
                let Value::Array(items) = reply else {
                    panic!("reserve: {reply:?}")
                };
                // [wait, pending, token, [envelope, ...], position, id, count, envelope,
                // ...]: ack the stored (id, count) pairs and the lease's indices.
                let stored: Vec<Value> = items
                    .get(4..)
                    .unwrap_or_default()
                    .chunks(4)
                    .flat_map(|quad| [quad[1].clone(), quad[2].clone()])
                    .collect();
                let leased = match items.get(3) {
                    Some(Value::Array(envelopes)) => envelopes.len(),
                    _ => 0,
                };
                let total = stored.len() / 2 + leased;
                if total == 0 {
                    tokio::task::yield_now().await;
                    continue;
                }
                let mut receipts = Vec::with_capacity(4 + stored.len());
                receipts.push(Value::from((stored.len() / 2) as i64));
                receipts.push(Value::from(i64::from(leased > 0)));
                receipts.extend(stored);
                if leased > 0 {
                    receipts.push(items[2].clone());
                    let bits = bus_redis::raw::lease_bits(0..leased);
                    receipts.push(Value::Bytes(bits.into()));
                }
                let n = total as u64;
                ack.run(&client, ack_keys.clone(), receipts).await.unwrap();
                done.fetch_add(n, Ordering::Relaxed);
            }
            let _: () = client.quit().await.unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// The raw layout's consumers take `count()` messages from the head of a ready list
/// that holds `backlog` more behind them (backlog scaling: the cost must not grow with it).
async fn layout_prefilled(env: &Env, backlog: u64) -> Figure {
    let transport = env.transport('b').await;
    let keys = transport.keys(&Source::queue("bench").unwrap());
    let payloads = envelopes(count());
    for batch in payloads.chunks(1_000) {
        let _: i64 = env.admin.rpush(&keys.ready, batch.to_vec()).await.unwrap();
    }
    let behind = (0..backlog).step_by(1_000).map(|from| {
        let n = (backlog - from).min(1_000) as usize;
        let batch: Vec<Bytes> = payloads.iter().cycle().take(n).cloned().collect();
        env.admin.rpush::<i64, _, _>(&keys.ready, batch)
    });
    futures::stream::iter(behind)
        .buffer_unordered(8)
        .for_each(|r| {
            r.unwrap();
            async {}
        })
        .await;
    env.reset_stats().await;
    let started = env.meter.start();
    layout_consume(env, &keys, count()).await;
    let mut figure = env.meter.stop(started, count());
    figure.command_us = env
        .command_us(
            &format!("raw layout, pre-filled, {backlog} behind"),
            count(),
            CLIENT_COMMANDS,
        )
        .await;
    assert_eq!(unsettled(&env.admin, &keys).await, 0, "every message acked");
    // UNLINK frees a long list in the background instead of blocking Redis.
    let _: Value = env
        .admin
        .custom(cmd("UNLINK"), vec![keys.ready.as_str()])
        .await
        .unwrap();
    figure
}

// ---- the bus ------------------------------------------------------------------

/// Waits until `noop` counted `count` and `settled` says every ack reached the transport.
async fn until_done<F, Fut>(noop: &Noop, count: u64, settled: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        if noop.handled() >= count && settled().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn bus_prefilled(env: &Env) -> Figure {
    bus_prefilled_observed(env, true).await
}

/// The same on a bare host, without the observers a host runs by default (per-type
/// timing and the heartbeat): the baseline of their cost.
async fn bus_prefilled_bare(env: &Env) -> Figure {
    bus_prefilled_observed(env, false).await
}

async fn bus_prefilled_observed(env: &Env, observed: bool) -> Figure {
    let transport = env.transport('b').await;
    let keys = transport.keys(&Source::queue("bench").unwrap());
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let orders: Vec<Order> = (0..count()).map(order).collect();
    for batch in orders.chunks(1_000) {
        bus.send_batch(batch).await.unwrap();
    }
    let noop = Noop::default();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Order, _>(noop.clone())
        .timing_interval(observed.then_some(bus_core::timing::DEFAULT_TIMING_INTERVAL))
        .heartbeat_interval(observed.then_some(bus_core::heartbeat::DEFAULT_HEARTBEAT_INTERVAL))
        .build()
        .unwrap();
    env.reset_stats().await;
    let started = env.meter.start();
    let running = host.start().await.unwrap();
    until_done(&noop, count(), || async {
        unsettled(transport.client(), &keys).await == 0
    })
    .await;
    let mut figure = env.meter.stop(started, count());
    figure.command_us = env
        .command_us("bus, pre-filled", count(), CLIENT_COMMANDS)
        .await;
    running.shutdown().await.unwrap();
    figure
}

/// The producer runs in a process of its own, as for the circular list.
async fn bus_end_to_end(env: &Env) -> Figure {
    let (transport, prefix) = env.transport_and_prefix('b').await;
    let keys = transport.keys(&Source::queue("bench").unwrap());
    let noop = Noop::default();
    // `E2E_TIMING=off`: per-type timing off, to see its share of this phase's cost.
    let timing = std::env::var("E2E_TIMING").map_or(true, |v| v != "off");
    let host = Host::builder()
        .transport(transport.clone())
        .timing_interval(timing.then_some(bus_core::timing::DEFAULT_TIMING_INTERVAL))
        .command::<Order, _>(noop.clone())
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    let mut producer = Producer::spawn(Produce::BusSend, &env.redis.url, &prefix, count());
    env.reset_stats().await;
    let started = env.meter.start();
    producer.go();
    until_done(&noop, count(), || async {
        unsettled(transport.client(), &keys).await == 0
    })
    .await;
    let mut figure = env.meter.stop(started, count());
    let producer_cpu = tokio::task::spawn_blocking(move || producer.finish())
        .await
        .unwrap();
    figure.client_us += producer_cpu * 1e6 / count() as f64;
    figure.command_us = env
        .command_us("bus, end to end", count(), CLIENT_COMMANDS)
        .await;
    running.shutdown().await.unwrap();
    figure
}

/// Where a single-send phase's caller runs: on the bench's `block_on` thread, as the
/// phases have always been measured, or in a task on the runtime, as an application's
/// handlers and request tasks send.
#[derive(Clone, Copy)]
enum Caller {
    BlockOn,
    Task,
}

/// Runs `send(0) .. send(count() - 1)`, [`IN_FLIGHT`] at a time, from `caller`.
async fn single_sends<F, Fut>(caller: Caller, send: F)
where
    F: Fn(usize) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let all = async move {
        futures::stream::iter(0..count() as usize)
            .map(send)
            .buffer_unordered(IN_FLIGHT)
            .for_each(|()| async {})
            .await
    };
    match caller {
        Caller::BlockOn => all.await,
        Caller::Task => tokio::spawn(all).await.unwrap(),
    }
}

/// Single sends, 1,000 in flight, nobody consuming.
async fn bus_sends(env: &Env, caller: Caller) -> Figure {
    let transport = env.transport('b').await;
    let ready = transport.keys(&Source::queue("bench").unwrap()).ready;
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let orders: Arc<Vec<Order>> = Arc::new((0..count()).map(order).collect());
    env.reset_stats().await;
    let started = env.meter.start();
    single_sends(caller, move |n| {
        let (bus, orders) = (bus.clone(), Arc::clone(&orders));
        async move {
            bus.send(&orders[n]).await.unwrap();
        }
    })
    .await;
    let mut figure = env.meter.stop(started, count());
    figure.command_us = env.command_us("bus sends", count(), CLIENT_COMMANDS).await;
    let _: i64 = env.admin.del(&ready).await.unwrap();
    figure
}

/// A bare fred `RPUSH` of the same bytes, 1,000 in flight.
async fn raw_sends(env: &Env) -> Figure {
    let client = env.client().await;
    let key = format!("{}:ready", env.namespace('r'));
    let payloads = envelopes(count());
    env.reset_stats().await;
    let started = env.meter.start();
    futures::stream::iter(payloads)
        .map(|p| client.rpush::<i64, _, _>(&key, p))
        .buffer_unordered(IN_FLIGHT)
        .for_each(|r| {
            r.unwrap();
            async {}
        })
        .await;
    let mut figure = env.meter.stop(started, count());
    figure.command_us = env.command_us("bare RPUSH", count(), CLIENT_COMMANDS).await;
    let _: i64 = env.admin.del(&key).await.unwrap();
    let _: () = client.quit().await.unwrap();
    figure
}

/// The same `RPUSH`es through a lean pipelined writer on one connection
/// (`benches::lean`): what a single push costs the client without fred.
async fn lean_sends(env: &Env, caller: Caller) -> Figure {
    let writer = benches::lean::LeanWriter::connect(&env.redis.url).await;
    let key: Arc<str> = format!("{}:ready", env.namespace('l')).into();
    let payloads = Arc::new(envelopes(count()));
    env.reset_stats().await;
    let started = env.meter.start();
    let (pushing, list) = (writer.clone(), Arc::clone(&key));
    single_sends(caller, move |n| {
        let (writer, key, payloads) = (pushing.clone(), Arc::clone(&list), Arc::clone(&payloads));
        async move {
            writer.rpush(&key, &payloads[n]).await;
        }
    })
    .await;
    let mut figure = env.meter.stop(started, count());
    figure.command_us = env.command_us("lean RPUSH", count(), CLIENT_COMMANDS).await;
    let stored: i64 = env.admin.llen(&*key).await.unwrap();
    assert_eq!(stored as u64, count(), "every lean push stored");
    let _: i64 = env.admin.del(&*key).await.unwrap();
    figure
}

/// The in-memory transport: a pre-filled queue processed by a host.
async fn memory_prefilled(env: &Env) -> Figure {
    let transport = MemoryTransport::new();
    let source = Source::queue("bench").unwrap();
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let orders: Vec<Order> = (0..count()).map(order).collect();
    for batch in orders.chunks(1_000) {
        bus.send_batch(batch).await.unwrap();
    }
    let noop = Noop::default();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Order, _>(noop.clone())
        .build()
        .unwrap();
    let started = env.meter.start();
    let running = host.start().await.unwrap();
    until_done(&noop, count(), || async {
        let stats = transport.stats(&source);
        stats.ready == 0 && stats.in_flight == 0
    })
    .await;
    let figure = env.meter.stop(started, count());
    running.shutdown().await.unwrap();
    figure
}

// ---- the report -----------------------------------------------------------------

fn row(name: &str, f: Figure) {
    f.print(name);
}

fn main() {
    benches::producer::main_if_asked();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let smoke = !std::env::args().any(|a| a == "--bench");
    // MESSAGES=n changes the phases' size (a longer phase for `perf record`).
    let messages = env_number("MESSAGES");
    let _ = COUNT_SET.set(messages.unwrap_or(if smoke { 2_000 } else { 100_000 }));
    // BACKLOG=10000000 for the backlog scaling figures (about 2 GB of Redis memory).
    let backlog_size = env_number("BACKLOG").unwrap_or(if smoke { 2_000 } else { 1_000_000 });
    let rounds = env_number("ROUNDS").unwrap_or(if smoke { 1 } else { 2 });
    let observer_pairs = env_number("OBSERVER_PAIRS").unwrap_or(if smoke { 1 } else { 3 });
    // ONLY=memory_prefilled or ONLY=layout,backlog (parts of phase names) runs just those;
    // ONLY=bus_prefilled runs the pre-filled bus phases, `_observed` or `_bare` one kind.
    let only = std::env::var("ONLY").ok();
    let wanted = |phase: &str| {
        only.as_ref()
            .map_or(true, |o| o.split(',').any(|o| phase.contains(o)))
    };
    rt.block_on(async {
        let env = Env::start().await;
        for round in 1..=rounds {
            println!(
                "\n== round {round}/{rounds}: {} messages, ~100-byte JSON bodies, \
                 {CONSUMERS} raw consumers x {BATCH}, {IN_FLIGHT} sends in flight ==",
                count()
            );
            let circ_pre = if wanted("circular_prefilled") { let f = circular_prefilled(&env).await; row("circular list, pre-filled", f); f } else { Figure::NONE };
            let layout_pre = if wanted("layout_prefilled") { let f = layout_prefilled(&env, 0).await; row("raw layout (reserve.lua+ack.lua), pre-filled", f); f } else { Figure::NONE };
            // The default observers' cost: the same phase on a bare host, run before and
            // after it (the first phase of a process runs on a colder client).
            let bare_before = if wanted("bus_prefilled_bare") { let f = bus_prefilled_bare(&env).await; row("bus, pre-filled, bare host", f); f } else { Figure::NONE };
            let bus_pre = if wanted("bus_prefilled_observed") { let f = bus_prefilled(&env).await; row("bus, pre-filled", f); f } else { Figure::NONE };
            let bare_after = if wanted("bus_prefilled_bare") { let f = bus_prefilled_bare(&env).await; row("bus, pre-filled, bare host", f); f } else { Figure::NONE };
            if bare_after.rate > 0.0 && bus_pre.rate > 0.0 {
                // More alternations than one: the rate of two runs of one phase differs by
                // ±10% on a shared machine, more than the observers are to cost.
                let (mut with, mut without) = (vec![bus_pre], vec![bare_before, bare_after]);
                for _ in 1..observer_pairs {
                    with.push(bus_prefilled(&env).await);
                    without.push(bus_prefilled_bare(&env).await);
                }
                let mean = |figures: &[Figure], of: fn(&Figure) -> f64| {
                    figures.iter().map(of).sum::<f64>() / figures.len() as f64
                };
                println!(
                    "   timing and heartbeat: with / without ({} with, {} without, alternated) {:>6.1}% of the rate, client CPU {:.2} vs {:.2} us/msg",
                    with.len(),
                    without.len(),
                    mean(&with, |f| f.rate) / mean(&without, |f| f.rate) * 100.0,
                    mean(&with, |f| f.client_us),
                    mean(&without, |f| f.client_us)
                );
            }
            let circ_e2e = if wanted("circular_end_to_end") { let f = circular_end_to_end(&env).await; row("circular list, end to end (producer process)", f); f } else { Figure::NONE };
            let bus_e2e = if wanted("bus_end_to_end") { let f = bus_end_to_end(&env).await; row("bus, end to end (producer process)", f); f } else { Figure::NONE };
            let raw_send = if wanted("raw_sends") { let f = raw_sends(&env).await; row("bare fred RPUSH, single", f); f } else { Figure::NONE };
            let lean_send = if wanted("lean_sends") { let f = lean_sends(&env, Caller::BlockOn).await; row("lean pipelined RPUSH, single", f); f } else { Figure::NONE };
            let bus_send = if wanted("bus_sends") { let f = bus_sends(&env, Caller::BlockOn).await; row("bus send, single", f); f } else { Figure::NONE };
            // The same from a task on the runtime (ONLY=from_task runs just these two).
            let lean_task = if wanted("lean_sends_from_task") { let f = lean_sends(&env, Caller::Task).await; row("lean pipelined RPUSH, single, from a task", f); f } else { Figure::NONE };
            let bus_task = if wanted("bus_sends_from_task") { let f = bus_sends(&env, Caller::Task).await; row("bus send, single, from a task", f); f } else { Figure::NONE };
            let memory = if wanted("memory_prefilled") { let f = memory_prefilled(&env).await; row("in-memory transport, pre-filled", f); f } else { Figure::NONE };
            let backlog = if wanted("backlog") {
                let f = layout_prefilled(&env, backlog_size).await;
                row(&format!("raw layout, {backlog_size} ready behind"), f);
                f
            } else {
                Figure::NONE
            };
            if only.is_some() { continue; }
            let pct = |a: f64, b: f64| a / b * 100.0;
            println!("-- ratios of this round (the targets in docs/performance.md):");
            println!(
                "   pre-filled: bus / circular {:>6.1}% (>= 200%), raw layout / circular {:>6.1}%, bus / raw layout {:>6.1}%",
                pct(bus_pre.rate, circ_pre.rate),
                pct(layout_pre.rate, circ_pre.rate),
                pct(bus_pre.rate, layout_pre.rate)
            );
            println!(
                "   end to end, producer in its own process: bus / circular {:>6.1}% (>= 160%)",
                pct(bus_e2e.rate, circ_e2e.rate)
            );
            println!(
                "   Redis CPU per processed message: bus {:.2} us, circular {:.2} us; client CPU per processed message: bus {:.2} us (<= 1.5)",
                bus_pre.redis_us, circ_pre.redis_us, bus_pre.client_us
            );
            println!(
                "   Redis command time per processed message (commandstats): bus {:.2} us, raw layout {:.2} us, circular {:.2} us",
                bus_pre.command_us, layout_pre.command_us, circ_pre.command_us
            );
            println!(
                "   client CPU per single send: bus {:.2} us (<= 1) / bare fred RPUSH {:.2} us = {:.2}x; lean pipelined RPUSH {:.2} us (fred / lean {:.2}x)",
                bus_send.client_us,
                raw_send.client_us,
                bus_send.client_us / raw_send.client_us,
                lean_send.client_us,
                raw_send.client_us / lean_send.client_us
            );
            println!(
                "   client CPU per single send from a task on the runtime: bus {:.2} us, lean pipelined RPUSH {:.2} us",
                bus_task.client_us, lean_task.client_us
            );
            println!(
                "   in-memory transport: {:.0} msg/s (>= 1,500,000)",
                memory.rate
            );
            println!(
                "   backlog scaling: {backlog_size} ready behind vs none {:>6.1}% (>= 90%), Redis command time {:.2} vs {:.2} us/msg",
                pct(backlog.rate, layout_pre.rate),
                backlog.command_us,
                layout_pre.command_us
            );
        }
        let _: () = env.admin.quit().await.unwrap();
        drop(env.redis);
    });
}
