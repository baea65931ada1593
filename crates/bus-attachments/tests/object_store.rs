//! The object_store provider on three stores (tests/stores): object_store's local
//! filesystem backend, a real Azure Blob emulator (Azurite) and a real S3 server (moto).
//! Each scenario runs once per store: streamed in parts, read back by the handler,
//! deleted after the ack, kept through a retry and a dead letter, nothing left by a send
//! that fails after the upload, expired by the sweep, size limit; deleted with its dead
//! letter, and an event's shared by three subscriptions (tests/lifecycle).

mod common;
mod lifecycle;
#[macro_use]
mod stores;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_attachments::{
    send_with_attachment, AttachmentLayer, AttachmentMeta, AttachmentProvider, AttachmentRef,
    ContextExt, Error, ObjectStoreProvider,
};
use bus_core::{
    CommandProcessor, Context, OutgoingMessage, ProcessError, SendMiddleware, SendOptions,
};
use bus_test_redis::TestRedis;
use common::{eventually, pattern_body, PatternCheck, Running, Upload};
use futures::TryStreamExt;
use stores::Store;

on_every_store!(
    a_twelve_megabyte_attachment_round_trips_in_parts_and_is_deleted,
    the_handler_reads_it_and_it_is_deleted_after_the_ack,
    it_is_kept_through_a_retry_and_deleted_after_the_ack,
    a_dead_lettered_message_keeps_its_attachment,
    a_send_that_fails_after_the_upload_leaves_nothing_behind,
    the_sweep_deletes_what_expired_and_keeps_what_was_touched,
    the_size_limit_refuses_and_keeps_nothing,
    deleting_the_dead_letter_deletes_its_attachment,
    an_event_attachment_is_shared_by_three_subscriptions,
    releases_count_once_and_the_last_deletes,
    deleting_the_last_copys_dead_letter_deletes_the_shared_attachment,
);

async fn read_all(provider: &dyn AttachmentProvider, reference: &AttachmentRef) -> PatternCheck {
    let mut check = PatternCheck::default();
    let mut body = provider.open(reference).await.unwrap();
    while let Some(chunk) = body.try_next().await.unwrap() {
        check.feed(&chunk);
    }
    check
}

async fn a_twelve_megabyte_attachment_round_trips_in_parts_and_is_deleted(store: Store) {
    let provider = store.provider();
    let len = 12_000_000; // three 5 MiB parts, the last one short
    let reference = provider
        .put(
            "files",
            AttachmentMeta::new("big.bin", "application/octet-stream").length(len),
            pattern_body(len),
        )
        .await
        .unwrap();
    assert_eq!(reference.length, len);
    let id = &reference.id;
    assert_eq!(
        store.objects().await,
        vec![
            format!("attachments/files/{id}"),
            format!("attachments/files/{id}.meta")
        ]
    );
    let check = read_all(&provider, &reference).await;
    assert_eq!((check.seen, check.mismatches), (len, 0));
    assert!(provider.delete(&reference).await.unwrap());
    assert!(!provider.delete(&reference).await.unwrap());
    assert!(matches!(
        provider.open(&reference).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(store.objects().await, Vec::<String>::new());
}

/// What each delivery's handler read, and how it answers.
#[derive(Default)]
struct Reader {
    reads: Mutex<Vec<(u32, u64, u64)>>,
    /// Fail the first delivery (after reading) with a retry.
    fail_first: bool,
    /// Dead-letter every delivery (after reading).
    reject: bool,
}

#[async_trait]
impl CommandProcessor<Upload> for Arc<Reader> {
    async fn process(&self, _: Upload, ctx: &Context) -> Result<(), ProcessError> {
        let attachment = ctx.attachment().await?.ok_or("no attachment")?;
        let mut check = PatternCheck::default();
        let mut body = attachment.into_stream();
        while let Some(chunk) = body.try_next().await? {
            check.feed(&chunk);
        }
        let delivery = ctx.delivery_count();
        self.reads
            .lock()
            .unwrap()
            .push((delivery, check.seen, check.mismatches));
        if self.reject {
            return Err(ProcessError::dead_letter("rejected by the test"));
        }
        if self.fail_first && delivery == 1 {
            return Err(ProcessError::retry_after(
                Duration::from_millis(50),
                "first try fails",
            ));
        }
        Ok(())
    }
}

/// A host on a test Redis whose attachments are in `provider`, running `reader`.
async fn running(
    redis: &TestRedis,
    provider: &Arc<ObjectStoreProvider>,
    reader: &Arc<Reader>,
) -> Running {
    let host = bus_core::Host::builder()
        .transport(common::transport(redis).await)
        .middleware(AttachmentLayer::new(provider.clone()))
        .command::<Upload, _>(Arc::clone(reader))
        .build()
        .unwrap();
    Running::start(host)
}

async fn send(running: &Running, provider: &ObjectStoreProvider, len: u64) -> AttachmentRef {
    let meta = AttachmentMeta::new("scan.pdf", "application/pdf").length(len);
    let (_, reference) = send_with_attachment(
        &running.bus,
        provider,
        &Upload { n: 1 },
        meta,
        pattern_body(len),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    reference
}

async fn reads_reach(reader: &Reader, n: usize) -> Vec<(u32, u64, u64)> {
    assert!(
        eventually(Duration::from_secs(60), || async {
            reader.reads.lock().unwrap().len() >= n
        })
        .await,
        "{:?}",
        reader.reads.lock().unwrap()
    );
    reader.reads.lock().unwrap().clone()
}

async fn all_deleted(store: &Store) {
    assert!(
        eventually(Duration::from_secs(10), || async {
            store.objects().await.is_empty()
        })
        .await,
        "left behind: {:?}",
        store.objects().await
    );
}

async fn the_handler_reads_it_and_it_is_deleted_after_the_ack(store: Store) {
    let redis = TestRedis::start().unwrap();
    let provider = Arc::new(store.provider());
    let reader = Arc::new(Reader::default());
    let running = running(&redis, &provider, &reader).await;
    let len = 6_000_000;
    send(&running, &provider, len).await;
    assert_eq!(reads_reach(&reader, 1).await, vec![(1, len, 0)]);
    all_deleted(&store).await;
    running.stop().await;
}

async fn it_is_kept_through_a_retry_and_deleted_after_the_ack(store: Store) {
    let redis = TestRedis::start().unwrap();
    let provider = Arc::new(store.provider());
    let reader = Arc::new(Reader {
        fail_first: true,
        ..Reader::default()
    });
    let running = running(&redis, &provider, &reader).await;
    let len = 1_000_000;
    send(&running, &provider, len).await;
    // The second delivery read it whole: the failed first one kept it.
    assert_eq!(
        reads_reach(&reader, 2).await,
        vec![(1, len, 0), (2, len, 0)]
    );
    all_deleted(&store).await;
    running.stop().await;
}

async fn a_dead_lettered_message_keeps_its_attachment(store: Store) {
    let redis = TestRedis::start().unwrap();
    let provider = Arc::new(store.provider());
    let reader = Arc::new(Reader {
        reject: true,
        ..Reader::default()
    });
    let running = running(&redis, &provider, &reader).await;
    let len = 1_000_000;
    let reference = send(&running, &provider, len).await;
    let dead = bus_redis::keys::QueueKeys::new(
        redis.namespace(),
        &bus_core::transport::Source::queue("files").unwrap(),
    )
    .dead;
    assert!(
        eventually(Duration::from_secs(30), || async {
            redis.client().cmd(&["LLEN", &dead]).unwrap().as_int() == Some(1)
        })
        .await
    );
    running.stop().await;
    assert_eq!(reader.reads.lock().unwrap().clone(), vec![(1, len, 0)]);
    assert_eq!(
        store.objects().await.len(),
        2,
        "{:?}",
        store.objects().await
    );
    let check = read_all(&*provider, &reference).await;
    assert_eq!((check.seen, check.mismatches), (len, 0));
}

#[derive(Debug)]
struct Refuse;

#[async_trait]
impl SendMiddleware for Refuse {
    async fn before_send(&self, _: &mut OutgoingMessage<'_>) -> bus_core::Result<()> {
        Err(bus_core::Error::transport("refused by the test"))
    }
}

async fn a_send_that_fails_after_the_upload_leaves_nothing_behind(store: Store) {
    let redis = TestRedis::start().unwrap();
    let bus = bus_core::Bus::new(
        common::transport(&redis).await,
        bus_core::BusConfig::default().send_middleware(Refuse),
    );
    let provider = store.provider();
    let failed = send_with_attachment(
        &bus,
        &provider,
        &Upload { n: 3 },
        AttachmentMeta::new("lost.bin", "application/octet-stream"),
        pattern_body(1_000_000),
        &SendOptions::new(),
    )
    .await;
    assert!(matches!(failed, Err(Error::Bus(_))), "{failed:?}");
    assert_eq!(store.objects().await, Vec::<String>::new());
}

async fn the_sweep_deletes_what_expired_and_keeps_what_was_touched(store: Store) {
    // A TTL short enough to pass during the test: this test is about the expiry.
    let provider = store.provider().ttl(Duration::from_millis(200));
    let expiring = provider
        .put("files", AttachmentMeta::new("a", "x/y"), pattern_body(1000))
        .await
        .unwrap();
    let touched = provider
        .put("files", AttachmentMeta::new("b", "x/y"), pattern_body(1000))
        .await
        .unwrap();
    assert!(provider
        .touch(&touched, Duration::from_secs(3600))
        .await
        .unwrap());
    // A body whose sender died before its sidecar.
    let orphan = object_store::path::Path::from_iter(["attachments", "files", "01ORPHAN"]);
    store
        .store
        .put(&orphan, vec![1u8; 10].into())
        .await
        .unwrap();
    assert_eq!(store.objects().await.len(), 5);
    assert!(
        eventually(Duration::from_secs(10), || async {
            provider.sweep().await.unwrap();
            store.objects().await.len() == 2
        })
        .await,
        "{:?}",
        store.objects().await
    );
    assert!(matches!(
        provider.open(&expiring).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(read_all(&provider, &touched).await.seen, 1000);
}

async fn the_size_limit_refuses_and_keeps_nothing(store: Store) {
    let provider = store.provider().max_size(1_000_000);
    let declared = provider
        .put(
            "files",
            AttachmentMeta::new("big", "x/y").length(1_000_001),
            pattern_body(10),
        )
        .await;
    assert!(
        matches!(
            declared,
            Err(Error::TooLarge {
                size: 1_000_001,
                ..
            })
        ),
        "{declared:?}"
    );
    let streamed = provider
        .put(
            "files",
            AttachmentMeta::new("big", "x/y"),
            pattern_body(3_000_000),
        )
        .await;
    assert!(
        matches!(streamed, Err(Error::TooLarge { max: 1_000_000, .. })),
        "{streamed:?}"
    );
    assert_eq!(store.objects().await, Vec::<String>::new());
}

async fn deleting_the_dead_letter_deletes_its_attachment(store: Store) {
    let redis = TestRedis::start().unwrap();
    lifecycle::deleting_the_dead_letter_deletes_its_attachment(
        &redis,
        Arc::new(store.provider()),
        &store.count(),
    )
    .await;
}

async fn an_event_attachment_is_shared_by_three_subscriptions(store: Store) {
    let redis = TestRedis::start().unwrap();
    lifecycle::an_event_attachment_is_shared_by_three_subscriptions(
        &redis,
        Arc::new(store.provider()),
        &store.count(),
    )
    .await;
}

async fn releases_count_once_and_the_last_deletes(store: Store) {
    lifecycle::releases_count_once_and_the_last_deletes(Arc::new(store.provider()), &store.count())
        .await;
}

async fn deleting_the_last_copys_dead_letter_deletes_the_shared_attachment(store: Store) {
    let redis = TestRedis::start().unwrap();
    lifecycle::deleting_the_last_copys_dead_letter_deletes_the_shared_attachment(
        &redis,
        Arc::new(store.provider()),
        &store.count(),
    )
    .await;
}
