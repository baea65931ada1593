//! Shared plumbing of the benchmarks in `benches/`: a Redis to run against, and a place
//! to collect figures so each run can print ratios measured in the same run.

pub mod cpu;
pub mod env;
pub mod layout;
pub mod lean;
pub mod messages;
pub mod producer;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use bus_test_redis::RedisServer;

/// A private redis-server for the run (or `REDIS_URL`'s server).
#[derive(Debug)]
pub struct BenchRedis {
    /// The URL to connect to.
    pub url: String,
    _server: Option<RedisServer>,
}

impl BenchRedis {
    /// Starts a private server unless `REDIS_URL` is set.
    pub fn start() -> Self {
        match std::env::var("REDIS_URL") {
            Ok(url) => BenchRedis { url, _server: None },
            Err(_) => {
                let server = RedisServer::start().expect("redis-server for benchmarks");
                BenchRedis {
                    url: server.url(),
                    _server: Some(server),
                }
            }
        }
    }
}

/// Figures collected while criterion runs: name → per-iteration rates or latencies.
#[derive(Debug, Default)]
pub struct Figures(Mutex<BTreeMap<String, Vec<f64>>>);

impl Figures {
    /// Records one observation.
    pub fn record(&self, name: &str, value: f64) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .push(value);
    }

    /// The median of a series (NaN when empty).
    pub fn median(&self, name: &str) -> f64 {
        self.percentile(name, 50.0)
    }

    /// A percentile of a series (NaN when empty).
    pub fn percentile(&self, name: &str, p: f64) -> f64 {
        let figures = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(values) = figures.get(name) else {
            return f64::NAN;
        };
        let mut values = values.clone();
        values.sort_by(f64::total_cmp);
        let rank = ((p / 100.0) * (values.len() as f64 - 1.0)).round() as usize;
        values.get(rank).copied().unwrap_or(f64::NAN)
    }
}

/// Messages per second.
pub fn rate(messages: u64, elapsed: Duration) -> f64 {
    messages as f64 / elapsed.as_secs_f64()
}

/// With `--features mimalloc`, every bench runs on mimalloc instead of the system
/// allocator: what a faster allocator changes in the host's CPU per message.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
