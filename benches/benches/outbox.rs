//! The outbox and the inbox (bus-outbox; docs/performance.md, "Outbox and inbox"),
//! against a private PostgreSQL (the test harness's: `initdb`, fsync off,
//! `synchronous_commit` on) or `DATABASE_URL`'s, and a private Redis, beside plain sends
//! in the same run. A plain `main` that prints a table:
//!
//! `cargo bench -p benches --bench outbox` (`ROUNDS=n` repeats the set; `MESSAGES=n`
//! rows per backlog phase, 100,000 by default; `RATE=n` rows per second of the steady
//! phases, 10,000 by default; `ROWS_PER_TX=n`, 10 by default; `SECONDS=n` per steady
//! phase, 10 by default).
//!
//! - Relay a backlog: `MESSAGES` committed rows relayed by one relay (batches of 500, two
//!   cycles at once),
//!   against the same messages sent by `send_batch_deduplicated` in batches of 500 (the
//!   transport call the relay makes) and by `send_batch`.
//! - Steady load: writers commit `RATE` rows per second (`ROWS_PER_TX` per transaction,
//!   paced), a relay runs beside a host whose no-op handler notes when each message
//!   starts; latency from a transaction's commit to its message's handler start (an
//!   upper bound of commit to stored in Redis: it adds the host's wake-up), p50 and p99.
//!   Beside it, the same pacing with `send_batch`: from the send's return to the handler.
//! - Inbox: a pre-filled queue handled by one host (64 handlers) with a no-op handler,
//!   without and with the `InboxLayer` (BEGIN, the mark's INSERT, COMMIT per message).
//!
//! Reported: msg/s, and per message the CPU of Redis, of PostgreSQL (the postmaster and
//! its backends) and of this process (`/proc/<pid>/stat`, 10 ms resolution).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use benches::cpu::{clock_tick, cpu_seconds, Figure};
use benches::env::{env_number, BenchEnv, RunSettings};
use benches::layout::unsettled;
use benches::messages::{order, Noop, Order};
use bus_core::transport::Source;
use bus_core::{Bus, BusConfig, CommandProcessor, Context, Host, ProcessError, ProcessingSettings};
use bus_outbox::sqlx::postgres::PgPoolOptions;
use bus_outbox::sqlx::PgPool;
use bus_outbox::{InboxLayer, Outbox, Relay, RelayConfig};
use bus_redis::RedisTransport;
use bus_test_redis::PostgresServer;
use futures::StreamExt;

/// The run's PostgreSQL: a private cluster unless `DATABASE_URL` names one.
struct BenchPostgres {
    url: String,
    /// The postmaster, whose CPU and its backends' is measured (private cluster only).
    pid: Option<u32>,
    _server: Option<PostgresServer>,
}

impl BenchPostgres {
    fn start() -> BenchPostgres {
        match std::env::var("DATABASE_URL") {
            Ok(url) => BenchPostgres {
                url,
                pid: None,
                _server: None,
            },
            Err(_) => {
                let server = PostgresServer::start().expect("postgres for benchmarks");
                BenchPostgres {
                    url: server.url("postgres"),
                    pid: server.pid(),
                    _server: Some(server),
                }
            }
        }
    }

    /// CPU seconds of the postmaster and its children so far.
    fn cpu(&self, tick: f64) -> f64 {
        let Some(pid) = self.pid else {
            return f64::NAN;
        };
        let mut total = cpu_seconds(pid, tick);
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            // The parent pid is the second field after the command's closing parenthesis.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if parent == Some(pid) {
                total += cpu_seconds(child, tick);
            }
        }
        total
    }

    async fn pool(&self, connections: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(connections)
            .connect(&self.url)
            .await
            .unwrap()
    }
}

/// A phase's figure and PostgreSQL's CPU per message.
struct Measured {
    figure: Figure,
    postgres_us: f64,
}

impl Measured {
    fn print(&self, name: &str) {
        self.figure.print(name);
        println!(
            "{:<48} {:>15} | CPU us/msg: postgres {:>6.2}",
            "", "", self.postgres_us
        );
    }
}

struct Phase<'a> {
    env: &'a BenchEnv,
    pg: &'a BenchPostgres,
    started: benches::cpu::Started,
    pg_cpu: f64,
}

impl<'a> Phase<'a> {
    fn start(env: &'a BenchEnv, pg: &'a BenchPostgres) -> Self {
        Phase {
            env,
            pg,
            pg_cpu: pg.cpu(env.meter.tick),
            started: env.meter.start(),
        }
    }

    fn stop(self, messages: u64) -> Measured {
        let figure = self.env.meter.stop(self.started, messages);
        let postgres_us = (self.pg.cpu(self.env.meter.tick) - self.pg_cpu) * 1e6 / messages as f64;
        Measured {
            figure,
            postgres_us,
        }
    }
}

/// Empties the outbox's tables between phases.
async fn truncate(pool: &PgPool) {
    bus_outbox::sqlx::query("TRUNCATE bus_outbox, bus_outbox_dead, bus_inbox")
        .execute(pool)
        .await
        .unwrap();
}

/// Commits `count` rows, `per_tx` to a transaction, 8 transactions at once.
async fn fill_outbox(pool: &PgPool, outbox: &Outbox, count: u64, per_tx: u64) {
    let transactions = (0..count.div_ceil(per_tx)).map(|t| {
        let (pool, outbox) = (pool.clone(), outbox.clone());
        async move {
            let mut tx = pool.begin().await?;
            for n in t * per_tx..((t + 1) * per_tx).min(count) {
                outbox.send(&mut tx, &order(n)).await?;
            }
            tx.commit().await?;
            Ok::<_, bus_outbox::Error>(())
        }
    });
    let mut transactions = futures::stream::iter(transactions).buffer_unordered(8);
    while let Some(done) = transactions.next().await {
        done.unwrap();
    }
}

/// One relay moves a backlog of `count` committed rows to Redis.
async fn relay_backlog(env: &BenchEnv, pg: &BenchPostgres, pool: &PgPool, count: u64) -> Measured {
    truncate(pool).await;
    let transport = env.transport('o').await;
    let outbox = Outbox::new(Bus::new(transport.clone(), BusConfig::default()));
    fill_outbox(pool, &outbox, count, 100).await;
    let relay = Relay::new(pool.clone(), transport, RelayConfig::default());
    let phase = Phase::start(env, pg);
    let stop = tokio_util::sync::CancellationToken::new();
    let relaying = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run_until(stop).await }
    });
    loop {
        let waiting: bool =
            bus_outbox::sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM bus_outbox)")
                .fetch_one(pool)
                .await
                .unwrap();
        if !waiting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let measured = phase.stop(count);
    stop.cancel();
    relaying.await.unwrap().unwrap();
    measured
}

/// The same messages sent straight to Redis in batches of 500.
async fn send_batches(env: &BenchEnv, pg: &BenchPostgres, dedup: bool, count: u64) -> Measured {
    let transport = env.transport('p').await;
    let bus = Bus::new(transport, BusConfig::default());
    let orders: Vec<Order> = (0..count).map(order).collect();
    let phase = Phase::start(env, pg);
    for (b, batch) in orders.chunks(500).enumerate() {
        if dedup {
            let keys: Vec<String> = (0..batch.len()).map(|i| format!("m-{b}-{i}")).collect();
            let options = bus_core::SendOptions::new();
            bus.send_batch_deduplicated(batch, &keys, &options)
                .await
                .unwrap();
        } else {
            bus.send_batch(batch).await.unwrap();
        }
    }
    phase.stop(count)
}

/// When each message's handler started, by message id.
#[derive(Clone, Default)]
struct Starts(Arc<Mutex<HashMap<String, Instant>>>);

#[async_trait::async_trait]
impl CommandProcessor<Order> for Starts {
    async fn process(&self, _: Order, ctx: &Context) -> Result<(), ProcessError> {
        let now = Instant::now();
        self.0
            .lock()
            .unwrap()
            .insert(ctx.message_id().to_string(), now);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        <Noop as CommandProcessor<Order>>::settings(&Noop::default())
    }
}

/// Latencies of a steady phase: p50 and p99 in ms, and the rate achieved.
struct Latency {
    p50_ms: f64,
    p99_ms: f64,
    rate: f64,
}

/// `seconds` of paced writes, `per_tx` rows per transaction at `rate` rows/s, through
/// the outbox (`outbox`) or straight to Redis; latency to each handler's start.
async fn steady(
    env: &BenchEnv,
    pool: &PgPool,
    through_outbox: bool,
    rate: u64,
    per_tx: u64,
    seconds: u64,
) -> Latency {
    truncate(pool).await;
    let transport: RedisTransport = env.transport('l').await;
    let keys = transport.keys(&Source::queue("bench").unwrap());
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let outbox = Outbox::new(bus.clone());
    let starts = Starts::default();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Order, _>(starts.clone())
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    // The relay's pool of its own, as a relay process would have.
    let relay_pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with((*pool.connect_options()).clone())
        .await
        .unwrap();
    let relaying = through_outbox.then(|| {
        let relay = Relay::new(
            relay_pool.clone(),
            transport.clone(),
            RelayConfig::default(),
        );
        let stop = stop.clone();
        tokio::spawn(async move { relay.run_until(stop).await })
    });
    let stored: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let transactions = rate * seconds / per_tx;
    let every = Duration::from_secs_f64(per_tx as f64 / rate as f64);
    let began = Instant::now();
    let writes = (0..transactions).map(|t| {
        let (pool, outbox, bus, stored) =
            (pool.clone(), outbox.clone(), bus.clone(), stored.clone());
        async move {
            tokio::time::sleep_until((began + every * t as u32).into()).await;
            let orders: Vec<Order> = (t * per_tx..(t + 1) * per_tx).map(order).collect();
            let ids: Vec<String> = if through_outbox {
                let mut tx = pool.begin().await.unwrap();
                let mut ids = Vec::with_capacity(orders.len());
                for o in &orders {
                    ids.push(outbox.send(&mut tx, o).await.unwrap().to_string());
                }
                tx.commit().await.unwrap();
                ids
            } else {
                let ids = bus.send_batch(&orders).await.unwrap();
                ids.iter().map(ToString::to_string).collect()
            };
            let now = Instant::now();
            let mut stored = stored.lock().unwrap();
            for id in ids {
                stored.insert(id, now);
            }
        }
    });
    let mut writes = futures::stream::iter(writes).buffer_unordered(64);
    while writes.next().await.is_some() {}
    let written = began.elapsed();
    let total = transactions * per_tx;
    while starts.0.lock().unwrap().len() < total as usize
        || unsettled(transport.client(), &keys).await > 0
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    if let Some(relaying) = relaying {
        relaying.await.unwrap().unwrap();
    }
    running.shutdown().await.unwrap();
    let stored = stored.lock().unwrap();
    let starts = starts.0.lock().unwrap();
    let mut latencies: Vec<f64> = stored
        .iter()
        .filter_map(|(id, at)| {
            let start = starts.get(id)?;
            Some(start.saturating_duration_since(*at).as_secs_f64() * 1e3)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    Latency {
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        rate: total as f64 / written.as_secs_f64(),
    }
}

/// The inbox's handler: asks for the transaction, writes nothing.
#[derive(Clone, Default)]
struct InboxNoop(Noop);

#[async_trait::async_trait]
impl CommandProcessor<Order> for InboxNoop {
    async fn process(&self, order: Order, ctx: &Context) -> Result<(), ProcessError> {
        let _ = bus_outbox::InboxExt::transaction(ctx).await?;
        <Noop as CommandProcessor<Order>>::process(&self.0, order, ctx).await
    }
    fn settings(&self) -> ProcessingSettings {
        handler_settings()
    }
}

/// 64 handlers, 256 prefetched: the same for both inbox phases (the inbox's pool has
/// 64 connections).
fn handler_settings() -> ProcessingSettings {
    ProcessingSettings::default()
        .max_concurrent_calls(64)
        .prefetch_count(256)
}

/// A host handles a pre-filled queue of `count`, with the inbox (`inbox`) or without.
async fn handles(env: &BenchEnv, pg: &BenchPostgres, inbox: bool, count: u64) -> Measured {
    let transport = env.transport('i').await;
    let keys = transport.keys(&Source::queue("bench").unwrap());
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let orders: Vec<Order> = (0..count).map(order).collect();
    for batch in orders.chunks(1_000) {
        bus.send_batch(batch).await.unwrap();
    }
    let handler = InboxNoop::default();
    let mut builder = Host::builder().transport(transport.clone());
    let inbox_pool = if inbox {
        // The layer's pool of its own (see InboxLayer).
        let pool = pg.pool(64).await;
        builder = builder.middleware(InboxLayer::new(pool.clone()));
        Some(pool)
    } else {
        None
    };
    let host = if inbox {
        builder.command::<Order, _>(Settings(handler.clone(), handler_settings()))
    } else {
        builder.command::<Order, _>(Settings(handler.0.clone(), handler_settings()))
    }
    .build()
    .unwrap();
    let phase = Phase::start(env, pg);
    let running = host.start().await.unwrap();
    while handler.0.handled() < count || unsettled(transport.client(), &keys).await > 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let measured = phase.stop(count);
    running.shutdown().await.unwrap();
    if let Some(pool) = inbox_pool {
        pool.close().await;
    }
    measured
}

/// A processor with other settings.
struct Settings<P>(P, ProcessingSettings);

#[async_trait::async_trait]
impl<P: CommandProcessor<Order>> CommandProcessor<Order> for Settings<P> {
    async fn process(&self, order: Order, ctx: &Context) -> Result<(), ProcessError> {
        self.0.process(order, ctx).await
    }
    fn settings(&self) -> ProcessingSettings {
        self.1.clone()
    }
}

fn main() {
    let run = RunSettings::from_env(2_000, 100_000);
    let (count, rounds) = (run.messages, run.rounds);
    let rate = env_number("RATE").unwrap_or(if run.smoke { 1_000 } else { 10_000 });
    let per_tx = env_number("ROWS_PER_TX").unwrap_or(10).max(1);
    let seconds = env_number("SECONDS").unwrap_or(if run.smoke { 1 } else { 10 });
    let rt = run.runtime();
    rt.block_on(async {
        let env = BenchEnv::start().await;
        let pg = BenchPostgres::start();
        let pool = pg.pool(32).await;
        Outbox::migrate(&pool).await.unwrap();
        let _ = clock_tick();
        for round in 1..=rounds {
            println!("\n== round {round}/{rounds}: {count} rows per backlog phase, {rate} rows/s ({per_tx} per transaction) for {seconds} s per steady phase ==");
            let relayed = relay_backlog(&env, &pg, &pool, count).await;
            relayed.print("relay a backlog (500 per cycle, 2 at once)");
            let dedup = send_batches(&env, &pg, true, count).await;
            dedup.print("send_batch_deduplicated of 500 (baseline)");
            let plain = send_batches(&env, &pg, false, count).await;
            plain.print("send_batch of 500");
            println!(
                "   relay / deduplicated batches: {:.1}%, relay / plain batches: {:.1}%",
                relayed.figure.rate / dedup.figure.rate * 100.0,
                relayed.figure.rate / plain.figure.rate * 100.0
            );
            let through = steady(&env, &pool, true, rate, per_tx, seconds).await;
            println!(
                "steady, through the outbox: {:>8.0} rows/s written | commit to handler start: p50 {:>6.2} ms, p99 {:>6.2} ms",
                through.rate, through.p50_ms, through.p99_ms
            );
            let direct = steady(&env, &pool, false, rate, per_tx, seconds).await;
            println!(
                "steady, plain send_batch:   {:>8.0} rows/s written | send to handler start:   p50 {:>6.2} ms, p99 {:>6.2} ms",
                direct.rate, direct.p50_ms, direct.p99_ms
            );
            let without = handles(&env, &pg, false, count).await;
            without.print("handle, no-op handler (baseline)");
            let with = handles(&env, &pg, true, count).await;
            with.print("handle with the InboxLayer");
            println!(
                "   inbox: throughput {:.1}%, client CPU +{:.2} us/msg, PostgreSQL CPU {:.2} us/msg",
                with.figure.rate / without.figure.rate * 100.0,
                with.figure.client_us - without.figure.client_us,
                with.postgres_us - without.postgres_us
            );
        }
        pool.close().await;
        env.close().await;
    });
}
