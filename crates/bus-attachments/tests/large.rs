//! A 50 MB attachment sent and read end to end with bounded memory: neither the sender nor
//! the handler holds the file, so the process's peak RSS grows by far less than its size.
//! A test file of its own: the peak is the whole process's.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_attachments::{
    send_with_attachment, AttachmentLayer, AttachmentMeta, AttachmentProvider, ContextExt,
};
use bus_core::{CommandProcessor, Context, ProcessError, SendOptions};
use bus_test_redis::TestRedis;
use common::{attachment_keys, eventually, pattern_body, provider, PatternCheck, Running, Upload};
use futures::TryStreamExt;

const SIZE: u64 = 50 * 1000 * 1000;
/// What the process may grow by at its peak: well under the attachment's size.
const BOUND: u64 = 16 * 1024 * 1024;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_megabytes_sent_and_read_with_bounded_memory() {
    let redis = TestRedis::start().unwrap();
    let check = Arc::new(Check::default());
    let attachments: Arc<dyn AttachmentProvider> = Arc::new(provider(&redis).await);
    let host = bus_core::Host::builder()
        .transport(common::transport(&redis).await)
        .middleware(AttachmentLayer::new(Arc::clone(&attachments)))
        .command::<Upload, _>(Arc::clone(&check))
        .build()
        .unwrap();
    let running = Running::start(host);
    // Warm up (connections, scripts, buffers) with a small one, then reset the peak.
    send_with_attachment(
        &running.bus,
        &*attachments,
        &Upload { n: 0 },
        AttachmentMeta::new("warm", "x/y"),
        pattern_body(1_000_000),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            check.done.lock().unwrap().is_some()
        })
        .await
    );
    *check.done.lock().unwrap() = None;
    // Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_bytes("VmRSS:");

    let meta = AttachmentMeta::new("big.bin", "application/octet-stream").length(SIZE);
    send_with_attachment(
        &running.bus,
        &*attachments,
        &Upload { n: 1 },
        meta,
        pattern_body(SIZE),
        &SendOptions::new(),
    )
    .await
    .unwrap();
    assert!(
        eventually(Duration::from_secs(120), || async {
            check.done.lock().unwrap().is_some()
        })
        .await
    );
    let peak = status_bytes("VmHWM:");
    let growth = peak.saturating_sub(before);
    println!("50 MB attachment: RSS before {before} B, peak {peak} B, growth {growth} B (bound {BOUND} B)");
    assert_eq!(*check.done.lock().unwrap(), Some((SIZE, 0)));
    assert!(
        growth < BOUND,
        "peak RSS grew by {growth} bytes, bound {BOUND}"
    );
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
