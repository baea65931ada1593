//! Checks of request/reply ([`Bus::request`], [`Context::reply`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{not_checked, start_command, Probe};
use bus_core::{
    Bus, BusConfig, CommandProcessor, Context, Error, Message, MessageKind, ProcessError, Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    n: u32,
    /// How long the responder takes before it replies.
    delay_ms: u64,
}
command!(Ask, "conformance-ask");

#[derive(Debug, Serialize, Deserialize)]
struct Unanswered;
command!(Unanswered, "conformance-unanswered");

/// Doubles `n`; counts the messages that were not requests.
#[derive(Default)]
struct Doubler {
    not_requests: AtomicU32,
    replied: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Ask> for Arc<Doubler> {
    async fn process(&self, ask: Ask, ctx: &Context) -> Result<(), ProcessError> {
        tokio::time::sleep(Duration::from_millis(ask.delay_ms)).await;
        let counter = if ctx.reply(&(ask.n * 2)).await? {
            &self.replied
        } else {
            &self.not_requests
        };
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A request gets its own reply (concurrent requests of one bus each get theirs); a
/// plain send of the same message is handled without a reply (`reply` says so); a
/// request nobody answers fails with `RequestTimeout` after its timeout, and one
/// answered too late does not disturb the next; and once the requesting bus is dropped
/// no reply inbox is left (the probe counts them: Redis keys, memory inboxes).
pub async fn a_request_gets_its_reply_and_leaves_no_inbox(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let doubler = Arc::new(Doubler::default());
    let running = start_command::<Ask, _>(Arc::clone(&transport), Arc::clone(&doubler)).await;
    let requester = Bus::new(Arc::clone(&transport), BusConfig::default());
    let timeout = Duration::from_secs(10);

    let ask = |n| Ask { n, delay_ms: 0 };
    let asks: Vec<Ask> = (1..=5).map(ask).collect();
    let requests = asks
        .iter()
        .map(|a| requester.request::<Ask, u32>(a, timeout));
    let replies = futures::future::join_all(requests).await;
    let replies: Vec<u32> = replies.into_iter().map(|r| r.expect("replied")).collect();
    assert_eq!(
        replies,
        vec![2, 4, 6, 8, 10],
        "each request gets its own reply"
    );

    running.bus().send(&ask(7)).await.expect("sent");
    assert!(
        super::wait_until(Duration::from_secs(10), || {
            doubler.not_requests.load(Ordering::SeqCst) == 1
        })
        .await,
        "a plain send is handled, and `reply` says it was not a request"
    );

    let started = Instant::now();
    let short = Duration::from_millis(300);
    let timed_out = requester
        .request::<Unanswered, u32>(&Unanswered, short)
        .await;
    let waited = started.elapsed();
    assert!(
        matches!(timed_out, Err(Error::RequestTimeout { .. })),
        "{timed_out:?}"
    );
    assert!(
        waited >= short && waited < short + Duration::from_secs(2),
        "timed out after {waited:?}"
    );

    let late = Ask {
        n: 1000,
        delay_ms: 600,
    };
    let late = requester
        .request::<Ask, u32>(&late, Duration::from_millis(100))
        .await;
    assert!(
        matches!(late, Err(Error::RequestTimeout { .. })),
        "{late:?}"
    );
    // The late reply (2000) comes after its request gave up, and is not taken for the next.
    assert!(
        super::wait_until(Duration::from_secs(10), || {
            doubler.replied.load(Ordering::SeqCst) == 6
        })
        .await,
        "the late request was answered"
    );
    let next = requester.request::<Ask, u32>(&ask(21), timeout).await;
    assert_eq!(next.expect("replied"), 42);

    drop(requester);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match probe.reply_inboxes().await {
            None => {
                not_checked(
                    "a_request_gets_its_reply_and_leaves_no_inbox",
                    "inboxes left behind",
                    "a probe without reply_inboxes",
                );
                break;
            }
            Some(0) => break,
            Some(n) => assert!(Instant::now() < deadline, "{n} reply inboxes left behind"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.shutdown().await.expect("host stops");
}
