//! One private Redis for a benchmark run, with what its phases measure: the CPU of the
//! redis-server and of this process per message, and Redis's own account of its command
//! time (`INFO commandstats`). Each phase gets a transport in a fresh key namespace.

use std::sync::atomic::{AtomicU64, Ordering};

use bus_redis::{RedisConfig, RedisTransport};
use fred::prelude::{Client, ClientLike};
use fred::types::Value;

use crate::cpu::{clock_tick, Meter};
use crate::BenchRedis;

/// The run's Redis, a connection for measuring it, and the CPU meter.
pub struct BenchEnv {
    /// The redis-server (dropped last: it stops the server).
    pub redis: BenchRedis,
    /// CPU per message of the redis-server and of this process.
    pub meter: Meter,
    /// A connection of its own, for `INFO` and `CONFIG RESETSTAT`.
    pub admin: Client,
    runs: AtomicU64,
}

impl std::fmt::Debug for BenchEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchEnv")
            .field("url", &self.redis.url)
            .finish_non_exhaustive()
    }
}

impl BenchEnv {
    /// Starts (or joins, with `REDIS_URL`) the run's Redis.
    pub async fn start() -> BenchEnv {
        let redis = BenchRedis::start();
        let admin = Client::new(
            fred::prelude::Config::from_url(&redis.url).unwrap(),
            None,
            None,
            None,
        );
        admin.init().await.unwrap();
        let info: String = admin
            .info(Some(fred::types::InfoKind::Server))
            .await
            .unwrap();
        let redis_pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("process_id in INFO server");
        BenchEnv {
            redis,
            meter: Meter {
                redis_pid,
                tick: clock_tick(),
            },
            admin,
            runs: AtomicU64::new(0),
        }
    }

    /// A fresh key namespace: `<letter><n>`.
    pub fn namespace(&self, letter: char) -> String {
        format!("{letter}{}", self.runs.fetch_add(1, Ordering::Relaxed))
    }

    /// A transport in a fresh namespace.
    pub async fn transport(&self, letter: char) -> RedisTransport {
        self.transport_and_prefix(letter).await.0
    }

    /// A transport in a fresh namespace, and the namespace's key prefix.
    pub async fn transport_and_prefix(&self, letter: char) -> (RedisTransport, String) {
        let prefix = self.namespace(letter);
        let config = RedisConfig::from_url(&self.redis.url)
            .unwrap()
            .prefix(prefix.clone());
        (RedisTransport::connect(&config).await.unwrap(), prefix)
    }

    /// A connection of its own (for a raw consumer).
    pub async fn client(&self) -> Client {
        let client = self.admin.clone_new();
        client.init().await.unwrap();
        client
    }

    /// Zeroes Redis's command statistics (before a timed phase).
    pub async fn reset_stats(&self) {
        let command = fred::types::CustomCommand::new_static("CONFIG", None, false);
        let _: Value = self.admin.custom(command, vec!["RESETSTAT"]).await.unwrap();
    }

    /// Redis's time in `commands` since the last reset, per message. Name only what the
    /// phase's clients send: `INFO commandstats` also counts a command a script calls,
    /// so naming one that scripts call counts its time twice. With `COMMANDSTATS` set,
    /// prints every command's figures after `phase`.
    pub async fn command_us(&self, phase: &str, messages: u64, commands: &[&str]) -> f64 {
        let info: String = self
            .admin
            .info(Some(fred::types::InfoKind::CommandStats))
            .await
            .unwrap();
        let print = std::env::var_os("COMMANDSTATS").is_some();
        if print {
            println!("-- INFO commandstats after {phase}:");
        }
        let mut usec = 0.0;
        for line in info.lines().filter(|l| l.starts_with("cmdstat_")) {
            if print {
                println!("   {line}");
            }
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            if commands.contains(&name) {
                usec += rest
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("usec="))
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0);
            }
        }
        usec / messages as f64
    }

    /// Closes the measuring connection; the server stops when `self` drops.
    pub async fn close(self) {
        let _: () = self.admin.quit().await.unwrap();
    }
}

/// What a bench run was asked for: `--bench` (without it, as `cargo test --benches` runs
/// it, a quick smoke run), `MESSAGES` per phase and `ROUNDS`.
#[derive(Debug, Clone, Copy)]
pub struct RunSettings {
    /// A smoke run: no `--bench` argument.
    pub smoke: bool,
    /// Messages per phase.
    pub messages: u64,
    /// Times the set of phases is repeated.
    pub rounds: u64,
}

impl RunSettings {
    /// From the arguments and the environment; `messages` of a smoke run and of a real
    /// one when `MESSAGES` is not set.
    pub fn from_env(smoke_messages: u64, bench_messages: u64) -> RunSettings {
        let smoke = !std::env::args().any(|a| a == "--bench");
        RunSettings {
            smoke,
            messages: env_number("MESSAGES").unwrap_or(if smoke {
                smoke_messages
            } else {
                bench_messages
            }),
            rounds: env_number("ROUNDS").unwrap_or(1),
        }
    }

    /// The runtime of a bench: two workers, as the machine has two cores.
    pub fn runtime(&self) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }
}

/// The environment variable `name` as a number, if set and valid.
pub fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|n| n.parse().ok())
}
