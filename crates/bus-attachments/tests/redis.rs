//! Attachments on Redis end to end: sent with a command, read by its handler as a stream,
//! kept through a retry, deleted after the ack; size limit and expiry backstop; deleted
//! with its dead letter, an event's shared by three subscriptions (tests/lifecycle).

mod common;
mod lifecycle;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_attachments::{
    send_with_attachment, AttachmentLayer, AttachmentMeta, AttachmentProvider, AttachmentRef,
    ContextExt, Error, RedisProvider,
};
use bus_core::{
    CommandProcessor, Context, OutgoingMessage, ProcessError, SendMiddleware, SendOptions,
};
use bus_test_redis::TestRedis;
use bytes::Bytes;
use common::{
    attachment_keys, eventually, pattern_body, provider, pttl, PatternCheck, Running, Upload,
};
use futures::{StreamExt, TryStreamExt};

/// What one delivery's handler read.
#[derive(Debug, Clone, PartialEq)]
struct Read {
    delivery: u32,
    name: String,
    length: u64,
    bytes_seen: u64,
    mismatches: u64,
}

#[derive(Default)]
struct Reader {
    reads: Mutex<Vec<Read>>,
    /// Fail the first delivery (after reading the attachment).
    fail_first: bool,
}

#[async_trait]
impl CommandProcessor<Upload> for Arc<Reader> {
    async fn process(&self, _: Upload, ctx: &Context) -> Result<(), ProcessError> {
        let attachment = ctx.attachment().await?.ok_or("no attachment")?;
        let reference = attachment.reference().clone();
        let mut check = PatternCheck::default();
        let mut body = attachment.into_stream();
        while let Some(chunk) = body.try_next().await? {
            check.feed(&chunk);
        }
        self.reads.lock().unwrap().push(Read {
            delivery: ctx.delivery_count(),
            name: reference.name,
            length: reference.length,
            bytes_seen: check.seen,
            mismatches: check.mismatches,
        });
        if self.fail_first && ctx.delivery_count() == 1 {
            return Err(ProcessError::retry_after(
                Duration::from_millis(50),
                "first try fails",
            ));
        }
        Ok(())
    }
}

async fn host_with(redis: &TestRedis, reader: &Arc<Reader>) -> Running {
    let provider: Arc<dyn AttachmentProvider> = Arc::new(provider(redis).await);
    let host = bus_core::Host::builder()
        .transport(common::transport(redis).await)
        .middleware(AttachmentLayer::new(provider))
        .command::<Upload, _>(Arc::clone(reader))
        .build()
        .unwrap();
    Running::start(host)
}

const LEN: u64 = 1_000_000; // 3 full chunks of 256 KiB and a partial one

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_streams_the_attachment_and_it_is_deleted_after_the_ack() {
    let redis = TestRedis::start().unwrap();
    let reader = Arc::new(Reader::default());
    let running = host_with(&redis, &reader).await;
    let provider = provider(&redis).await;
    let meta = AttachmentMeta::new("report.bin", "application/octet-stream").length(LEN);
    let (_, reference) = send_with_attachment(
        &running.bus,
        &provider,
        &Upload { n: 1 },
        meta,
        pattern_body(LEN),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(reference.length, LEN);
    assert_eq!(reference.scope, "files");
    // Stored, under the queue's hash tag, with an expiry on every key.
    let keys = attachment_keys(&redis);
    assert!(
        eventually(Duration::from_secs(30), || async {
            !reader.reads.lock().unwrap().is_empty()
        })
        .await
    );
    let reads = reader.reads.lock().unwrap().clone();
    assert_eq!(
        reads,
        vec![Read {
            delivery: 1,
            name: "report.bin".into(),
            length: LEN,
            bytes_seen: LEN,
            mismatches: 0
        }]
    );
    // Gone once handled.
    assert!(
        eventually(Duration::from_secs(10), || async {
            attachment_keys(&redis).is_empty()
        })
        .await,
        "left behind: {:?}",
        attachment_keys(&redis)
    );
    running.stop().await;
    // The keys seen before the handler ran (if it had not yet deleted them) were tagged.
    for key in keys {
        assert!(key.contains(":{files}:att:"), "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attachment_is_kept_through_a_retry_and_deleted_after_the_ack() {
    let redis = TestRedis::start().unwrap();
    let reader = Arc::new(Reader {
        fail_first: true,
        ..Reader::default()
    });
    let running = host_with(&redis, &reader).await;
    let provider = provider(&redis).await;
    send_with_attachment(
        &running.bus,
        &provider,
        &Upload { n: 2 },
        AttachmentMeta::new("retry.bin", "application/octet-stream"),
        pattern_body(LEN),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            reader.reads.lock().unwrap().len() >= 2
        })
        .await
    );
    let reads = reader.reads.lock().unwrap().clone();
    for (n, read) in reads.iter().enumerate() {
        assert_eq!(read.delivery as usize, n + 1);
        assert_eq!((read.bytes_seen, read.mismatches), (LEN, 0), "{read:?}");
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            attachment_keys(&redis).is_empty()
        })
        .await,
        "left behind: {:?}",
        attachment_keys(&redis)
    );
    running.stop().await;
}

#[derive(Debug)]
struct Refuse;

#[async_trait]
impl SendMiddleware for Refuse {
    async fn before_send(&self, _: &mut OutgoingMessage<'_>) -> bus_core::Result<()> {
        Err(bus_core::Error::transport("refused by the test"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_fails_after_the_upload_leaves_nothing_behind() {
    let redis = TestRedis::start().unwrap();
    let bus = bus_core::Bus::new(
        common::transport(&redis).await,
        bus_core::BusConfig::default().send_middleware(Refuse),
    );
    let provider = provider(&redis).await;
    let failed = send_with_attachment(
        &bus,
        &provider,
        &Upload { n: 3 },
        AttachmentMeta::new("lost.bin", "application/octet-stream"),
        pattern_body(LEN),
        &SendOptions::new(),
    )
    .await;
    assert!(matches!(failed, Err(Error::Bus(_))), "{failed:?}");
    assert_eq!(attachment_keys(&redis), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_expires_even_mid_upload() {
    let redis = TestRedis::start().unwrap();
    let provider = provider(&redis).await;
    // A sender that stalls after two chunks (it crashed, say): what it wrote expires.
    let stalled = futures::stream::iter([
        Ok(Bytes::from(vec![1u8; RedisProvider::DEFAULT_CHUNK_SIZE])),
        Ok(Bytes::from(vec![2u8; RedisProvider::DEFAULT_CHUNK_SIZE])),
    ])
    .chain(futures::stream::pending());
    let upload = tokio::spawn({
        let provider = provider.clone();
        async move {
            provider
                .put(
                    "files",
                    AttachmentMeta::new("stalled.bin", "x/y"),
                    Box::pin(stalled),
                )
                .await
        }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            let keys = attachment_keys(&redis);
            keys.len() == 1 && redis.client().cmd(&["LLEN", &keys[0]]).unwrap().as_int() == Some(2)
        })
        .await
    );
    let ttl = pttl(&redis, &attachment_keys(&redis)[0]);
    assert!(
        ttl > 0 && ttl <= RedisProvider::DEFAULT_TTL.as_millis() as i64,
        "{ttl}"
    );
    upload.abort();
    // A complete one: both keys expire too.
    let reference = provider
        .put(
            "files",
            AttachmentMeta::new("done.bin", "x/y"),
            pattern_body(10),
        )
        .await
        .unwrap();
    let keys: Vec<String> = attachment_keys(&redis)
        .into_iter()
        .filter(|key| key.contains(&reference.id))
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for key in &keys {
        let ttl = pttl(&redis, key);
        assert!(ttl > 0, "{key}: {ttl}");
    }
    // touch sets a new one; delete removes both.
    assert!(provider
        .touch(&reference, Duration::from_secs(5))
        .await
        .unwrap());
    assert!(keys.iter().all(|key| pttl(&redis, key) <= 5000));
    assert!(provider.delete(&reference).await.unwrap());
    assert!(!provider.delete(&reference).await.unwrap());
    assert!(matches!(
        provider.open(&reference).await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_limit_refuses_and_keeps_nothing() {
    let redis = TestRedis::start().unwrap();
    let provider = provider(&redis).await.max_size(500_000);
    // Declared too large: refused before anything is written.
    let declared = provider
        .put(
            "files",
            AttachmentMeta::new("big.bin", "x/y").length(500_001),
            pattern_body(10),
        )
        .await;
    assert!(
        matches!(
            declared,
            Err(Error::TooLarge {
                size: 500_001,
                max: 500_000
            })
        ),
        "{declared:?}"
    );
    // Undeclared and too large: refused once the limit is passed, what was written deleted.
    let streamed = provider
        .put(
            "files",
            AttachmentMeta::new("big.bin", "x/y"),
            pattern_body(LEN),
        )
        .await;
    assert!(
        matches!(streamed, Err(Error::TooLarge { max: 500_000, .. })),
        "{streamed:?}"
    );
    // A body that differs from its declared length.
    let short = provider
        .put(
            "files",
            AttachmentMeta::new("short.bin", "x/y").length(1000),
            pattern_body(999),
        )
        .await;
    assert!(
        matches!(
            short,
            Err(Error::LengthMismatch {
                declared: 1000,
                actual: 999
            })
        ),
        "{short:?}"
    );
    assert_eq!(attachment_keys(&redis), Vec::<String>::new());
    // At the limit it is stored and reads back whole.
    let reference = provider
        .put(
            "files",
            AttachmentMeta::new("ok.bin", "x/y"),
            pattern_body(500_000),
        )
        .await
        .unwrap();
    let mut check = PatternCheck::default();
    let mut body = provider.open(&reference).await.unwrap();
    while let Some(chunk) = body.try_next().await.unwrap() {
        check.feed(&chunk);
    }
    assert_eq!((check.seen, check.mismatches), (500_000, 0));
}

#[derive(Default)]
struct Rejecter {
    reads: Mutex<u32>,
}

#[async_trait]
impl CommandProcessor<Upload> for Arc<Rejecter> {
    async fn process(&self, _: Upload, ctx: &Context) -> Result<(), ProcessError> {
        ctx.attachment().await?.ok_or("no attachment")?;
        *self.reads.lock().unwrap() += 1;
        Err(ProcessError::dead_letter("rejected by the test"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_message_keeps_its_attachment() {
    let redis = TestRedis::start().unwrap();
    let rejecter = Arc::new(Rejecter::default());
    let provider: Arc<dyn AttachmentProvider> = Arc::new(provider(&redis).await);
    let host = bus_core::Host::builder()
        .transport(common::transport(&redis).await)
        .middleware(AttachmentLayer::new(Arc::clone(&provider)))
        .command::<Upload, _>(Arc::clone(&rejecter))
        .build()
        .unwrap();
    let running = Running::start(host);
    let (_, reference) = send_with_attachment(
        &running.bus,
        &*provider,
        &Upload { n: 4 },
        AttachmentMeta::new("dead.bin", "application/octet-stream"),
        pattern_body(LEN),
        &SendOptions::new(),
    )
    .await
    .unwrap();
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
    assert_eq!(*rejecter.reads.lock().unwrap(), 1);
    assert_eq!(
        attachment_keys(&redis).len(),
        2,
        "{:?}",
        attachment_keys(&redis)
    );
    let mut check = PatternCheck::default();
    let mut body = provider.open(&reference).await.unwrap();
    while let Some(chunk) = body.try_next().await.unwrap() {
        check.feed(&chunk);
    }
    assert_eq!((check.seen, check.mismatches), (LEN, 0));
}

/// Dead-letters while `reject` is set, then reads the attachment and succeeds.
#[derive(Default)]
struct Flaky {
    reject: std::sync::atomic::AtomicBool,
    reads: Mutex<Vec<(u64, u64)>>,
}

#[async_trait]
impl CommandProcessor<Upload> for Arc<Flaky> {
    async fn process(&self, _: Upload, ctx: &Context) -> Result<(), ProcessError> {
        let attachment = ctx.attachment().await?.ok_or("no attachment")?;
        if self.reject.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(ProcessError::dead_letter("rejected by the test"));
        }
        let mut check = PatternCheck::default();
        let mut body = attachment.into_stream();
        while let Some(chunk) = body.try_next().await? {
            check.feed(&chunk);
        }
        self.reads
            .lock()
            .unwrap()
            .push((check.seen, check.mismatches));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_dead_letter_still_has_its_attachment() {
    let redis = TestRedis::start().unwrap();
    let flaky = Arc::new(Flaky::default());
    flaky
        .reject
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let provider: Arc<dyn AttachmentProvider> = Arc::new(provider(&redis).await);
    let host = bus_core::Host::builder()
        .transport(common::transport(&redis).await)
        .middleware(AttachmentLayer::new(Arc::clone(&provider)))
        .command::<Upload, _>(Arc::clone(&flaky))
        .build()
        .unwrap();
    let running = Running::start(host);
    send_with_attachment(
        &running.bus,
        &*provider,
        &Upload { n: 5 },
        AttachmentMeta::new("requeued.bin", "application/octet-stream"),
        pattern_body(LEN),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    let source = bus_core::transport::Source::queue("files").unwrap();
    let dead = bus_redis::keys::QueueKeys::new(redis.namespace(), &source).dead;
    assert!(
        eventually(Duration::from_secs(30), || async {
            redis.client().cmd(&["LLEN", &dead]).unwrap().as_int() == Some(1)
        })
        .await
    );
    // An operator requeues it (as `bus requeue` does); the handler now takes it.
    flaky
        .reject
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let admin = bus_redis::admin::Admin::new(common::transport(&redis).await);
    let requeued = admin
        .requeue(&source, &bus_core::operator::Selection::All, None)
        .await
        .unwrap();
    assert_eq!(requeued.requeued.len(), 1, "{requeued:?}");
    assert!(
        eventually(Duration::from_secs(30), || async {
            !flaky.reads.lock().unwrap().is_empty()
        })
        .await
    );
    assert_eq!(*flaky.reads.lock().unwrap(), vec![(LEN, 0)]);
    assert!(
        eventually(Duration::from_secs(10), || async {
            attachment_keys(&redis).is_empty()
        })
        .await,
        "left behind: {:?}",
        attachment_keys(&redis)
    );
    running.stop().await;
}

/// A count of the attachment keys, for the scenarios shared with the object stores.
fn key_count(
    redis: &TestRedis,
) -> impl Fn() -> futures::future::BoxFuture<'static, usize> + Sync + '_ {
    move || {
        let n = attachment_keys(redis).len();
        Box::pin(async move { n })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_dead_letter_deletes_its_attachment() {
    let redis = TestRedis::start().unwrap();
    let provider = Arc::new(provider(&redis).await);
    lifecycle::deleting_the_dead_letter_deletes_its_attachment(
        &redis,
        provider,
        &key_count(&redis),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_attachment_is_shared_by_three_subscriptions() {
    let redis = TestRedis::start().unwrap();
    let provider = Arc::new(provider(&redis).await);
    lifecycle::an_event_attachment_is_shared_by_three_subscriptions(
        &redis,
        provider,
        &key_count(&redis),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_count_once_and_the_last_deletes() {
    let redis = TestRedis::start().unwrap();
    let provider = Arc::new(provider(&redis).await);
    lifecycle::releases_count_once_and_the_last_deletes(provider, &key_count(&redis)).await;
}

// The in-memory provider (the memory transport's) counts holders the same way.
#[tokio::test]
async fn releases_count_once_and_the_last_deletes_in_memory() {
    let provider = bus_attachments::MemoryProvider::new();
    let count = {
        let provider = provider.clone();
        move || {
            let n = provider.len();
            Box::pin(async move { n }) as futures::future::BoxFuture<'static, usize>
        }
    };
    lifecycle::releases_count_once_and_the_last_deletes(Arc::new(provider), &count).await;
}

/// The bytes stored in an attachment's data list.
async fn stored_bytes(redis: &TestRedis, id: &str) -> u64 {
    let client = common::config(redis).connect_client().await.unwrap();
    let data = attachment_keys(redis)
        .into_iter()
        .find(|key| key.contains(id) && key.ends_with(":data"))
        .unwrap();
    let chunks: Vec<Bytes> = fred::prelude::ListInterface::lrange(&client, &data, 0, -1)
        .await
        .unwrap();
    chunks.iter().map(|chunk| chunk.len() as u64).sum()
}

async fn read_bytes(provider: &RedisProvider, reference: &AttachmentRef) -> Vec<u8> {
    let mut body = provider.open(reference).await.unwrap();
    let mut all = Vec::new();
    while let Some(chunk) = body.try_next().await.unwrap() {
        all.extend_from_slice(&chunk);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_round_trips_and_stores_fewer_bytes() {
    let redis = TestRedis::start().unwrap();
    // Compressible: text, 1 MB in 64 KiB pieces (4 chunks of 256 KiB).
    let text: Vec<u8> = b"invoice line: 42 x widget @ 3.50 EUR\n"
        .iter()
        .copied()
        .cycle()
        .take(1_000_000)
        .collect();
    let body = || -> bus_attachments::BodyStream {
        let pieces: Vec<std::io::Result<Bytes>> = text
            .chunks(64 * 1024)
            .map(|piece| Ok(Bytes::copy_from_slice(piece)))
            .collect();
        Box::pin(futures::stream::iter(pieces))
    };
    let meta = || AttachmentMeta::new("lines.txt", "text/plain");
    // Off by default: stored as sent.
    let plain = provider(&redis).await;
    let stored = plain.put("files", meta(), body()).await.unwrap();
    assert_eq!(stored_bytes(&redis, &stored.id).await, 1_000_000);
    // On: smaller, and reads back byte for byte (the reader needs no setting).
    let compressing = provider(&redis).await.compress(true);
    let reference = compressing.put("files", meta(), body()).await.unwrap();
    assert_eq!(reference.length, 1_000_000);
    let bytes = stored_bytes(&redis, &reference.id).await;
    assert!(bytes < 100_000, "{bytes} bytes stored for 1,000,000");
    assert_eq!(read_bytes(&plain, &reference).await, text);
    // Incompressible data round trips too.
    let random = compressing
        .put("files", meta(), pattern_body(LEN))
        .await
        .unwrap();
    let mut check = PatternCheck::default();
    check.feed(&read_bytes(&plain, &random).await);
    assert_eq!((check.seen, check.mismatches), (LEN, 0));
    // A corrupt compressed chunk is a clear error, not a panic or a wrong body.
    let data = attachment_keys(&redis)
        .into_iter()
        .find(|key| key.contains(&reference.id) && key.ends_with(":data"))
        .unwrap();
    redis
        .client()
        .cmd(&["LSET", &data, "1", "not deflate"])
        .unwrap();
    let mut body = plain.open(&reference).await.unwrap();
    let mut failed = None;
    while let Some(chunk) = body.next().await {
        if let Err(error) = chunk {
            failed = Some(error);
            break;
        }
    }
    assert!(matches!(failed, Some(Error::Corrupt { .. })), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_last_copys_dead_letter_deletes_the_shared_attachment() {
    let redis = TestRedis::start().unwrap();
    let provider = Arc::new(provider(&redis).await);
    lifecycle::deleting_the_last_copys_dead_letter_deletes_the_shared_attachment(
        &redis,
        provider,
        &key_count(&redis),
    )
    .await;
}

// The in-memory transport and provider share an event's attachment the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_attachment_is_shared_on_the_memory_transport() {
    lifecycle::an_event_attachment_is_shared_on_the_memory_transport().await;
}
