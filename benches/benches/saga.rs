//! Saga update throughput against raw `HSET` round trips (SPEC §8: at least 50%), all
//! measured in the same run against the same private redis-server (or `REDIS_URL`).
//!
//! A saga update is what the host does for every saga message: read the saga (HMGET),
//! decode its JSON state, change it, encode it, and write it with the stamp-checked
//! update script (EVALSHA). The SPEC's baseline is one `HSET` of a value of the same
//! size; a second baseline does the same read-modify-write with plain HMGET + HSET (no
//! stamp check), and the two parts of a saga update are measured alone. Everything runs
//! one at a time (latency-bound) and as 64 tasks on one connection (fred pipelines them,
//! so Redis's and the client's CPU bound it).
//!
//! Run: `cargo bench -p benches --bench saga`; the ratios are printed at the end.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bus_core::{SagaStore, Stamp};
use bus_redis_saga::RedisSagaStore;
use bus_test_redis::RedisServer;
use bytes::Bytes;
use criterion::Criterion;
use fred::prelude::{Builder, Client, ClientLike, Config, HashesInterface};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

/// Tasks of the concurrent variants.
const TASKS: u64 = 64;

/// A small saga state, as a typical saga keeps.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Order {
    customer: String,
    items: u64,
    paid: bool,
}

/// Operations per second, per benchmark, as measured by each criterion batch.
static RATES: Mutex<BTreeMap<(u64, &'static str), Vec<f64>>> = Mutex::new(BTreeMap::new());

fn record(tasks: u64, op: Op, ops: u64, elapsed: Duration) {
    let rate = ops as f64 / elapsed.as_secs_f64();
    RATES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry((tasks, op.name()))
        .or_default()
        .push(rate);
}

fn median(tasks: u64, op: Op) -> f64 {
    let rates = RATES.lock().unwrap_or_else(PoisonError::into_inner);
    let mut values = rates.get(&(tasks, op.name())).cloned().unwrap_or_default();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

struct Env {
    rt: Runtime,
    client: Client,
    store: RedisSagaStore,
    /// A state-sized value for the raw writes.
    value: Bytes,
    /// The current stamp of saga `w-<task>`, for [`Op::SagaWrite`].
    stamps: Vec<Mutex<Option<Stamp>>>,
    /// What the host last wrote to saga `c-<task>`, for [`Op::CachedSagaUpdate`].
    written: Vec<Mutex<Option<(Bytes, Stamp)>>>,
    _server: Option<RedisServer>,
}

impl Env {
    fn start() -> Env {
        let (url, server) = match std::env::var("REDIS_URL") {
            Ok(url) => (url, None),
            Err(_) => {
                let server = RedisServer::start().expect("a redis-server for the benchmark");
                (server.url(), Some(server))
            }
        };
        let rt = Runtime::new().expect("a tokio runtime");
        let client = rt.block_on(async {
            let client = Builder::from_config(Config::from_url(&url).unwrap())
                .build()
                .unwrap();
            client.init().await.unwrap();
            client
        });
        let store = RedisSagaStore::new(client.clone()).prefix("bench");
        rt.block_on(async {
            create_sagas(&store, "u").await;
            create_sagas(&store, "w").await;
            create_sagas(&store, "c").await;
        });
        Env {
            rt,
            client,
            store,
            value: initial_state(),
            stamps: (0..TASKS).map(|_| Mutex::new(None)).collect(),
            written: (0..TASKS).map(|_| Mutex::new(None)).collect(),
            _server: server,
        }
    }
}

/// A saga state as stored, for the baselines' values.
fn initial_state() -> Bytes {
    let state = Order {
        customer: "customer-0042".into(),
        ..Order::default()
    };
    Bytes::from(serde_json::to_vec(&state).unwrap())
}

/// Creates the sagas `<prefix>-<task>` for every task.
async fn create_sagas(store: &RedisSagaStore, prefix: &str) {
    for task in 0..TASKS {
        let id = format!("{prefix}-{task}");
        let ttl = Duration::from_secs(3600);
        store
            .create("order", &id, initial_state(), ttl)
            .await
            .unwrap();
    }
}

/// What one benchmark iteration does, as task `task` of the run.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// Read, decode, modify, encode, stamp-checked write: the host's saga step.
    SagaUpdate,
    /// The host's saga step when it wrote the saga last: the state and stamp come from
    /// its cache (as in `bus_core`'s saga flow), then decode, modify, encode, write.
    CachedSagaUpdate,
    /// One HSET round trip: the SPEC's baseline.
    RawHset,
    /// HMGET, decode, modify, encode, HSET: the same step without the stamp check.
    RawReadModifyWrite,
    /// `SagaStore::get` alone.
    SagaGet,
    /// `SagaStore::update` alone (with the stamp of the previous write).
    SagaWrite,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::SagaUpdate => "saga_update",
            Op::CachedSagaUpdate => "saga_update_cached_read",
            Op::RawHset => "raw_hset",
            Op::RawReadModifyWrite => "raw_read_modify_write",
            Op::SagaGet => "part_saga_get",
            Op::SagaWrite => "part_saga_write",
        }
    }

    async fn run(self, env: &Env, task: u64) {
        match self {
            Op::SagaUpdate => {
                let id = format!("u-{task}");
                let (data, stamp) = env.store.get("order", &id).await.unwrap();
                let data = modify(&data);
                env.store.update("order", &id, data, &stamp).await.unwrap();
            }
            Op::CachedSagaUpdate => {
                let id = format!("c-{task}");
                let slot = &env.written[task as usize];
                let cached = slot.lock().unwrap_or_else(PoisonError::into_inner).clone();
                let (data, stamp) = match cached {
                    Some(entry) => entry,
                    None => env.store.get("order", &id).await.unwrap(),
                };
                let data = modify(&data);
                let stamp = env
                    .store
                    .update("order", &id, data.clone(), &stamp)
                    .await
                    .unwrap();
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some((data, stamp));
            }
            Op::RawHset => {
                let key = format!("raw:{task}");
                let _: i64 = env
                    .client
                    .hset(&key, ("data", env.value.clone()))
                    .await
                    .unwrap();
            }
            Op::RawReadModifyWrite => {
                let key = format!("rmw:{task}");
                let (data, _stamp): (Option<Bytes>, Option<String>) =
                    env.client.hmget(&key, vec!["data", "stamp"]).await.unwrap();
                let data = modify(&data.unwrap_or_else(initial_state));
                let _: i64 = env.client.hset(&key, [("data", data)]).await.unwrap();
            }
            Op::SagaGet => {
                env.store.get("order", &format!("u-{task}")).await.unwrap();
            }
            Op::SagaWrite => {
                let id = format!("w-{task}");
                let slot = &env.stamps[task as usize];
                let expected = slot.lock().unwrap_or_else(PoisonError::into_inner).clone();
                let expected = match expected {
                    Some(stamp) => stamp,
                    None => env.store.get("order", &id).await.unwrap().1,
                };
                let next = env
                    .store
                    .update("order", &id, env.value.clone(), &expected)
                    .await
                    .unwrap();
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(next);
            }
        }
    }
}

/// The handler's part: decode the state, change it, encode it.
fn modify(data: &[u8]) -> Bytes {
    let mut order: Order = serde_json::from_slice(data).unwrap();
    order.items += 1;
    Bytes::from(serde_json::to_vec(&order).unwrap())
}

/// Runs `iters` operations spread over `tasks` tasks.
fn run(env: &Arc<Env>, tasks: u64, iters: u64, op: Op) -> Duration {
    let started = Instant::now();
    env.rt.block_on(async {
        let handles = (0..tasks).map(|task| {
            let env = Arc::clone(env);
            // Spread the remainder so exactly `iters` operations run.
            let share = iters / tasks + u64::from(task < iters % tasks);
            tokio::spawn(async move {
                for _ in 0..share {
                    op.run(&env, task).await;
                }
            })
        });
        for handle in futures::future::join_all(handles).await {
            handle.unwrap();
        }
    });
    started.elapsed()
}

fn group(c: &mut Criterion, env: &Arc<Env>, tasks: u64) {
    let mut group = c.benchmark_group(format!("saga_{tasks}_tasks"));
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4));
    let ops = [
        Op::SagaUpdate,
        Op::CachedSagaUpdate,
        Op::RawHset,
        Op::RawReadModifyWrite,
        Op::SagaGet,
        Op::SagaWrite,
    ];
    for op in ops {
        group.bench_function(op.name(), |b| {
            b.iter_custom(|iters| {
                let elapsed = run(env, tasks, iters, op);
                record(tasks, op, iters, elapsed);
                elapsed
            });
        });
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let env = Arc::new(Env::start());
    group(&mut criterion, &env, 1);
    group(&mut criterion, &env, TASKS);
    criterion.final_summary();

    println!("\nsaga update vs raw HSET: median ops/s of criterion's batches (SPEC §8: >= 50%)");
    for tasks in [1, TASKS] {
        let saga = median(tasks, Op::SagaUpdate);
        let hset = median(tasks, Op::RawHset);
        let rmw = median(tasks, Op::RawReadModifyWrite);
        println!(
            "  {tasks:>2} task(s): saga update {saga:>8.0}/s = {:>5.1}% of raw HSET {hset:>8.0}/s, \
             {:>5.1}% of raw read-modify-write {rmw:>8.0}/s",
            100.0 * saga / hset,
            100.0 * saga / rmw,
        );
        let cached = median(tasks, Op::CachedSagaUpdate);
        println!(
            "             saga update with the host's cached read {cached:>8.0}/s = {:>5.1}% of raw HSET",
            100.0 * cached / hset,
        );
        println!(
            "             parts: get {:>8.0}/s, stamp-checked write {:>8.0}/s",
            median(tasks, Op::SagaGet),
            median(tasks, Op::SagaWrite),
        );
    }
}
