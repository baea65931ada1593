//! The `bus` binary with its defaults, against what an application writes with its own:
//! a handler's transport failure shows each cause once in `bus dead` (and a refused send
//! shows its cause in its plain `Display`), and `bus sagas list` finds the sagas
//! `RedisSagaStore::for_transport` stores.

// The management tests' plumbing, shared rather than copied.
#[path = "../../bus-management/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::Source;
use bus_core::{CommandProcessor, Context, Host, ProcessError, ProcessingSettings, SagaStore};
use bus_redis::{RedisConfig, RedisTransport};
use bus_redis_saga::RedisSagaStore;
use bus_test_redis::{eventually, RedisServer, TestRedis};
use common::{Staging, Work};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Runs `bus --url <url> [--prefix <prefix>] args...` with stdin closed.
fn bus(url: &str, prefix: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bus"));
    command.env_remove("REDIS_URL").args(["--url", url]);
    if let Some(prefix) = prefix {
        command.args(["--prefix", prefix]);
    }
    let out = command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs");
    assert!(
        out.status.success(),
        "bus {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Forwards each message to another queue, so it fails when the send does.
struct Forwards;

#[async_trait]
impl CommandProcessor<Work> for Forwards {
    async fn process(&self, work: Work, ctx: &Context) -> Result<(), ProcessError> {
        ctx.bus().send(&Staging { n: work.n }).await?;
        Ok(())
    }

    fn settings(&self) -> ProcessingSettings {
        // One delivery: the first failure is the one error of the dead letter.
        ProcessingSettings::default().dead_letter_delivery_limit(1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_failure_in_a_handler_shows_each_cause_once() {
    // A private server: it is made to refuse writes.
    let server = RedisServer::start().unwrap();
    let redis = TestRedis::with_url(server.url()).unwrap();
    let ns = redis.namespace();
    let config = RedisConfig::from_url(&redis.url()).unwrap().prefix(ns);
    let transport = RedisTransport::connect(&config).await.unwrap();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Forwards)
        .build()
        .unwrap();
    host.bus().send(&Work { n: 1 }).await.unwrap();
    // Full: Redis refuses sends (OOM); the consumer's scripts still run (allow-oom), so
    // the handler's failing send is recorded and the message dead-lettered.
    let mut client = server.client();
    for (name, value) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
        client.cmd(&["CONFIG", "SET", name, value]).unwrap();
    }
    let stop = CancellationToken::new();
    let signal = stop.clone();
    let running = tokio::spawn(host.run(async move { signal.cancelled().await }));
    let dead = transport.keys(&Source::queue("work").unwrap()).dead;
    assert!(
        eventually(Duration::from_secs(10), || client
            .cmd(&["LLEN", &dead])
            .unwrap()
            .as_int()
            == Some(1))
        .await,
        "not dead-lettered"
    );
    stop.cancel();
    running.await.unwrap().unwrap();

    let out = bus(&redis.url(), Some(ns), &["--json", "dead", "work"]);
    let letters: Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors = letters[0]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{letters}");
    let message = errors[0]["message"].as_str().unwrap();
    let wide = bus(&redis.url(), Some(ns), &["dead", "work", "--wide"]);
    let table = String::from_utf8(wide.stdout).unwrap();
    // Each level says what happened there, and each cause shows once.
    for level in [
        "transport error",
        "Redis command failed",
        "OOM command not allowed",
    ] {
        assert_eq!(
            message.matches(level).count(),
            1,
            "{level:?} in {message:?}"
        );
        assert_eq!(table.matches(level).count(), 1, "{level:?} in\n{table}");
    }
}

/// What most applications do with an error: `{e}`, or `tracing`'s `error = %e` (the same
/// `Display`). A send refused by a full Redis says why, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_refused_by_a_full_redis_says_why_in_its_display() {
    let server = RedisServer::start().unwrap();
    let redis = TestRedis::with_url(server.url()).unwrap();
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace());
    let transport = RedisTransport::connect(&config).await.unwrap();
    let bus = bus_core::Bus::new(
        std::sync::Arc::new(transport),
        bus_core::BusConfig::default(),
    );
    let mut client = server.client();
    for (name, value) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
        client.cmd(&["CONFIG", "SET", name, value]).unwrap();
    }
    let error = bus
        .send(&Work { n: 1 })
        .await
        .expect_err("a full Redis refuses the send");
    const OOM: &str = "OOM command not allowed";
    for (how, text) in [
        ("{}", format!("{error}")),
        ("ErrorChain", bus_core::ErrorChain(&error).to_string()),
    ] {
        assert_eq!(text.matches(OOM).count(), 1, "{how}: {text}");
        assert!(text.starts_with("transport error: "), "{how}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sagas_list_with_defaults_finds_the_sagas_of_a_transport_with_defaults() {
    // Defaults everywhere: the transport's prefix (`bus`), the saga store on it, and the
    // tool without --prefix or --saga-prefix. (A private server: the keys are not in a
    // test namespace.)
    let server = RedisServer::start().unwrap();
    let config = RedisConfig::from_url(&server.url()).unwrap();
    let transport = RedisTransport::connect(&config).await.unwrap();
    let store = RedisSagaStore::for_transport(&transport);
    let ttl = Duration::from_secs(600);
    for id in ["o-1", "o-2"] {
        store.create("order", id, "{}".into(), ttl).await.unwrap();
    }
    let out = bus(&server.url(), None, &["--json", "sagas", "list"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|saga| saga["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["o-1", "o-2"], "{listed}");
    assert_eq!(listed[0]["key"], store.key("order", "o-1"));
    // The sagas of a store without a transport (`RedisSagaStore::new`) are the same ones.
    let plain = RedisSagaStore::new(transport.client().clone());
    assert_eq!(plain.key("order", "o-1"), store.key("order", "o-1"));
}
