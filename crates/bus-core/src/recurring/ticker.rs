//! One host's loop for one schedule: wait for each tick by this host's clock and present
//! it to the transport, which stores it only if no host did before. A presentation that
//! fails is retried until the following tick is due; then the tick is missed. Under
//! [`Missed::CatchUpOnce`] the host presents the latest tick it missed (at start-up: the
//! latest before it started) as a catch-up, stored only when no host stored it or a later
//! one.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Checked, Clock, Missed, Tick};
use crate::{Bus, ErrorChain};

/// How long a failed presentation waits before the next try.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// Runs `schedule` on `bus` until `stop` fires.
pub(crate) async fn run(schedule: Checked, bus: Bus, clock: Clock, stop: CancellationToken) {
    let name = schedule.name.as_str();
    match schedule.record(&bus) {
        Ok(record) => {
            let recorded = match bus.transport().extras().ticks {
                Some(ticks) => ticks.record_schedule(&record).await,
                None => Ok(()),
            };
            if let Err(e) = recorded {
                tracing::warn!(schedule = name, error = %ErrorChain(&e), "schedule not recorded for operators");
            }
        }
        Err(e) => {
            tracing::error!(schedule = name, error = %ErrorChain(&e), "schedule stopped: no queue");
            return;
        }
    }
    // The latest tick this host presented and the transport answered.
    let mut answered: Option<u64> = None;
    loop {
        let now = clock.now_ms();
        if schedule.missed == Missed::CatchUpOnce {
            if let Some(due) = schedule.when.at_or_before(now) {
                if !answered.is_some_and(|a| due <= a)
                    && present(&schedule, &bus, Tick::new(name, due).catching_up()).await
                {
                    answered = Some(due);
                }
            }
        }
        let Some(next) = schedule.when.after(now) else {
            tracing::info!(schedule = name, "the cron expression fires no more");
            return;
        };
        if !sleep_until(clock, next, &stop).await {
            return;
        }
        // On time; retried until the following tick is due, then missed.
        let following = schedule.when.after(next).unwrap_or(u64::MAX);
        loop {
            if present(&schedule, &bus, Tick::new(name, next)).await {
                answered = Some(next);
                break;
            }
            if clock.now_ms() >= following {
                tracing::warn!(
                    schedule = name,
                    tick = next,
                    "tick missed: the transport failed until the next one was due"
                );
                break;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(RETRY_PAUSE) => {}
            }
        }
    }
}

/// Presents `tick`; `true` when the transport answered (stored or not).
async fn present(schedule: &Checked, bus: &Bus, tick: Tick<'_>) -> bool {
    match schedule.produce.send(bus, tick).await {
        Ok(stored) => {
            tracing::debug!(
                schedule = tick.schedule,
                tick = tick.at_ms,
                catch_up = tick.catch_up,
                stored,
                "tick presented"
            );
            true
        }
        Err(e) => {
            tracing::warn!(schedule = tick.schedule, tick = tick.at_ms, error = %ErrorChain(&e), "tick not presented");
            false
        }
    }
}

/// Sleeps until `clock` reads `ms`; `false` when `stop` fired first.
async fn sleep_until(clock: Clock, ms: u64, stop: &CancellationToken) -> bool {
    loop {
        let now = clock.now_ms();
        if now >= ms {
            return true;
        }
        tokio::select! {
            () = stop.cancelled() => return false,
            () = tokio::time::sleep(Duration::from_millis(ms - now)) => {}
        }
    }
}
