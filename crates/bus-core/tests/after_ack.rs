//! `Context::after_ack`: the work a handler registers runs once its message's ack is
//! stored, never for a message that is retried or dead-lettered, nor when the ack does not
//! reach the transport (the message is then delivered again). On the in-memory
//! transport, with a consumer whose acks can be made to fail.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{Consumer, Receipt, Source};
use bus_core::{CommandProcessor, Context, Host, MemoryTransport, ProcessError, RedisCommand};
use bus_test_redis::eventually;
use common::{Tap, Tapped};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "work")]
struct Work {
    n: u32,
}

/// Acks fail while set.
#[derive(Debug, Default)]
struct FailAcks(AtomicBool);

#[async_trait]
impl Tap for FailAcks {
    async fn ack(&self, inner: &dyn Consumer, receipts: &[Receipt]) -> bus_core::Result<()> {
        if self.0.load(Ordering::SeqCst) {
            return Err(bus_core::Error::transport("the ack is lost (test)"));
        }
        inner.ack(receipts).await
    }
}

/// The memory transport, with acks that fail while its tap is set.
type Flaky = Tapped<FailAcks>;

/// Registers an after-ack hook on every delivery, then fails the first `fail` deliveries
/// (a retry) or rejects them (a dead letter).
struct Handler {
    transport: MemoryTransport,
    fail: u32,
    reject: bool,
    handled: AtomicU64,
    /// For each hook run: (the message's `n`, whether it was still in flight then).
    hooks: Arc<Mutex<Vec<(u32, u64)>>>,
}

#[async_trait]
impl CommandProcessor<Work> for Arc<Handler> {
    async fn process(&self, work: Work, ctx: &Context) -> Result<(), ProcessError> {
        let (hooks, transport) = (Arc::clone(&self.hooks), self.transport.clone());
        ctx.after_ack(async move {
            let in_flight = transport.stats(&Source::queue("work").unwrap()).in_flight;
            hooks.lock().unwrap().push((work.n, in_flight));
        });
        self.handled.fetch_add(1, Ordering::SeqCst);
        if self.reject {
            return Err(ProcessError::dead_letter("rejected (test)"));
        }
        if ctx.delivery_count() <= self.fail {
            return Err(ProcessError::retry_after(
                Duration::from_millis(10),
                "fails (test)",
            ));
        }
        Ok(())
    }
}

fn handler(transport: &Flaky, fail: u32, reject: bool) -> Arc<Handler> {
    Arc::new(Handler {
        transport: transport.inner.clone(),
        fail,
        reject,
        handled: AtomicU64::new(0),
        hooks: Arc::default(),
    })
}

async fn run_until(
    transport: &Flaky,
    handler: &Arc<Handler>,
    sends: u32,
    done: impl Fn(&Handler) -> bool,
) {
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(handler))
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    for n in 0..sends {
        running.bus().send(&Work { n }).await.unwrap();
    }
    assert!(eventually(Duration::from_secs(10), || done(handler)).await);
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_runs_once_the_ack_is_stored() {
    let transport = Flaky::default();
    let handler = handler(&transport, 0, false);
    run_until(&transport, &handler, 1, |h| {
        !h.hooks.lock().unwrap().is_empty()
    })
    .await;
    // When it ran, the message was no longer in flight: its ack was stored.
    assert_eq!(*handler.hooks.lock().unwrap(), vec![(0, 0)]);
    let stats = transport.inner.stats(&Source::queue("work").unwrap());
    assert_eq!((stats.ready, stats.in_flight), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_of_an_ack_batch_runs_its_own_hook() {
    let transport = Flaky::default();
    let handler = handler(&transport, 0, false);
    run_until(&transport, &handler, 50, |h| {
        h.hooks.lock().unwrap().len() == 50
    })
    .await;
    let mut ran: Vec<u32> = handler.hooks.lock().unwrap().iter().map(|h| h.0).collect();
    ran.sort_unstable();
    assert_eq!(ran, (0..50).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_delivery_runs_no_hook_and_the_successful_one_runs_its_own() {
    let transport = Flaky::default();
    let handler = handler(&transport, 2, false);
    run_until(&transport, &handler, 1, |h| {
        !h.hooks.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(handler.handled.load(Ordering::SeqCst), 3);
    assert_eq!(*handler.hooks.lock().unwrap(), vec![(0, 0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_message_runs_no_hook() {
    let transport = Flaky::default();
    let handler = handler(&transport, 0, true);
    let queue = Source::queue("work").unwrap();
    run_until(&transport, &handler, 1, |_| {
        transport.inner.stats(&queue).dead_letters == 1
    })
    .await;
    assert_eq!(*handler.hooks.lock().unwrap(), Vec::<(u32, u64)>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_that_never_reaches_the_transport_runs_no_hook() {
    let transport = Flaky::default();
    transport.tap.0.store(true, Ordering::SeqCst);
    let handler = handler(&transport, 0, false);
    run_until(&transport, &handler, 1, |h| {
        h.handled.load(Ordering::SeqCst) == 1
    })
    .await;
    // The host stopped with the ack failing: the message is still the transport's (it
    // is delivered again), and the hook never ran.
    assert_eq!(*handler.hooks.lock().unwrap(), Vec::<(u32, u64)>::new());
    let stats = transport.inner.stats(&Source::queue("work").unwrap());
    assert_eq!(stats.ready + stats.in_flight, 1, "{stats:?}");
}
