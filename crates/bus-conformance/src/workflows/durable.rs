//! The durable step scenarios: sleeps, waits, signals.

use std::sync::Arc;

use bus_core::{RunningHost, Transport};

use super::{start, until, Durable, Log};
use bus_workflows::{ParkedKind, WorkflowStore, Workflows};

fn durable(name: &str, ms: u64, signal: Option<&str>) -> Durable {
    Durable {
        name: name.into(),
        ms,
        signal: signal.map(str::to_owned),
    }
}

/// Waits until the run of `name` is parked (its step before the park ran, and the store
/// lists a parked run of its kind).
async fn until_parked(workflows: &Workflows, log: &Log, name: &str, waiting: bool) {
    until("the run to run its first step", || {
        log.count(&format!("{name} before")) == 1
    })
    .await;
    let deadline = std::time::Instant::now() + super::WAIT;
    loop {
        let parked = workflows
            .store()
            .parked(100)
            .await
            .expect("lists parked runs");
        if parked
            .iter()
            .any(|p| matches!(p.kind, ParkedKind::Wait { .. }) == waiting)
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} was never parked"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// A sleep: the step before it runs once, the one after it once, and the handler runs
/// twice (the first run and the resume).
pub async fn sleep_resumes_once(host: &RunningHost, log: &Log) {
    host.bus()
        .send(&Durable {
            name: "nap".into(),
            ms: 300,
            signal: None,
        })
        .await
        .expect("sends");
    until("the sleep's end", || log.count("nap after: slept") == 1).await;
    assert_eq!(log.count("nap before"), 1);
    assert_eq!(log.count("nap run"), 2);
}

/// A signal sent before the wait is not lost: the wait finds it and resumes at once.
pub async fn signal_before_the_wait(host: &RunningHost, workflows: &Workflows, log: &Log) {
    let bus = host.bus();
    let woken = workflows
        .signal(&bus, "sig-early", &"early")
        .await
        .expect("signals");
    assert_eq!(woken, 0, "nobody waits yet");
    bus.send(&durable("early", 30_000, Some("sig-early")))
        .await
        .expect("sends");
    until("the wait's end", || log.count("early after: early") == 1).await;
    assert_eq!(log.count("early before"), 1);
    assert_eq!(log.count("early run"), 2);
}

/// A signal sent during the wait resumes it once, with its payload.
pub async fn signal_after_the_wait(host: &RunningHost, workflows: &Workflows, log: &Log) {
    let bus = host.bus();
    bus.send(&durable("late", 30_000, Some("sig-late")))
        .await
        .expect("sends");
    until_parked(workflows, log, "late", true).await;
    let woken = workflows
        .signal(&bus, "sig-late", &"paid")
        .await
        .expect("signals");
    assert_eq!(woken, 1);
    until("the wait's end", || log.count("late after: paid") == 1).await;
    assert_eq!(log.count("late before"), 1);
    assert_eq!(log.count("late run"), 2);
    assert_eq!(
        workflows
            .signal(&bus, "sig-late", &"again")
            .await
            .expect("signals"),
        0
    );
}

/// A wait whose timeout passes resumes once, timed out; a later signal wakes nothing.
pub async fn wait_times_out(host: &RunningHost, workflows: &Workflows, log: &Log) {
    let bus = host.bus();
    bus.send(&durable("slow", 300, Some("sig-never")))
        .await
        .expect("sends");
    until("the timeout", || log.count("slow after: timed out") == 1).await;
    assert_eq!(
        workflows
            .signal(&bus, "sig-never", &"late")
            .await
            .expect("signals"),
        0
    );
    assert_eq!(log.count("slow before"), 1);
    assert_eq!(log.count("slow run"), 2);
}

/// A sleep across a host restart: parked by one host, resumed once by the next, the step
/// before the sleep not run again.
pub async fn sleep_across_a_restart(transport: Arc<dyn Transport>, store: Arc<dyn WorkflowStore>) {
    let workflows = Workflows::shared(store);
    let log = Log::default();
    let first = start(Arc::clone(&transport), &workflows, &log).await;
    first
        .bus()
        .send(&durable("restart", 1_500, None))
        .await
        .expect("sends");
    until_parked(&workflows, &log, "restart", false).await;
    first.shutdown().await.expect("the first host stops");
    assert_eq!(
        log.count("restart after: slept"),
        0,
        "it resumed before the restart"
    );
    let second = start(transport, &workflows, &log).await;
    until("the sleep's end", || log.count("restart after: slept") == 1).await;
    assert_eq!(log.count("restart before"), 1);
    assert_eq!(log.count("restart run"), 2);
    second.shutdown().await.expect("the second host stops");
}
