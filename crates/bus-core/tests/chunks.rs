//! The host runs handlers in tasks of up to 256 messages, each polled once as it is made
//! and only the unfinished ones kept in a set (docs/performance.md, "The host and the
//! in-memory transport"): what one handler does must still stay its own. A hanging
//! handler holds only its own slot, a panicking one is the only one retried, and the
//! concurrency limit holds exactly, whether handlers finish in their first poll or not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::Source;
use bus_core::{
    Backoff, CommandProcessor, Context, Host, MemoryTransport, ProcessError, ProcessingSettings,
    RedisCommand,
};
use bus_test_redis::eventually;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "chunked")]
struct Job {
    n: u32,
}

#[derive(Default)]
struct Probe {
    /// (n, delivery count) of every handled delivery.
    handled: Mutex<Vec<(u32, u32)>>,
    running: AtomicUsize,
    most_running: AtomicUsize,
    release: Notify,
    limit: usize,
    /// Whether each handler yields once (not done in its first poll).
    yields: bool,
}

#[async_trait]
impl CommandProcessor<Job> for Arc<Probe> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(self.limit)
            .prefetch_count(100)
            .retry(Backoff::fixed(Duration::ZERO))
    }

    async fn process(&self, job: Job, ctx: &Context) -> Result<(), ProcessError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(now, Ordering::SeqCst);
        self.handled
            .lock()
            .unwrap()
            .push((job.n, ctx.delivery_count()));
        if self.yields {
            // Let the others of its chunk run meanwhile.
            tokio::task::yield_now().await;
        }
        if job.n == 0 {
            // Hangs until the test lets it go.
            self.release.notified().await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        if job.n == 7 && ctx.delivery_count() == 1 {
            panic!("job 7 fails its first delivery");
        }
        Ok(())
    }
}

fn queue() -> Source {
    Source::queue("chunked").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_handler_holds_only_its_own_slot_and_a_panic_only_its_own_message() {
    hanging_and_panicking(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_when_handlers_finish_in_their_first_poll() {
    hanging_and_panicking(false).await;
}

async fn hanging_and_panicking(yields: bool) {
    let transport = MemoryTransport::new();
    let probe = Arc::new(Probe {
        limit: 8,
        yields,
        ..Probe::default()
    });
    let running = Host::builder()
        .transport(transport.clone())
        .command::<Job, _>(Arc::clone(&probe))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let jobs: Vec<Job> = (0..200).map(|n| Job { n }).collect();
    running.bus().send_batch(&jobs).await.unwrap();

    // Everything but the hanging job 0 finishes while it hangs: its chunk-mates' slots
    // were given back as they finished, not when the chunk did.
    let all_but_one = || {
        let stats = transport.stats(&queue());
        stats.ready == 0 && stats.in_flight == 1
    };
    assert!(
        eventually(Duration::from_secs(10), all_but_one).await,
        "{:?}",
        transport.stats(&queue())
    );
    probe.release.notify_one();
    assert!(
        eventually(Duration::from_secs(10), || transport
            .stats(&queue())
            .in_flight
            == 0)
        .await
    );
    running.shutdown().await.unwrap();

    let handled = probe.handled.lock().unwrap().clone();
    let mut retried: Vec<(u32, u32)> = handled.iter().filter(|(_, d)| *d > 1).copied().collect();
    retried.sort_unstable();
    assert_eq!(retried, [(7, 2)], "only the panicking job ran twice");
    assert_eq!(handled.len(), 201);
    let most = probe.most_running.load(Ordering::SeqCst);
    assert!(most <= 8, "{most} handlers ran at once; the limit is 8");
    // (Handlers that never yield run one at a time in their chunk's task.)
    assert!(most > 1 || !yields, "handlers ran concurrently");
    assert_eq!(transport.stats(&queue()).dead_letters, 0);
}
