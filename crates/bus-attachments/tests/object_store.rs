//! The object_store provider on object_store's local-filesystem backend (real files in a
//! temporary directory): streamed in parts, read back, deleted after the ack, expired by
//! the sweep, size limit.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_attachments::{
    send_with_attachment, AttachmentLayer, AttachmentMeta, AttachmentProvider, ContextExt, Error,
    ObjectStoreProvider,
};
use bus_core::{CommandProcessor, Context, ProcessError, SendOptions};
use bus_test_redis::TestRedis;
use common::{eventually, pattern_body, PatternCheck, Running, Upload};
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;

fn local(dir: &Path) -> Arc<dyn ObjectStore> {
    Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap())
}

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.push(path.display().to_string());
        }
    }
    found
}

async fn read_all(
    provider: &dyn AttachmentProvider,
    reference: &bus_attachments::AttachmentRef,
) -> PatternCheck {
    let mut check = PatternCheck::default();
    let mut body = provider.open(reference).await.unwrap();
    while let Some(chunk) = body.try_next().await.unwrap() {
        check.feed(&chunk);
    }
    check
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twelve_megabyte_attachment_round_trips_in_parts_and_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let provider = ObjectStoreProvider::new(local(dir.path()), "attachments");
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
    assert_eq!(files(dir.path()).len(), 2, "{:?}", files(dir.path()));
    let check = read_all(&provider, &reference).await;
    assert_eq!((check.seen, check.mismatches), (len, 0));
    assert!(provider.delete(&reference).await.unwrap());
    assert!(!provider.delete(&reference).await.unwrap());
    assert!(matches!(
        provider.open(&reference).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(files(dir.path()), Vec::<String>::new());
}

#[derive(Default)]
struct Reader {
    read: Mutex<Option<(u64, u64)>>,
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
        *self.read.lock().unwrap() = Some((check.seen, check.mismatches));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_reads_it_and_it_is_deleted_after_the_ack() {
    let redis = TestRedis::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let provider = Arc::new(ObjectStoreProvider::new(local(dir.path()), "attachments"));
    let reader = Arc::new(Reader::default());
    let host = bus_core::Host::builder()
        .transport(common::transport(&redis).await)
        .middleware(AttachmentLayer::new(provider.clone()))
        .command::<Upload, _>(Arc::clone(&reader))
        .build()
        .unwrap();
    let running = Running::start(host);
    let len = 6_000_000;
    send_with_attachment(
        &running.bus,
        &*provider,
        &Upload { n: 1 },
        AttachmentMeta::new("scan.pdf", "application/pdf"),
        pattern_body(len),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            reader.read.lock().unwrap().is_some()
        })
        .await
    );
    assert_eq!(*reader.read.lock().unwrap(), Some((len, 0)));
    assert!(
        eventually(Duration::from_secs(10), || async {
            files(dir.path()).is_empty()
        })
        .await,
        "left behind: {:?}",
        files(dir.path())
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_deletes_what_expired_and_keeps_what_was_touched() {
    let dir = tempfile::tempdir().unwrap();
    let store = local(dir.path());
    // A TTL short enough to pass during the test: this test is about the expiry.
    let provider =
        ObjectStoreProvider::new(Arc::clone(&store), "attachments").ttl(Duration::from_millis(200));
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
    store.put(&orphan, vec![1u8; 10].into()).await.unwrap();
    assert_eq!(files(dir.path()).len(), 5);
    assert!(
        eventually(Duration::from_secs(10), || async {
            provider.sweep().await.unwrap();
            files(dir.path()).len() == 2
        })
        .await,
        "{:?}",
        files(dir.path())
    );
    assert!(matches!(
        provider.open(&expiring).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(read_all(&provider, &touched).await.seen, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_limit_refuses_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let provider = ObjectStoreProvider::new(local(dir.path()), "attachments").max_size(1_000_000);
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
    assert_eq!(files(dir.path()), Vec::<String>::new());
}
