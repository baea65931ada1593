//! `HostBuilder::register_processors()` finds the processors of the
//! binary and of the crates linked into it (the sample contracts' `CacheAuditLog`), with
//! no builder call naming them; on BabelQueue, which has no topics, the contracts' event
//! processor is a clear error at `build()`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bus_babelqueue::{BabelTransport, Options};
use bus_core::{
    processor, CommandProcessor, Context, Host, MemoryTransport, MessageKind, ProcessError,
    ProcessorEntry,
};
use bus_redis::RedisConfig;
use bus_test_redis::{eventually, RedisServer};
use sample_contracts::{audit, CacheInvalidated, Ping};

static PINGED: AtomicU64 = AtomicU64::new(0);

/// A processor of this binary.
#[derive(Default)]
struct Pings;

#[processor]
#[async_trait]
impl CommandProcessor<Ping> for Pings {
    async fn process(&self, _: Ping, _: &Context) -> Result<(), ProcessError> {
        PINGED.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn register_processors_finds_those_of_the_binary_and_of_a_linked_crate() {
    let entries: Vec<(&str, &str)> = ProcessorEntry::all()
        .into_iter()
        .map(|e| (e.module(), e.processor()))
        .collect();
    assert_eq!(
        entries,
        [
            ("register_processors", "Pings"),
            ("sample_contracts::audit", "CacheAuditLog"),
        ]
    );
    let host = Host::builder()
        .transport(MemoryTransport::new())
        .register_processors()
        .build()
        .unwrap();
    let mut kinds: Vec<(&str, MessageKind)> = host
        .messages()
        .iter()
        .map(|m| (m.name(), m.kind()))
        .collect();
    kinds.sort_by_key(|(name, _)| *name);
    assert_eq!(
        kinds,
        [
            ("cache-invalidated", MessageKind::Event),
            ("sample-throughput", MessageKind::Command)
        ]
    );
    let running = host.start().await.unwrap();
    let bus = running.bus();
    bus.send(&Ping { n: 1 }).await.unwrap();
    bus.publish(&CacheInvalidated { key: "k".into() })
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || PINGED.load(Ordering::SeqCst)
            == 1
            && audit::audited() == 1)
        .await,
        "pinged {}, audited {}",
        PINGED.load(Ordering::SeqCst),
        audit::audited()
    );
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_registered_event_processor_on_babelqueue_is_an_error_naming_it() {
    let server = RedisServer::start().unwrap();
    let config = RedisConfig::from_url(&server.url()).unwrap();
    let transport = BabelTransport::connect(&config, Options::legacy())
        .await
        .unwrap();
    let err = Host::builder()
        .transport(transport.clone())
        .register_processors()
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sample_contracts::audit::CacheAuditLog")
            && err.contains("CacheInvalidated")
            && err.contains("BabelTransport")
            && err.contains("no topics"),
        "{err}"
    );
    // The binary's command processor alone is fine there.
    Host::builder()
        .transport(transport)
        .register_processors_in("register_processors")
        .build()
        .unwrap();
}
