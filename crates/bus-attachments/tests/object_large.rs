//! A 50 MB attachment through a real S3 server (moto) end to end with bounded memory:
//! the sender holds at most a few 5 MiB parts, the handler one response buffer, so the
//! process's peak RSS grows by far less than the file. A test file of its own: the peak
//! is the whole process's.

mod common;
#[allow(unused_macros)]
mod stores;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_attachments::{
    send_with_attachment, AttachmentLayer, AttachmentMeta, AttachmentProvider, ContextExt,
    ObjectStoreProvider,
};
use bus_core::{CommandProcessor, Context, ProcessError, SendOptions};
use bus_test_redis::TestRedis;
use common::{eventually, pattern_body, PatternCheck, Running, Upload};
use futures::TryStreamExt;
use stores::Store;

const SIZE: u64 = 50 * 1000 * 1000;
/// What the process may grow by at its peak: the parts in flight and the one being
/// filled (3 x 5 MiB) with room for the HTTP client's buffers; well under the file.
const BOUND: u64 = 24 * 1024 * 1024;

#[derive(Default)]
struct Check {
    done: Mutex<Option<(u64, u64)>>,
}

#[async_trait]
impl CommandProcessor<Upload> for Arc<Check> {
    async fn process(&self, _: Upload, ctx: &Context) -> Result<(), ProcessError> {
        let attachment = ctx.attachment().await?.ok_or("no attachment")?;
        let mut check = PatternCheck::default();
        let mut body = attachment.into_stream();
        while let Some(chunk) = body.try_next().await? {
            check.feed(&chunk);
        }
        *self.done.lock().unwrap() = Some((check.seen, check.mismatches));
        Ok(())
    }
}

/// A field of /proc/self/status, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|line| line.starts_with(field)).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

async fn send(running: &Running, provider: &dyn AttachmentProvider, n: u64, len: u64) {
    let meta = AttachmentMeta::new("big.bin", "application/octet-stream").length(len);
    send_with_attachment(
        &running.bus,
        provider,
        &Upload { n },
        meta,
        pattern_body(len),
        &SendOptions::new(),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_megabytes_through_s3_with_bounded_memory() {
    let store = tokio::task::spawn_blocking(Store::s3).await.unwrap();
    let redis = TestRedis::start().unwrap();
    let check = Arc::new(Check::default());
    let provider: Arc<ObjectStoreProvider> = Arc::new(store.provider());
    let host = bus_core::Host::builder()
        .transport(common::transport(&redis).await)
        .middleware(AttachmentLayer::new(provider.clone()))
        .command::<Upload, _>(Arc::clone(&check))
        .build()
        .unwrap();
    let running = Running::start(host);
    // Warm up (connections, TLS-less HTTP pools, buffers) with two parts' worth, then
    // reset the peak.
    send(&running, &*provider, 0, 11_000_000).await;
    assert!(
        eventually(Duration::from_secs(60), || async {
            check.done.lock().unwrap().is_some()
        })
        .await
    );
    *check.done.lock().unwrap() = None;
    // Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_bytes("VmRSS:");

    send(&running, &*provider, 1, SIZE).await;
    assert!(
        eventually(Duration::from_secs(300), || async {
            check.done.lock().unwrap().is_some()
        })
        .await
    );
    let peak = status_bytes("VmHWM:");
    let growth = peak.saturating_sub(before);
    println!(
        "50 MB attachment on S3 (moto): RSS before {before} B, peak {peak} B, growth {growth} B (bound {BOUND} B)"
    );
    assert_eq!(*check.done.lock().unwrap(), Some((SIZE, 0)));
    assert!(
        growth < BOUND,
        "peak RSS grew by {growth} bytes, bound {BOUND}"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            store.objects().await.is_empty()
        })
        .await,
        "left behind: {:?}",
        store.objects().await
    );
    running.stop().await;
}
