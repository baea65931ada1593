//! The cost of durable sends (`RedisTransport::durable`: each write followed by `WAIT`
//! for one replica) against plain sends, measured in the same run against a real
//! primary and its replica: sends/s and CPU per send, one send at a time and with 1,000
//! in flight. Run: `cargo bench -p benches --bench durable`
//! (`ROUNDS=n` repeats; without `--bench`, as under `cargo test`, a small smoke run).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use benches::cpu::{clock_tick, Figure, Meter};
use bus_core::{Bus, BusConfig, RedisCommand};
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::{info_field, RedisServer};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

const IN_FLIGHT: usize = 1_000;
const WAIT_TIMEOUT: Duration = Duration::from_secs(1);

/// ~100-byte JSON body, as in the other benches.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "bench")]
struct Order {
    n: u64,
    customer: String,
    note: String,
}

fn order(n: u64) -> Order {
    Order {
        n,
        customer: format!("customer-{:08}", n % 10_000),
        note: "a small note to make the body about a hundred bytes long".to_owned(),
    }
}

struct Env {
    primary: RedisServer,
    _replica: RedisServer,
    meter: Meter,
    runs: AtomicU64,
}

impl Env {
    fn start() -> Env {
        let primary = RedisServer::start().expect("a primary");
        let replica = RedisServer::builder()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(primary.port().to_string())
            .start()
            .expect("a replica");
        let linked = (0..500).any(|_| {
            let info = replica.client().info("replication").unwrap_or_default();
            let up = info_field(&info, "master_link_status") == Some("up");
            if !up {
                std::thread::sleep(Duration::from_millis(20));
            }
            up
        });
        assert!(linked, "the replica never linked");
        let meter = Meter {
            redis_pid: primary.pid().expect("the primary runs"),
            tick: clock_tick(),
        };
        Env {
            primary,
            _replica: replica,
            meter,
            runs: AtomicU64::new(0),
        }
    }

    /// A plain bus and a durable one over one transport, in a fresh namespace.
    async fn buses(&self) -> (Bus, Bus) {
        let prefix = format!("d{}", self.runs.fetch_add(1, Ordering::Relaxed));
        let config = RedisConfig::from_url(&self.primary.url())
            .unwrap()
            .prefix(prefix);
        let transport = RedisTransport::connect(&config).await.unwrap();
        let durable = transport.durable(1, WAIT_TIMEOUT).await.unwrap();
        (
            Bus::new(transport, BusConfig::default()),
            Bus::new(durable, BusConfig::default()),
        )
    }
}

/// `count` sends through `bus`, `in_flight` at a time.
async fn sends(env: &Env, bus: &Bus, count: u64, in_flight: usize) -> Figure {
    let orders: Vec<Order> = (0..count).map(order).collect();
    let started = env.meter.start();
    futures::stream::iter(&orders)
        .map(|o| bus.send(o))
        .buffer_unordered(in_flight)
        .for_each(|r| {
            r.unwrap();
            async {}
        })
        .await;
    env.meter.stop(started, count)
}

fn row(name: &str, f: Figure) {
    println!(
        "{name:<36} {:>9.0} sends/s | CPU us/send: client {:>6.2} redis {:>6.2}",
        f.rate, f.client_us, f.redis_us
    );
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (single, many) = if smoke {
        (200, 2_000)
    } else {
        (10_000, 100_000)
    };
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if smoke { 1 } else { 2 });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let env = Env::start();
    rt.block_on(async {
        for round in 1..=rounds {
            println!(
                "\n== round {round}/{rounds}: a primary and one replica on loopback; durable = \
                 WAIT 1 replica (timeout {WAIT_TIMEOUT:?}) =="
            );
            let (plain, durable) = env.buses().await;
            let plain_one = sends(&env, &plain, single, 1).await;
            row(&format!("plain, one at a time ({single})"), plain_one);
            let durable_one = sends(&env, &durable, single, 1).await;
            row(&format!("durable, one at a time ({single})"), durable_one);
            let plain_many = sends(&env, &plain, many, IN_FLIGHT).await;
            row(
                &format!("plain, {IN_FLIGHT} in flight ({many})"),
                plain_many,
            );
            let durable_many = sends(&env, &durable, many, IN_FLIGHT).await;
            row(
                &format!("durable, {IN_FLIGHT} in flight ({many})"),
                durable_many,
            );
            println!(
                "   durable/plain: one at a time {:.0}% of the rate, {:.2}x the client CPU; \
                 {IN_FLIGHT} in flight {:.0}% of the rate, {:.2}x the client CPU",
                100.0 * durable_one.rate / plain_one.rate,
                durable_one.client_us / plain_one.client_us,
                100.0 * durable_many.rate / plain_many.rate,
                durable_many.client_us / plain_many.client_us,
            );
        }
    });
}
