//! Lifecycle scenarios that run on every provider (tests/redis.rs: Redis; tests/object_store.rs:
//! local files, Azurite, moto): an attachment deleted with its dead letter, and an event's
//! attachment shared by three subscriptions and deleted after the last ack. Each takes the
//! provider and a count of what it stores, so one scenario checks them all.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_attachments::{
    publish_with_attachment, send_with_attachment, AttachmentLayer, AttachmentMeta,
    AttachmentProvider, ContextExt, Error, OrphanCollector,
};
use bus_core::transport::Source;
use bus_core::{
    CommandProcessor, Context, EventProcessor, EventSubscription, ProcessError, RedisEvent,
    SendOptions,
};
use bus_test_redis::TestRedis;
use futures::future::BoxFuture;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

use crate::common::{self, eventually, pattern_body, PatternCheck, Running, Upload};

/// How many objects or keys the provider under test holds right now.
pub type Stored<'a> = &'a (dyn Fn() -> BoxFuture<'static, usize> + Sync);

async fn read_through(ctx: &Context) -> Result<(u64, u64), ProcessError> {
    let attachment = ctx.attachment().await?.ok_or("no attachment")?;
    let mut check = PatternCheck::default();
    let mut body = attachment.into_stream();
    while let Some(chunk) = body.try_next().await? {
        check.feed(&chunk);
    }
    Ok((check.seen, check.mismatches))
}

/// Reads the attachment, then dead-letters the message.
#[derive(Default)]
struct Rejecter {
    reads: Mutex<Vec<(u64, u64)>>,
}

#[async_trait]
impl CommandProcessor<Upload> for Arc<Rejecter> {
    async fn process(&self, _: Upload, ctx: &Context) -> Result<(), ProcessError> {
        let read = read_through(ctx).await?;
        self.reads.lock().unwrap().push(read);
        Err(ProcessError::dead_letter("rejected by the test"))
    }
}

/// Deleting a dead letter (as `bus delete-dead`, the dashboard and `Management` do,
/// through `Admin::delete_dead_letter`) deletes its attachment once an `OrphanCollector`
/// runs; the dead letter kept it until then.
pub async fn deleting_the_dead_letter_deletes_its_attachment(
    redis: &TestRedis,
    provider: Arc<dyn AttachmentProvider>,
    stored: Stored<'_>,
) {
    let rejecter = Arc::new(Rejecter::default());
    let host = bus_core::Host::builder()
        .transport(common::transport(redis).await)
        .middleware(AttachmentLayer::new(Arc::clone(&provider)))
        .command::<Upload, _>(Arc::clone(&rejecter))
        .build()
        .unwrap();
    let running = Running::start(host);
    let len = 700_000;
    let (_, reference) = send_with_attachment(
        &running.bus,
        &*provider,
        &Upload { n: 9 },
        AttachmentMeta::new("dead.bin", "application/octet-stream"),
        pattern_body(len),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    // A second dead letter without an attachment: deleting it records no orphan.
    running.bus.send(&Upload { n: 10 }).await.unwrap();
    let admin = bus_redis::admin::Admin::new(common::transport(redis).await);
    let source = Source::queue("files").unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            admin.dead_letters(&source, 10).await.unwrap().len() == 2
        })
        .await
    );
    running.stop().await;
    assert_eq!(*rejecter.reads.lock().unwrap(), vec![(len, 0)]);
    let kept = stored().await;
    assert!(kept > 0, "the dead letter's attachment is kept");
    let collector = OrphanCollector::new(
        bus_redis::admin::Admin::new(common::transport(redis).await),
        Arc::clone(&provider),
    );
    // Nothing deleted yet: nothing to collect, the attachment stays.
    assert_eq!(collector.collect().await.unwrap(), 0);
    assert_eq!(stored().await, kept);
    for dead in admin.dead_letters(&source, 10).await.unwrap() {
        assert!(admin
            .delete_dead_letter(&source, &dead.storage_id)
            .await
            .unwrap());
    }
    assert_eq!(collector.collect().await.unwrap(), 1);
    assert_eq!(
        stored().await,
        0,
        "the attachment went with its dead letter"
    );
    assert!(matches!(
        provider.open(&reference).await,
        Err(Error::NotFound { .. })
    ));
    // Popped: a second round finds nothing.
    assert_eq!(collector.collect().await.unwrap(), 0);
}

#[derive(Debug, Clone, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "scans")]
pub struct Scanned {
    pub n: u64,
}

#[derive(Debug, EventSubscription)]
#[bus(event = Scanned, name = "archive")]
pub struct Archive;

#[derive(Debug, EventSubscription)]
#[bus(event = Scanned, name = "index")]
pub struct Index;

#[derive(Debug, EventSubscription)]
#[bus(event = Scanned, name = "notify")]
pub struct Notify;

/// What each subscription read; `notify` retries while `hold_notify` is set, and
/// dead-letters while `reject_notify` is.
#[derive(Default)]
struct Subscribers {
    reads: Mutex<Vec<(&'static str, u64, u64)>>,
    hold_notify: AtomicBool,
    reject_notify: AtomicBool,
}

macro_rules! subscriber {
    ($sub:ty, $name:literal) => {
        #[async_trait]
        impl EventProcessor<$sub> for Arc<Subscribers> {
            async fn process(&self, _: Scanned, ctx: &Context) -> Result<(), ProcessError> {
                let (seen, mismatches) = read_through(ctx).await?;
                self.reads.lock().unwrap().push(($name, seen, mismatches));
                if $name == "notify" && self.reject_notify.load(Ordering::SeqCst) {
                    return Err(ProcessError::dead_letter("rejected by the test"));
                }
                if $name == "notify" && self.hold_notify.load(Ordering::SeqCst) {
                    return Err(ProcessError::retry_after(
                        Duration::from_millis(50),
                        "held by the test",
                    ));
                }
                Ok(())
            }
        }
    };
}
subscriber!(Archive, "archive");
subscriber!(Index, "index");
subscriber!(Notify, "notify");

/// A host on `transport` with the three subscriptions.
fn host_of(
    transport: impl bus_core::IntoShared<dyn bus_core::Transport>,
    provider: &Arc<dyn AttachmentProvider>,
    subscribers: &Arc<Subscribers>,
) -> Running {
    let host = bus_core::Host::builder()
        .transport(transport)
        .middleware(AttachmentLayer::new(Arc::clone(provider)))
        .event::<Archive, _>(Arc::clone(subscribers))
        .event::<Index, _>(Arc::clone(subscribers))
        .event::<Notify, _>(Arc::clone(subscribers))
        .build()
        .unwrap();
    Running::start(host)
}

/// A host with the three subscriptions, and their consumers registered.
async fn subscribed(
    redis: &TestRedis,
    provider: &Arc<dyn AttachmentProvider>,
    subscribers: &Arc<Subscribers>,
) -> Running {
    let running = host_of(common::transport(redis).await, provider, subscribers);
    // Subscriptions register when their consumers start.
    let admin = bus_redis::admin::Admin::new(common::transport(redis).await);
    assert!(
        eventually(Duration::from_secs(10), || async {
            let topics = admin.topics().await.unwrap();
            topics
                .iter()
                .any(|topic| topic.topic == "scans" && topic.subscriptions.len() == 3)
        })
        .await
    );
    running
}

/// One event with an attachment, three subscriptions: each copy reads the one stored
/// attachment; it stays while any copy is not acknowledged (here `notify`, retried) and is
/// deleted after the last ack.
pub async fn an_event_attachment_is_shared_by_three_subscriptions(
    redis: &TestRedis,
    provider: Arc<dyn AttachmentProvider>,
    stored: Stored<'_>,
) {
    let subscribers = Arc::new(Subscribers::default());
    subscribers.hold_notify.store(true, Ordering::SeqCst);
    let running = subscribed(redis, &provider, &subscribers).await;
    shared_until_the_last_ack(running, subscribers, provider, stored).await;
}

/// The same on the in-memory transport, with the in-memory provider.
pub async fn an_event_attachment_is_shared_on_the_memory_transport() {
    let memory = bus_attachments::MemoryProvider::new();
    let provider: Arc<dyn AttachmentProvider> = Arc::new(memory.clone());
    let transport = bus_core::MemoryTransport::new();
    let subscribers = Arc::new(Subscribers::default());
    subscribers.hold_notify.store(true, Ordering::SeqCst);
    let running = host_of(transport.clone(), &provider, &subscribers);
    assert!(
        eventually(Duration::from_secs(10), || async {
            transport.subscriptions("scans").len() == 3
        })
        .await
    );
    let stored = move || {
        let n = memory.len();
        Box::pin(async move { n }) as BoxFuture<'static, usize>
    };
    shared_until_the_last_ack(running, subscribers, provider, &stored).await;
}

/// Publishes the event with its attachment to the three running subscriptions, `notify`
/// held back: the attachment stays until `notify` acks too.
async fn shared_until_the_last_ack(
    running: Running,
    subscribers: Arc<Subscribers>,
    provider: Arc<dyn AttachmentProvider>,
    stored: Stored<'_>,
) {
    let len = 600_000;
    let (sent, reference) = publish_with_attachment(
        &running.bus,
        &*provider,
        &Scanned { n: 1 },
        AttachmentMeta::new("scan.tiff", "image/tiff"),
        pattern_body(len),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(sent.copies, Some(3));
    let reads_of = |name: &str| {
        subscribers
            .reads
            .lock()
            .unwrap()
            .iter()
            .filter(|read| read.0 == name)
            .count()
    };
    // archive and index acked, notify read it twice and was retried: still there.
    assert!(
        eventually(Duration::from_secs(30), || async {
            reads_of("archive") == 1 && reads_of("index") == 1 && reads_of("notify") >= 2
        })
        .await,
        "{:?}",
        subscribers.reads.lock().unwrap()
    );
    assert!(stored().await > 0, "deleted before the last copy's ack");
    assert!(provider.open(&reference).await.is_ok());
    // notify acks: the last copy, and the attachment goes.
    subscribers.hold_notify.store(false, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(30), || async { stored().await == 0 }).await,
        "left behind: {} after {:?}",
        stored().await,
        subscribers.reads.lock().unwrap()
    );
    running.stop().await;
    let reads = subscribers.reads.lock().unwrap().clone();
    assert!(
        reads.iter().all(|&(_, seen, bad)| (seen, bad) == (len, 0)),
        "{reads:?}"
    );
}

/// The holders' count without a bus: copies released before the publisher handed over
/// (a copy acknowledged at once) do not delete it; a release re-sent with its token counts
/// once; the last holder's release deletes it; a command's attachment (not shared) goes
/// with its one release; an event without subscriptions deletes its attachment at once.
pub async fn releases_count_once_and_the_last_deletes(
    provider: Arc<dyn AttachmentProvider>,
    stored: Stored<'_>,
) {
    let put = || async {
        provider
            .put(
                "scans",
                AttachmentMeta::new("a", "x/y"),
                pattern_body(300_000),
            )
            .await
            .unwrap()
    };
    let shared = put().await;
    assert!(provider.share(&shared).await.unwrap());
    assert!(!provider.release(&shared, "early").await.unwrap());
    assert!(!provider.release(&shared, "early").await.unwrap());
    assert!(!provider.shared_by(&shared, 3, "publisher").await.unwrap());
    assert!(!provider.release(&shared, "second").await.unwrap());
    assert!(provider.open(&shared).await.is_ok());
    assert!(provider.release(&shared, "last").await.unwrap());
    assert!(matches!(
        provider.open(&shared).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(stored().await, 0);
    let single = put().await;
    assert!(provider.release(&single, "only").await.unwrap());
    let unheard = put().await;
    assert!(provider.share(&unheard).await.unwrap());
    assert!(provider.shared_by(&unheard, 0, "publisher").await.unwrap());
    assert_eq!(stored().await, 0);
}

/// One subscription's copy dead-lettered, the two others acknowledged: the attachment
/// stays for the dead letter, and deleting that dead letter (its copy's release, through
/// the orphans list) deletes it.
pub async fn deleting_the_last_copys_dead_letter_deletes_the_shared_attachment(
    redis: &TestRedis,
    provider: Arc<dyn AttachmentProvider>,
    stored: Stored<'_>,
) {
    let subscribers = Arc::new(Subscribers::default());
    subscribers.reject_notify.store(true, Ordering::SeqCst);
    let running = subscribed(redis, &provider, &subscribers).await;
    publish_with_attachment(
        &running.bus,
        &*provider,
        &Scanned { n: 2 },
        AttachmentMeta::new("scan.tiff", "image/tiff"),
        pattern_body(100_000),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    let admin = bus_redis::admin::Admin::new(common::transport(redis).await);
    let notify = Source::subscription("scans", "notify").unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            subscribers.reads.lock().unwrap().len() == 3
                && admin.dead_letters(&notify, 10).await.unwrap().len() == 1
        })
        .await,
        "{:?}",
        subscribers.reads.lock().unwrap()
    );
    running.stop().await;
    assert!(stored().await > 0, "the dead letter's share is kept");
    let dead = admin.dead_letters(&notify, 10).await.unwrap();
    assert!(admin
        .delete_dead_letter(&notify, &dead[0].storage_id)
        .await
        .unwrap());
    let collector = OrphanCollector::new(
        bus_redis::admin::Admin::new(common::transport(redis).await),
        Arc::clone(&provider),
    );
    assert_eq!(collector.collect().await.unwrap(), 1);
    assert_eq!(stored().await, 0);
}
