//! Checks of a message's end: the processor's hook before a dead letter, and expiry.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{dead_letters_within, not_checked, start_command, wait_until, Probe};
use bus_core::transport::{DeadLetterReason, Source};
use bus_core::{
    Backoff, BoxError, CommandProcessor, Context, DeadLettering, Message, MessageKind, OnExpiry,
    ProcessError, ProcessingSettings, SendOptions, Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Hooked {
    n: u32,
    /// What the handler does: `retry`, `reject`; anything else succeeds.
    handler: String,
    /// What the hook does: `fail`, `panic`; anything else succeeds.
    hook: String,
}
command!(Hooked, "conformance-hooked");

/// What one hook call saw.
#[derive(Debug, Clone)]
struct HookCall {
    n: u32,
    reason: DeadLetterReason,
    errors: Vec<String>,
}

#[derive(Default)]
struct WithHook {
    runs: AtomicU32,
    hooks: Mutex<Vec<HookCall>>,
    on_expiry: OnExpiry,
}

impl WithHook {
    fn hooks(&self) -> Vec<HookCall> {
        self.hooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl CommandProcessor<Hooked> for Arc<WithHook> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .dead_letter_delivery_limit(3)
            .retry(Backoff::fixed(Duration::from_millis(5)))
            .on_expiry(self.on_expiry)
    }
    async fn process(&self, message: Hooked, ctx: &Context) -> Result<(), ProcessError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let error = format!("run {} of message {}", ctx.delivery_count(), message.n);
        match message.handler.as_str() {
            "retry" => Err(ProcessError::retry(error)),
            "reject" => Err(ProcessError::dead_letter(error)),
            // A retry long enough for a deadline to pass meanwhile.
            "late" if ctx.delivery_count() == 1 => {
                Err(ProcessError::retry_after(Duration::from_millis(600), error))
            }
            _ => Ok(()),
        }
    }
    async fn before_dead_letter(
        &self,
        message: Hooked,
        dead_letter: &DeadLettering<'_>,
        _: &Context,
    ) -> Result<(), BoxError> {
        let errors = dead_letter.errors().await?;
        self.hooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(HookCall {
                n: message.n,
                reason: dead_letter.reason(),
                errors: errors.into_iter().map(|e| e.message).collect(),
            });
        match message.hook.as_str() {
            "fail" => Err("the hook failed on purpose".into()),
            "panic" => panic!("the hook panicked on purpose"),
            _ => Ok(()),
        }
    }
}

fn hooked(n: u32, handler: &str, hook: &str) -> Hooked {
    Hooked {
        n,
        handler: handler.into(),
        hook: hook.into(),
    }
}

fn source() -> Source {
    Source::queue(Hooked::NAME).expect("valid name")
}

/// A processor's `before_dead_letter` hook runs once per dead letter, before it, with
/// the reason and the error history (every delivery's error, oldest first, where the
/// transport keeps them); a hook that fails or panics does not stop the dead letter,
/// and a handled message reaches no hook.
pub async fn the_hook_before_a_dead_letter_sees_why_and_never_stops_it(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let history = transport.capabilities().error_history;
    let processor = Arc::new(WithHook::default());
    let running = start_command::<Hooked, _>(transport, Arc::clone(&processor)).await;
    let bus = running.bus();
    for message in [
        hooked(1, "retry", "ok"),
        hooked(2, "reject", "ok"),
        hooked(3, "retry", "fail"),
        hooked(4, "reject", "panic"),
        hooked(5, "ok", "ok"),
    ] {
        bus.send(&message).await.expect("sent");
    }
    let dead = dead_letters_within(probe, &source(), 4).await;
    let handled = wait_until(Duration::from_secs(10), || {
        processor.runs.load(Ordering::SeqCst) >= 9
    })
    .await;
    running.shutdown().await.expect("shutdown");
    assert!(handled, "runs: {}", processor.runs.load(Ordering::SeqCst));
    assert_eq!(
        dead.len(),
        4,
        "every failed message is dead-lettered: {dead:?}"
    );
    let mut hooks = processor.hooks();
    hooks.sort_by_key(|h| h.n);
    assert_eq!(
        hooks.iter().map(|h| (h.n, h.reason)).collect::<Vec<_>>(),
        [
            (1, DeadLetterReason::DeliveryLimit),
            (2, DeadLetterReason::Rejected),
            (3, DeadLetterReason::DeliveryLimit),
            (4, DeadLetterReason::Rejected),
        ],
        "one hook call per dead letter, with its reason: {hooks:?}"
    );
    let retried = if history {
        vec![
            "run 1 of message 1",
            "run 2 of message 1",
            "run 3 of message 1",
        ]
    } else {
        not_checked(
            "the_hook_before_a_dead_letter_sees_why_and_never_stops_it",
            "the errors before the last",
            "error_history: false",
        );
        vec!["run 3 of message 1"]
    };
    assert_eq!(hooks[0].errors, retried, "the hook sees the error history");
    assert_eq!(hooks[1].errors, ["run 1 of message 2"]);
    for reason in ["delivery_limit", "rejected"] {
        assert_eq!(
            dead.iter().filter(|d| d.reason == reason).count(),
            2,
            "{dead:?}"
        );
    }
}

/// A message received after its deadline never runs: by default it is dead-lettered
/// `expired` (after the hook); one received before it runs. A deadline survives a delay
/// and a retry: a delayed message due after its deadline, and a retry due after it, are
/// dead-lettered `expired` too.
pub async fn expired_messages_are_dead_lettered_unhandled(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let delays = transport.capabilities().delayed_sends.is_some();
    let retries = transport.capabilities().retry_delays.is_some();
    let processor = Arc::new(WithHook::default());
    let running = start_command::<Hooked, _>(transport, Arc::clone(&processor)).await;
    let bus = running.bus();
    let past = SystemTime::now() - Duration::from_secs(1);
    let mut expected = vec![1];
    bus.send_with(&hooked(1, "ok", "ok"), &SendOptions::new().expires_at(past))
        .await
        .expect("sent");
    let live = SendOptions::new().expires_in(Duration::from_secs(60));
    bus.send_with(&hooked(2, "ok", "ok"), &live)
        .await
        .expect("sent");
    if delays {
        let options = SendOptions::new()
            .delay(Duration::from_millis(400))
            .expires_in(Duration::from_millis(100));
        bus.send_with(&hooked(3, "ok", "ok"), &options)
            .await
            .expect("sent");
        expected.push(3);
    } else {
        not_checked(
            "expired_messages_are_dead_lettered_unhandled",
            "a delayed message's deadline",
            "delayed_sends: None",
        );
    }
    if retries {
        let options = SendOptions::new().expires_in(Duration::from_millis(300));
        bus.send_with(&hooked(4, "late", "ok"), &options)
            .await
            .expect("sent");
        expected.push(4);
    } else {
        not_checked(
            "expired_messages_are_dead_lettered_unhandled",
            "a retried message's deadline",
            "retry_delays: None",
        );
    }
    let dead = dead_letters_within(probe, &source(), expected.len()).await;
    let runs = processor.runs.load(Ordering::SeqCst);
    running.shutdown().await.expect("shutdown");
    assert_eq!(dead.len(), expected.len(), "{dead:?}");
    assert!(dead.iter().all(|d| d.reason == "expired"), "{dead:?}");
    // Message 2 ran once, message 4 once before its deadline; 1 and 3 never.
    assert_eq!(runs, 1 + u32::from(retries), "runs");
    let mut hooked: Vec<_> = processor.hooks();
    hooked.sort_by_key(|h| h.n);
    assert_eq!(
        hooked.iter().map(|h| (h.n, h.reason)).collect::<Vec<_>>(),
        expected
            .iter()
            .map(|&n| (n, DeadLetterReason::Expired))
            .collect::<Vec<_>>()
    );
    assert!(
        hooked[0]
            .errors
            .last()
            .is_some_and(|e| e.contains("expired")),
        "{hooked:?}"
    );
}

/// With [`OnExpiry::Drop`], an expired message is acknowledged unhandled: no run, no
/// dead letter, nothing left.
pub async fn expired_messages_can_be_dropped(transport: Arc<dyn Transport>, probe: &dyn Probe) {
    let processor = Arc::new(WithHook {
        on_expiry: OnExpiry::Drop,
        ..WithHook::default()
    });
    let running = start_command::<Hooked, _>(transport, Arc::clone(&processor)).await;
    let bus = running.bus();
    let past = SystemTime::now() - Duration::from_millis(1);
    bus.send_with(&hooked(1, "ok", "ok"), &SendOptions::new().expires_at(past))
        .await
        .expect("sent");
    // A message sent after it runs: once it has, the expired one was settled before.
    bus.send(&hooked(2, "ok", "ok")).await.expect("sent");
    let ran = wait_until(Duration::from_secs(10), || {
        processor.runs.load(Ordering::SeqCst) >= 1
    })
    .await;
    let settled = {
        let end = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let counts = probe.counts(&source()).await;
            if counts == [0; 4] || tokio::time::Instant::now() >= end {
                break counts;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    running.shutdown().await.expect("shutdown");
    assert!(ran, "the live message ran");
    assert_eq!(processor.runs.load(Ordering::SeqCst), 1, "only it ran");
    assert_eq!(settled, [0; 4], "ready, in flight, delayed, dead");
    assert!(
        processor.hooks().is_empty(),
        "a dropped message reaches no hook"
    );
}
