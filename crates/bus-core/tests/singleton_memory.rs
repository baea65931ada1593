//! Singleton processors on the in-memory transport: one host of several handles the
//! queue, a graceful shutdown hands the lease over at once, a lease held by a host that
//! died is taken over after its ttl, and a singleton that cannot be honoured is refused
//! when the host is built.

mod common;

use bus_core::transport::Leases;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::TransportExtras;
use bus_core::{
    CommandProcessor, Context, EventProcessor, EventSubscription, Host, MemoryTransport,
    ProcessError, ProcessingSettings, RedisCommand, RedisEvent, Transport,
};
use bus_test_redis::eventually;
use common::{Tap, Tapped};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "single")]
struct Tick {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "ticked")]
struct Ticked {
    n: u32,
}

#[derive(EventSubscription)]
#[bus(event = Ticked, name = "once")]
struct Once;

/// Which host handled which tick, and when.
type Log = Arc<Mutex<Vec<(&'static str, u32, Instant)>>>;

struct Recorder {
    host: &'static str,
    log: Log,
    settings: ProcessingSettings,
}

#[async_trait]
impl CommandProcessor<Tick> for Recorder {
    fn settings(&self) -> ProcessingSettings {
        self.settings.clone()
    }
    async fn process(&self, tick: Tick, _: &Context) -> Result<(), ProcessError> {
        self.log
            .lock()
            .unwrap()
            .push((self.host, tick.n, Instant::now()));
        Ok(())
    }
}

#[async_trait]
impl EventProcessor<Once> for Recorder {
    fn settings(&self) -> ProcessingSettings {
        self.settings.clone()
    }
    async fn process(&self, _: Ticked, _: &Context) -> Result<(), ProcessError> {
        Ok(())
    }
}

fn host(
    transport: &MemoryTransport,
    name: &'static str,
    log: &Log,
    settings: ProcessingSettings,
) -> Host {
    Host::builder()
        .transport(transport.clone())
        .command::<Tick, _>(Recorder {
            host: name,
            log: Arc::clone(log),
            settings,
        })
        .build()
        .unwrap()
}

fn handled_by(log: &Log, host: &str) -> Vec<u32> {
    let log = log.lock().unwrap();
    log.iter()
        .filter(|(h, ..)| *h == host)
        .map(|(_, n, _)| *n)
        .collect()
}

#[tokio::test]
async fn only_the_lease_holder_handles_and_a_shutdown_hands_over_at_the_next_try() {
    let transport = MemoryTransport::new();
    let log = Log::default();
    let settings = ProcessingSettings::default().singleton(true);
    let bus = host(&transport, "a", &log, settings.clone()).bus();
    let a = host(&transport, "a", &log, settings.clone())
        .start()
        .await
        .unwrap();
    bus.send(&Tick { n: 0 }).await.unwrap();
    assert!(eventually(Duration::from_secs(5), || handled_by(&log, "a") == [0]).await);

    // B runs beside A: everything still goes to A, the lease holder.
    let b = host(&transport, "b", &log, settings).start().await.unwrap();
    for n in 1..=50 {
        bus.send(&Tick { n }).await.unwrap();
    }
    assert!(eventually(Duration::from_secs(5), || log.lock().unwrap().len() == 51).await);
    assert_eq!(handled_by(&log, "a").len(), 51, "{:?}", log.lock().unwrap());
    assert!(handled_by(&log, "b").is_empty());

    // A stops gracefully and gives the lease up: B takes it at its next try (every
    // third of the ttl), not when the lease would have expired.
    a.shutdown().await.unwrap();
    let stopped = Instant::now();
    bus.send(&Tick { n: 100 }).await.unwrap();
    assert!(eventually(Duration::from_secs(10), || handled_by(&log, "b") == [100]).await);
    let took = stopped.elapsed();
    assert!(
        took < bus_core::defaults::SINGLETON_TTL / 3 + Duration::from_secs(1),
        "B took {took:?} to take over a released lease"
    );
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_lease_whose_holder_died_is_taken_over_after_its_ttl() {
    const TTL: Duration = Duration::from_millis(900);
    let transport = MemoryTransport::new();
    let log = Log::default();
    // A host that took the lease and died: nobody renews or releases it.
    let dead = transport
        .singleton_lease("single", "dead-host", TTL)
        .unwrap();
    assert!(dead.acquire().await.unwrap());
    let taken = Instant::now();
    let other = transport.singleton_lease("single", "other", TTL).unwrap();
    assert!(!other.acquire().await.unwrap(), "two holders at once");
    assert!(!other.renew().await.unwrap(), "a renewal by a non-holder");

    let settings = ProcessingSettings::default()
        .singleton(true)
        .singleton_ttl(TTL);
    let running = host(&transport, "b", &log, settings).start().await.unwrap();
    running.bus().send(&Tick { n: 1 }).await.unwrap();
    assert!(eventually(Duration::from_secs(5), || handled_by(&log, "b") == [1]).await);
    let at = log.lock().unwrap()[0].2 - taken;
    // Not before the dead holder's lease expired; within ttl + ttl/3 (+ scheduling).
    assert!(
        at >= TTL,
        "handled after {at:?}, while the lease was held elsewhere"
    );
    assert!(
        at <= TTL + TTL / 3 + Duration::from_millis(300),
        "took over after {at:?}"
    );
    // The dead holder's renewal now fails: the lease moved.
    assert!(!dead.renew().await.unwrap());
    running.shutdown().await.unwrap();
    // Released at shutdown: anyone takes it at once.
    assert!(other.acquire().await.unwrap());
}

/// No leases.
#[derive(Debug, Default)]
struct NoLeasesTap;

impl Tap for NoLeasesTap {
    fn extras<'a>(&'a self, inner: &'a MemoryTransport) -> TransportExtras<'a> {
        let mut extras = inner.extras();
        extras.leases = None;
        extras
    }
}

/// A transport without leases (it delegates everything else to the memory one).
type NoLeases = Tapped<NoLeasesTap>;

#[test]
fn a_singleton_that_cannot_be_honoured_is_refused_at_build() {
    let recorder = || Recorder {
        host: "a",
        log: Log::default(),
        settings: ProcessingSettings::default().singleton(true),
    };
    let error = Host::builder()
        .transport(NoLeases::default())
        .command::<Tick, _>(recorder())
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("leases"), "{error}");
    let error = Host::builder()
        .transport(MemoryTransport::new())
        .event::<Once, _>(recorder())
        .build()
        .unwrap_err();
    assert!(
        error.to_string().contains("only a command queue"),
        "{error}"
    );
    // Without the setting, the same transport is fine.
    Host::builder()
        .transport(NoLeases::default())
        .command::<Tick, _>(Recorder {
            settings: ProcessingSettings::default(),
            ..recorder()
        })
        .build()
        .unwrap();
}
