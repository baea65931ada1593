//! Redis transport benchmarks (SPEC §8), each with its raw fred baseline measured in the
//! same run. Run: `cargo bench -p benches --bench transport`; the ratios are printed at
//! the end.

use bus_core::transport::ConsumerExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use benches::messages::Noop;
use benches::{rate, BenchRedis, Figures};
use bus_core::transport::{ConsumerOptions, Source};
use bus_core::{
    Bus, BusConfig, CommandProcessor, Context, Host, ProcessError, RedisCommand, Transport,
};
use bus_redis::{RedisConfig, RedisTransport};
use bytes::Bytes;
use criterion::Criterion;
use fred::prelude::{Client, ClientLike, ListInterface};
use fred::types::lists::LMoveDirection;
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const END_TO_END: u64 = 100_000;
const SCALING: u64 = 20_000;
const BATCH: usize = 1_000;
const WAKEUPS: usize = 200;

#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "bench")]
struct Small {
    n: u64,
}

static FIGURES: OnceLock<Figures> = OnceLock::new();
fn figures() -> &'static Figures {
    FIGURES.get_or_init(Figures::default)
}

struct Env {
    rt: Runtime,
    redis: BenchRedis,
    runs: AtomicU64,
}

impl Env {
    /// A transport in a fresh namespace, so iterations do not see each other's keys.
    fn transport(&self) -> RedisTransport {
        let prefix = format!("b{}", self.runs.fetch_add(1, Ordering::Relaxed));
        let config = RedisConfig::from_url(&self.redis.url)
            .unwrap()
            .prefix(prefix);
        self.rt.block_on(RedisTransport::connect(&config)).unwrap()
    }
}

fn smalls(count: u64) -> Vec<Small> {
    (0..count).map(|n| Small { n }).collect()
}

/// Sends `count` messages in batches through the bus while a host processes them; the
/// time until every one is handled and acknowledged (when only the `stuck` messages some
/// other consumer holds in flight remain stored).
async fn bus_end_to_end(transport: RedisTransport, count: u64, stuck: u64) -> Duration {
    let noop = Noop::default();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Small, _>(noop.clone())
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    let bus = running.bus();
    let keys = transport.keys(&Source::queue("bench").unwrap());
    let messages = smalls(count);
    let started = Instant::now();
    for batch in messages.chunks(BATCH) {
        bus.send_batch(batch).await.unwrap();
    }
    loop {
        if noop.handled() >= count
            && benches::layout::unsettled(transport.client(), &keys).await == stuck
        {
            break;
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    let elapsed = started.elapsed();
    running.shutdown().await.unwrap();
    elapsed
}

/// The same circular-list pattern straight on fred: pipelined RPUSH of the same
/// envelopes; a consumer that pipelines 1,000 LMOVEs into a processing list, then
/// pipelines an LREM for each (from the head, where they are: the cheapest case).
async fn raw_end_to_end(client: Client, prefix: &str, count: u64) -> Duration {
    let (ready, processing) = (
        format!("{prefix}:raw:ready"),
        format!("{prefix}:raw:processing"),
    );
    let payloads = encoded(count);
    let started = Instant::now();
    let consumer = {
        let (client, ready, processing) = (client.clone(), ready.clone(), processing.clone());
        tokio::spawn(async move {
            let mut done = 0;
            while done < count {
                let moves = (0..BATCH).map(|_| {
                    client.lmove::<Option<Bytes>, _, _>(
                        &ready,
                        &processing,
                        LMoveDirection::Left,
                        LMoveDirection::Right,
                    )
                });
                let got: Vec<Bytes> = futures::future::try_join_all(moves)
                    .await
                    .unwrap()
                    .into_iter()
                    .flatten()
                    .collect();
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let acks = got
                    .iter()
                    .map(|v| client.lrem::<i64, _, _>(&processing, 1, v.clone()));
                futures::future::try_join_all(acks).await.unwrap();
                done += got.len() as u64;
            }
        })
    };
    for batch in payloads.chunks(BATCH) {
        let _: i64 = client.rpush(&ready, batch.to_vec()).await.unwrap();
    }
    consumer.await.unwrap();
    started.elapsed()
}

/// Envelopes as the bus encodes them, for the raw baselines.
fn encoded(count: u64) -> Vec<Bytes> {
    smalls(count)
        .iter()
        .map(|m| {
            let body = bus_core::Format::Json.encode("bench", m).unwrap();
            Bytes::from(
                bus_core::Envelope::new("bench", bus_core::Format::Json, body)
                    .encode()
                    .unwrap(),
            )
        })
        .collect()
}

fn end_to_end(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("end_to_end_100k");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.bench_function("bus", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let elapsed = env
                    .rt
                    .block_on(bus_end_to_end(env.transport(), END_TO_END, 0));
                figures().record("e2e bus", rate(END_TO_END, elapsed));
                total += elapsed;
            }
            total
        });
    });
    group.bench_function("raw_fred", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let transport = env.transport();
                let prefix = transport.config().key_prefix().to_owned();
                let elapsed = env.rt.block_on(raw_end_to_end(
                    transport.client().clone(),
                    &prefix,
                    END_TO_END,
                ));
                figures().record("e2e raw", rate(END_TO_END, elapsed));
                total += elapsed;
            }
            total
        });
    });
    group.finish();
}

/// End-to-end throughput while `stuck` other messages sit in flight (reserved by a
/// consumer that never finishes them).
fn in_flight_scaling(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("in_flight_scaling_20k");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for stuck in [10u64, 5_000] {
        group.bench_function(format!("{stuck}_in_flight"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let transport = env.transport();
                    let holder = env.rt.block_on(async {
                        let bus = Bus::new(transport.clone(), BusConfig::default());
                        for batch in smalls(stuck).chunks(BATCH) {
                            bus.send_batch(batch).await.unwrap();
                        }
                        let source = Source::queue("bench").unwrap();
                        let options = ConsumerOptions::new(Duration::from_secs(3600), 5);
                        let holder = transport.consumer(&source, options).await.unwrap();
                        // (One reserve leases at most 1,000: take them in turns.)
                        let mut held = 0;
                        while held < stuck {
                            let taken = holder
                                .take((stuck - held) as usize, &CancellationToken::new())
                                .await
                                .unwrap();
                            assert!(!taken.is_empty(), "only {held} of {stuck} held");
                            held += taken.len() as u64;
                        }
                        holder
                    });
                    let elapsed = env.rt.block_on(bus_end_to_end(transport, SCALING, stuck));
                    drop(holder);
                    figures().record(&format!("scaling {stuck}"), rate(SCALING, elapsed));
                    total += elapsed;
                }
                total
            });
        });
    }
    group.finish();
}

fn batch_send(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("batch_send_100k");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    let messages = smalls(END_TO_END);
    group.bench_function("bus_send_batch", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let transport = env.transport();
                let bus = Bus::new(transport, BusConfig::default());
                let elapsed = env.rt.block_on(async {
                    let started = Instant::now();
                    futures::future::try_join_all(
                        messages.chunks(BATCH).map(|batch| bus.send_batch(batch)),
                    )
                    .await
                    .unwrap();
                    started.elapsed()
                });
                figures().record("send bus", rate(END_TO_END, elapsed));
                total += elapsed;
            }
            total
        });
    });
    let payloads = encoded(END_TO_END);
    group.bench_function("raw_rpush", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let transport = env.transport();
                let client = transport.client();
                let key = format!("{}:raw:ready", transport.config().key_prefix());
                let elapsed = env.rt.block_on(async {
                    let started = Instant::now();
                    let pushes = payloads
                        .chunks(BATCH)
                        .map(|batch| client.rpush::<i64, _, _>(&key, batch.to_vec()));
                    futures::future::try_join_all(pushes).await.unwrap();
                    started.elapsed()
                });
                figures().record("send raw", rate(END_TO_END, elapsed));
                total += elapsed;
            }
            total
        });
    });
    group.finish();
}

/// Signals the instant each handler starts.
#[derive(Clone)]
struct Started(mpsc::UnboundedSender<Instant>);

#[async_trait]
impl CommandProcessor<Small> for Started {
    async fn process(&self, _: Small, _: &Context) -> Result<(), ProcessError> {
        let _ = self.0.send(Instant::now());
        Ok(())
    }
}

fn idle_wakeup(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group("idle_wakeup");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("send_to_handler_start", |b| {
        b.iter_custom(|iters| {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let transport = env.transport();
            env.rt.block_on(async {
                let host = Host::builder()
                    .transport(transport)
                    .command::<Small, _>(Started(tx))
                    .build()
                    .unwrap();
                let bus = host.bus();
                let stop = CancellationToken::new();
                let signal = stop.clone();
                let running = tokio::spawn(host.run(async move { signal.cancelled().await }));
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    for _ in 0..WAKEUPS / 10 {
                        // Let the consumer fall idle, blocked in Redis.
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        let sent = Instant::now();
                        bus.send(&Small { n: 0 }).await.unwrap();
                        let started = rx.recv().await.unwrap();
                        let latency = started - sent;
                        figures().record("wakeup", latency.as_secs_f64() * 1e3);
                        total += latency;
                    }
                }
                stop.cancel();
                running.await.unwrap().unwrap();
                total
            })
        });
    });
    group.finish();
}

/// Redis memory per queued message with a 100-byte JSON body.
fn memory(env: &Env) -> (f64, usize, usize) {
    #[derive(Serialize, Deserialize, RedisCommand)]
    #[bus(queue = "memory")]
    struct Hundred {
        text: String,
    }
    const COUNT: usize = 20_000;
    let body_len = bus_core::Format::Json
        .encode(
            "memory",
            &Hundred {
                text: "x".repeat(89),
            },
        )
        .unwrap()
        .len();
    let transport = env.transport();
    env.rt.block_on(async {
        let client = transport.client().clone();
        let used = |info: String| -> f64 {
            info.lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(f64::NAN)
        };
        let before = used(
            client
                .info(Some(fred::types::InfoKind::Memory))
                .await
                .unwrap(),
        );
        let bus = Bus::new(transport.clone(), BusConfig::default());
        let messages: Vec<Hundred> = (0..COUNT)
            .map(|_| Hundred {
                text: "x".repeat(89),
            })
            .collect();
        for batch in messages.chunks(BATCH) {
            bus.send_batch(batch).await.unwrap();
        }
        let after = used(
            client
                .info(Some(fred::types::InfoKind::Memory))
                .await
                .unwrap(),
        );
        let body = bus_core::Format::Json
            .encode("memory", &messages[0])
            .unwrap();
        let envelope_len = bus_core::Envelope::new("memory", bus_core::Format::Json, body)
            .encode()
            .unwrap()
            .len();
        let _: () = client.quit().await.unwrap();
        ((after - before) / COUNT as f64, body_len, envelope_len)
    })
}

fn main() {
    let env = Env {
        rt: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
        redis: BenchRedis::start(),
        runs: AtomicU64::new(0),
    };
    let mut c = Criterion::default().configure_from_args();
    end_to_end(&mut c, &env);
    in_flight_scaling(&mut c, &env);
    batch_send(&mut c, &env);
    idle_wakeup(&mut c, &env);
    c.final_summary();
    let (per_message, body, envelope) = memory(&env);

    let f = figures();
    let ratio = |a: &str, b: &str| f.median(a) / f.median(b) * 100.0;
    println!("\n== SPEC §8 figures (medians of this run) ==");
    println!(
        "end to end, 100k:   bus {:>9.0} msg/s, raw fred {:>9.0} msg/s: {:>5.1}% (target >= 60%)",
        f.median("e2e bus"),
        f.median("e2e raw"),
        ratio("e2e bus", "e2e raw")
    );
    println!("in-flight scaling:  5,000 in flight {:>9.0} msg/s, 10 in flight {:>9.0} msg/s: {:>5.1}% (target >= 80%)",
        f.median("scaling 5000"), f.median("scaling 10"), ratio("scaling 5000", "scaling 10"));
    println!(
        "batch send, 100k:   bus {:>9.0} msg/s, raw RPUSH {:>9.0} msg/s: {:>5.1}% (target >= 80%)",
        f.median("send bus"),
        f.median("send raw"),
        ratio("send bus", "send raw")
    );
    println!(
        "idle wake-up:       median {:.3} ms, p99 {:.3} ms over {} sends (targets < 1 ms, < 5 ms)",
        f.median("wakeup"),
        f.percentile("wakeup", 99.0),
        WAKEUPS
    );
    println!("memory per message: {per_message:.0} bytes for a {body}-byte body ({envelope}-byte envelope): {:.2}x the body, {:.2}x the envelope (target < 2x)",
        per_message / body as f64, per_message / envelope as f64);
}
