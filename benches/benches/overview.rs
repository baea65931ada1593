//! The dashboard overview's responsiveness: `GET /api/overview` timed against a
//! real Redis holding 200 queues and 1,000,000 messages (5,000 ready per queue, 10 dead),
//! beside the honest baseline of the same run: the Redis reads the overview makes,
//! `QueueSnapshot::read_all` called directly (no HTTP, no JSON, no history, no plots).
//! Run: `cargo bench -p benches --bench overview` (`ROUNDS=n` repeats the timing;
//! without `--bench`, as under `cargo test`, a small smoke run: 20 queues, 20,000).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use benches::BenchRedis;
use bus_core::transport::Source;
use bus_core::{Envelope, Format};
use bus_dashboard::{Dashboard, DashboardOptions, QueueSnapshot};
use bus_redis::admin::Admin;
use bus_redis::{RedisConfig, RedisTransport};
use bytes::Bytes;
use fred::prelude::{Client, ListInterface};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Requests timed per round.
const REQUESTS: usize = 30;

/// Fills `queues` queues with `per_queue` ready envelopes each (~100-byte JSON bodies),
/// 1,000 per `RPUSH`, all queues at once (fred pipelines the concurrent commands), and
/// 10 dead-letter ids per queue.
async fn fill(transport: &RedisTransport, queues: usize, per_queue: usize) {
    let body = br#"{"n":1,"customer":"c-000042","note":"a note of about one hundred bytes, as the other benches"}"#;
    let envelope = Bytes::from(
        Envelope::new("bench", Format::Json, &body[..])
            .encode()
            .unwrap(),
    );
    let client = transport.client();
    let mut pushes = Vec::new();
    for q in 0..queues {
        let keys = transport.keys(&Source::queue(format!("q{q:03}")).unwrap());
        for _ in 0..per_queue / 1000 {
            pushes.push(push(
                client,
                keys.ready.clone(),
                vec![envelope.clone(); 1000],
            ));
        }
        let dead = (0..10).map(|i| Bytes::from(format!("~d{i}"))).collect();
        pushes.push(push(client, keys.dead.clone(), dead));
    }
    futures::future::join_all(pushes).await;
}

async fn push(client: &Client, key: String, values: Vec<Bytes>) {
    let _: i64 = client.rpush(key, values).await.unwrap();
}

/// One `GET` over a fresh connection; the time to the whole response.
async fn get(addr: SocketAddr, path: &str) -> (Duration, usize) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    assert!(
        response.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&response[..response.len().min(300)])
    );
    (started.elapsed(), response.len())
}

fn summary(mut times: Vec<Duration>) -> (Duration, Duration, Duration) {
    times.sort();
    let p = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (p(0.5), p(0.95), *times.last().unwrap())
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (queues, per_queue) = if smoke { (20, 1_000) } else { (200, 5_000) };
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if smoke { 1 } else { 3 });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = BenchRedis::start();
    rt.block_on(async {
        let config = RedisConfig::from_url(&redis.url)
            .unwrap()
            .prefix("overview-bench");
        let transport = RedisTransport::connect(&config).await.unwrap();
        let started = Instant::now();
        fill(&transport, queues, per_queue).await;
        println!(
            "filled {queues} queues x {per_queue} = {} messages in {:.1?}",
            queues * per_queue,
            started.elapsed()
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let dashboard = Dashboard::new(transport.clone(), DashboardOptions::default());
        tokio::spawn(dashboard.serve(listener));
        let admin = Admin::new(transport.clone());
        // Warm up: the first request discovers the queues and loads the scripts.
        let (_, bytes) = get(addr, "/api/overview").await;
        let listed = admin.stats_all().await.unwrap();
        assert_eq!(listed.len(), queues, "queues listed");
        assert_eq!(
            listed.iter().map(|s| s.ready).sum::<u64>(),
            (queues * per_queue) as u64
        );
        println!("/api/overview: {bytes} bytes");
        for round in 1..=rounds {
            let mut overview = Vec::new();
            let mut baseline = Vec::new();
            for _ in 0..REQUESTS {
                overview.push(get(addr, "/api/overview").await.0);
                let t = Instant::now();
                QueueSnapshot::read_all(&transport).await.unwrap();
                baseline.push(t.elapsed());
            }
            let (o50, o95, omax) = summary(overview);
            let (b50, b95, bmax) = summary(baseline);
            println!(
                "round {round}/{rounds}: GET /api/overview median {o50:.1?} p95 {o95:.1?} max {omax:.1?} | \
                 baseline QueueSnapshot::read_all median {b50:.1?} p95 {b95:.1?} max {bmax:.1?} | \
                 ratio of medians {:.2}",
                o50.as_secs_f64() / b50.as_secs_f64()
            );
        }
    });
}
