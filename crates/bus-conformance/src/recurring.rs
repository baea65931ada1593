//! Checks of recurring messages (cron): each tick stored once whatever order and however
//! many hosts present it, and the policy for missed ticks.

use bus_core::headers;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{wait_until, Probe};
use bus_core::transport::{Outgoing, Source, Tick};
use bus_core::{
    CommandProcessor, Context, Host, Message, MessageId, MessageKind, Missed, ProcessError,
    Recurring, RunningHost, Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Beat;
command!(Beat, "conformance-beat");

/// The tick of every message handled, in the order handled.
#[derive(Default)]
struct Ticks(Mutex<Vec<u64>>);

impl Ticks {
    fn all(&self) -> Vec<u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl CommandProcessor<Beat> for Arc<Ticks> {
    async fn process(&self, _: Beat, ctx: &Context) -> Result<(), ProcessError> {
        let tick = ctx
            .headers()
            .get(headers::TICK)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| ProcessError::dead_letter("a scheduled message without its tick"))?;
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tick);
        Ok(())
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn beat() -> Outgoing {
    let id = MessageId::generate();
    let mut envelope =
        bus_core::Envelope::new(Beat::TYPE, bus_core::Format::Json, b"null".to_vec());
    envelope.id = id.clone();
    Outgoing {
        id,
        payload: envelope.encode().expect("encodes").into(),
    }
}

/// The transport's rule, called directly: a tick is stored only when newer than the last
/// stored for its schedule (a catch-up only when there is a last one), and then becomes
/// the last; each schedule has its own; of concurrent presentations of one tick exactly
/// one stores it.
pub async fn a_tick_is_stored_once_and_only_when_newer(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let queue = Beat::NAME;
    let source = Source::queue(queue).expect("valid");
    let t = 1_767_225_600_000;
    let tick = |at_ms| Tick::new("every-second", at_ms);
    let send = |tick: Tick<'static>| {
        let transport = Arc::clone(&transport);
        async move {
            stored_ticks(&*transport)
                .send_tick(queue, tick, beat())
                .await
                .expect("tick")
        }
    };
    let last = || stored_ticks(&*transport).last_tick(queue, "every-second");
    assert_eq!(last().await.expect("read"), None);
    assert!(
        !send(tick(t).catching_up()).await,
        "no catch-up before a first tick"
    );
    assert_eq!(last().await.expect("read"), None);
    assert!(send(tick(t)).await, "a first tick is stored");
    assert!(!send(tick(t)).await, "the same tick again is not");
    assert!(!send(tick(t - 1000)).await, "an older tick is not");
    assert!(!send(tick(t).catching_up()).await, "nor a catch-up of it");
    assert!(
        send(tick(t + 3000).catching_up()).await,
        "a newer catch-up is"
    );
    assert!(
        !send(tick(t + 2000)).await,
        "a tick older than the catch-up is not"
    );
    assert!(
        send(Tick::new("other", t)).await,
        "another schedule has its own"
    );
    let racing: Vec<_> = (0..8).map(|_| send(tick(t + 4000))).collect();
    let stored = futures::future::join_all(racing).await;
    assert_eq!(stored.iter().filter(|s| **s).count(), 1, "{stored:?}");
    assert_eq!(last().await.expect("read"), Some(t + 4000));
    assert_eq!(probe.counts(&source).await, [4, 0, 0, 0]);
}

async fn start(
    transport: &Arc<dyn Transport>,
    schedule: Option<Recurring>,
    ticks: &Arc<Ticks>,
    clock_offset_ms: i64,
) -> RunningHost {
    let mut builder = Host::builder()
        .transport(Arc::clone(transport))
        .command::<Beat, _>(Arc::clone(ticks))
        .schedule_clock_offset(clock_offset_ms);
    if let Some(schedule) = schedule {
        builder = builder.schedule(schedule);
    }
    builder
        .build()
        .expect("host builds")
        .start()
        .await
        .expect("host starts")
}

/// Three hosts run one every-second schedule with clocks 400 ms behind, right, and 400 ms
/// ahead: every tick is handled once, none is left out between the first and the last.
pub async fn three_hosts_with_skewed_clocks_send_each_tick_once(transport: Arc<dyn Transport>) {
    let ticks = Arc::new(Ticks::default());
    let mut hosts = Vec::new();
    for offset in [-400, 0, 400] {
        let schedule = Recurring::new("* * * * * *", || Beat).name("skewed");
        hosts.push(start(&transport, Some(schedule), &ticks, offset).await);
    }
    assert!(
        wait_until(Duration::from_secs(10), || ticks.all().len() >= 4).await,
        "four ticks within ten seconds: {:?}",
        ticks.all()
    );
    for host in hosts {
        host.shutdown().await.expect("stops");
    }
    let mut seen = ticks.all();
    seen.sort_unstable();
    assert!(
        seen.iter().all(|t| t % 1000 == 0),
        "whole seconds: {seen:?}"
    );
    let steps: Vec<u64> = seen.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        steps.iter().all(|s| *s == 1000),
        "each second once, none twice or left out: {seen:?}"
    );
}

/// With [`Missed::CatchUpOnce`], a host starting after missed ticks sends the latest of
/// them at once, once; with [`Missed::Skip`] (the default) it sends none of them; a
/// schedule never run before catches nothing up.
pub async fn missed_ticks_are_skipped_or_caught_up_once(transport: Arc<dyn Transport>) {
    let every_minute = "0 * * * * *";
    // Not across a minute's turn, which would move the latest missed tick.
    let into_minute = now_ms() % 60_000;
    if into_minute > 52_000 {
        tokio::time::sleep(Duration::from_millis(60_000 - into_minute + 100)).await;
    }
    let started = now_ms();
    let latest_due = started - started % 60_000;
    let long_ago = latest_due - 5 * 60_000;
    for name in ["catching-up", "skipping"] {
        let stored = stored_ticks(&*transport)
            .send_tick(Beat::NAME, Tick::new(name, long_ago), beat())
            .await
            .expect("tick");
        assert!(stored);
    }
    let ticks = Arc::new(Ticks::default());
    let schedules = [
        Recurring::new(every_minute, || Beat)
            .name("catching-up")
            .missed(Missed::CatchUpOnce),
        Recurring::new(every_minute, || Beat).name("skipping"),
        Recurring::new(every_minute, || Beat)
            .name("brand-new")
            .missed(Missed::CatchUpOnce),
    ];
    let mut hosts = Vec::new();
    for schedule in schedules {
        hosts.push(start(&transport, Some(schedule), &ticks, 0).await);
    }
    // Two hosts of the catching-up schedule: still one catch-up.
    let again = Recurring::new(every_minute, || Beat)
        .name("catching-up")
        .missed(Missed::CatchUpOnce);
    hosts.push(start(&transport, Some(again), &ticks, 0).await);
    // (The seeded ticks' messages have no tick header: they are dead-lettered.)
    assert!(
        wait_until(Duration::from_secs(5), || !ticks.all().is_empty()).await,
        "one catch-up: {:?}",
        ticks.all()
    );
    // Long enough for a wrong second catch-up or a skipped tick to arrive.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for host in hosts {
        host.shutdown().await.expect("stops");
    }
    let past: Vec<u64> = ticks.all().into_iter().filter(|t| *t <= started).collect();
    let caught_up = stored_ticks(&*transport)
        .last_tick(Beat::NAME, "catching-up")
        .await
        .expect("read");
    assert!(caught_up >= Some(latest_due), "{caught_up:?}");
    assert_eq!(past, vec![latest_due], "ticks at or before the start");
}

/// The recurring ticks of a transport under test, which must have them.
fn stored_ticks(transport: &dyn Transport) -> &dyn bus_core::transport::Ticks {
    transport
        .extras()
        .ticks
        .expect("a transport under the recurring suite stores ticks")
}
