//! `bus_redis::admin::health` (what `bus doctor` and the dashboard show) against real
//! Redis servers configured the bad way: an evicting policy, no persistence, memory near
//! maxmemory, a replica that stopped answering, a user who may not run scripts, another
//! protocol version under the prefix. Each finding says what to change.

use std::process::Command;
use std::time::Duration;

use bus_redis::admin::{health, Health, HealthCheck, Severity};
use bus_redis::{keys, RedisConfig};
use bus_test_redis::{eventually_async as eventually, info_field, RedisServer};

const WAIT: Duration = Duration::from_secs(30);
const PREFIX: &str = "doctor-test";

async fn check(url: &str) -> Health {
    let client = RedisConfig::from_url(url)
        .unwrap()
        .connect_client()
        .await
        .unwrap();
    health(&client, PREFIX).await
}

fn finding<'a>(health: &'a Health, name: &str) -> &'a HealthCheck {
    health
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} check in {health:#?}"))
}

#[tokio::test]
async fn an_evicting_redis_without_persistence_is_reported_with_what_to_change() {
    let server = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .arg("--maxmemory")
        .arg("100mb")
        .start()
        .unwrap();
    let health = check(&server.url()).await;
    let eviction = finding(&health, "eviction");
    assert_eq!(eviction.severity, Severity::Critical, "{eviction:?}");
    assert!(eviction.found.contains("allkeys-lru"), "{eviction:?}");
    assert!(
        eviction.advice.as_deref().unwrap().contains("noeviction"),
        "{eviction:?}"
    );
    // The harness starts Redis with `--save "" --appendonly no`.
    let persistence = finding(&health, "persistence");
    assert_eq!(persistence.severity, Severity::Warning, "{persistence:?}");
    assert!(persistence
        .advice
        .as_deref()
        .unwrap()
        .contains("appendonly yes"));
    for fine in ["memory", "replication", "scripts", "protocol"] {
        assert_eq!(finding(&health, fine).severity, Severity::Ok, "{health:#?}");
    }
    assert_eq!(health.worst(), Severity::Critical);
    assert!(health.redis_version.is_some());
}

#[tokio::test]
async fn a_well_configured_redis_is_all_ok() {
    let server = RedisServer::builder()
        .appendonly(true)
        .arg("--maxmemory-policy")
        .arg("noeviction")
        .start()
        .unwrap();
    let health = check(&server.url()).await;
    assert_eq!(health.worst(), Severity::Ok, "{health:#?}");
    assert_eq!(health.checks.len(), 6, "{health:#?}");
}

#[tokio::test]
async fn memory_near_maxmemory_is_critical() {
    let server = RedisServer::start().unwrap();
    let mut client = server.client();
    // A limit just above what Redis uses now: 97 % full.
    let used: u64 = info_field(&client.info("memory").unwrap(), "used_memory")
        .unwrap()
        .parse()
        .unwrap();
    let limit = (used * 100 / 97).to_string();
    client
        .cmd(&["CONFIG", "SET", "maxmemory", limit.as_str()])
        .unwrap();
    let health = check(&server.url()).await;
    let memory = finding(&health, "memory");
    assert!(memory.severity >= Severity::Warning, "{memory:?}");
    assert!(memory.found.contains("maxmemory"), "{memory:?}");
    assert!(memory.advice.is_some(), "{memory:?}");
}

#[tokio::test]
async fn another_protocol_version_under_the_prefix_is_critical() {
    let server = RedisServer::start().unwrap();
    let key = keys::protocol(PREFIX);
    let health = check(&server.url()).await;
    assert_eq!(finding(&health, "protocol").severity, Severity::Ok);
    // A version newer than this build's.
    let other = (bus_redis::PROTOCOL + 1).to_string();
    server.client().set(&key, &other).unwrap();
    let health = check(&server.url()).await;
    let protocol = finding(&health, "protocol");
    assert_eq!(protocol.severity, Severity::Critical, "{protocol:?}");
    assert!(protocol.found.contains(&other), "{protocol:?}");
    assert!(
        protocol.advice.as_deref().unwrap().contains("Upgrades"),
        "{protocol:?}"
    );
    // Read only: the check recorded nothing, changed nothing.
    assert_eq!(
        server.client().get(&key).unwrap().as_deref(),
        Some(other.as_bytes())
    );
}

#[tokio::test]
async fn a_user_who_may_not_run_scripts_is_critical() {
    let server = RedisServer::start().unwrap();
    server
        .client()
        .cmd(&[
            "ACL",
            "SETUSER",
            "noscripts",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-@scripting",
        ])
        .unwrap();
    let url = format!("redis://noscripts:pw@127.0.0.1:{}", server.port());
    let health = check(&url).await;
    let scripts = finding(&health, "scripts");
    assert_eq!(scripts.severity, Severity::Critical, "{scripts:?}");
    assert!(
        scripts.advice.as_deref().unwrap().contains("+@scripting"),
        "{scripts:?}"
    );
}

/// A replica that stops answering (SIGSTOP) falls behind: the primary's check says so
/// within a bounded time; connected to a replica, the check says writes will fail.
#[tokio::test]
async fn a_stalled_replica_is_lagging_and_a_replica_url_is_critical() {
    let primary = RedisServer::start().unwrap();
    let replica = RedisServer::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(primary.port().to_string())
        .start()
        .unwrap();
    let online = eventually(WAIT, || async {
        let health = check(&primary.url()).await;
        finding(&health, "replication")
            .found
            .contains("1 replicas, all online")
    })
    .await;
    assert!(online, "{:#?}", check(&primary.url()).await);
    let on_replica = check(&replica.url()).await;
    assert_eq!(
        finding(&on_replica, "replication").severity,
        Severity::Critical
    );

    let pid = replica.pid().unwrap().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let lagging = eventually(WAIT, || async {
        let health = check(&primary.url()).await;
        finding(&health, "replication").severity == Severity::Warning
    })
    .await;
    let health = check(&primary.url()).await;
    let _ = Command::new("kill").args(["-CONT", &pid]).status();
    assert!(lagging, "{health:#?}");
    let replication = finding(&health, "replication");
    assert!(
        replication
            .found
            .contains(&format!("127.0.0.1:{}", replica.port())),
        "{replication:?}"
    );
}
