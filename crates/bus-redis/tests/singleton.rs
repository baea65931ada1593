//! A singleton host on a real Redis, with the default settings: when another holder has
//! the lease (as after an expiry the host did not see), it notices at its next renewal
//! and reserves nothing; when the lease is free again it takes it at its next try; at
//! shutdown it gives it up. Current-thread runtime, so the log capture sees the keeper.

mod common;

use bus_core::defaults;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{CommandProcessor, Context, Host, ProcessError, ProcessingSettings};
use bus_test_redis::{eventually, Logs, TestRedis};
use common::Work;
use tokio::time::Instant;

#[derive(Default)]
struct Probe {
    handled: Mutex<Vec<(u64, Instant)>>,
}

impl Probe {
    fn handled_at(&self, n: u64) -> Option<Instant> {
        let handled = self.handled.lock().unwrap();
        handled.iter().find(|(m, _)| *m == n).map(|(_, at)| *at)
    }
}

#[async_trait]
impl CommandProcessor<Work> for Arc<Probe> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default().singleton(true)
    }
    async fn process(&self, work: Work, _: &Context) -> Result<(), ProcessError> {
        self.handled.lock().unwrap().push((work.n, Instant::now()));
        Ok(())
    }
}

#[tokio::test]
async fn a_host_whose_lease_is_taken_stops_reserving_until_it_is_free_again() {
    let ttl = defaults::SINGLETON_TTL;
    let logs = Logs::capture("bus_core=info");
    let redis = TestRedis::start().unwrap();
    let mut client = redis.client();
    let key = bus_redis::keys::singleton(redis.namespace(), "work");
    let probe = Arc::new(Probe::default());
    let running = Host::builder()
        .transport(common::transport(&redis).await)
        .command::<Work, _>(Arc::clone(&probe))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let bus = running.bus();
    bus.send(&Work { n: 1 }).await.unwrap();
    assert!(eventually(Duration::from_secs(10), || probe.handled_at(1).is_some()).await);
    let mine = client.get(&key).unwrap().expect("the host holds the lease");
    let pid = std::process::id().to_string();
    assert!(String::from_utf8_lossy(&mine).starts_with(&format!("{pid}:")));

    // Another holder has it: the host notices at its next renewal.
    client
        .cmd(&["SET", &key, "intruder", "PX", "600000"])
        .unwrap();
    let taken = Instant::now();
    let noticed = eventually(ttl / 3 + Duration::from_secs(2), || {
        !logs.matching("singleton lease lost").is_empty()
    })
    .await;
    assert!(noticed, "the host did not notice: {:?}", logs.lines());
    assert!(taken.elapsed() <= ttl / 3 + Duration::from_secs(1));
    bus.send(&Work { n: 2 }).await.unwrap();
    let sent = Instant::now();

    // Free again: the host takes it at its next try and runs what waited, not before.
    client.cmd(&["DEL", &key]).unwrap();
    let freed = Instant::now();
    assert!(
        eventually(ttl / 3 + Duration::from_secs(2), || probe
            .handled_at(2)
            .is_some())
        .await
    );
    let at = probe.handled_at(2).unwrap();
    assert!(
        at >= freed,
        "ran {:?} after the send, while another held the lease",
        at - sent
    );
    assert!(
        at - freed <= ttl / 3 + Duration::from_secs(1),
        "took {:?}",
        at - freed
    );
    assert_eq!(redis.counts("work").ready, 0);

    // Shutdown gives it up.
    running.shutdown().await.unwrap();
    assert_eq!(client.get(&key).unwrap(), None);
}
