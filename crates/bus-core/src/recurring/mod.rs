//! Recurring messages (cron): a command sent on every tick of a cron expression in a
//! time zone, by every host that declares the schedule, and stored once per tick however
//! many hosts present it ([`Transport::send_tick`](crate::Transport::send_tick) is one
//! atomic check-record-store). What a tick missed while every host was down becomes is
//! the schedule's [`Missed`] policy. The hosts' loop lives in [`ticker`].

mod ticker;

use crate::headers;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, TimeZone, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::{Bus, Command, Error, Result, SendOptions};

pub(crate) use ticker::run;

/// What becomes of ticks that no host presented in time (every host was down, or the
/// transport failed until the next tick was due).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Missed {
    /// They are not sent: the schedule resumes at its next tick (the default).
    #[default]
    Skip,
    /// The latest of them is sent once, when a host comes back, however many were
    /// missed; never for a schedule that no host ever ran before.
    CatchUpOnce,
}

impl Missed {
    /// As shown: `skip`, `catch_up_once`.
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::CatchUpOnce => "catch_up_once",
        }
    }
}

/// One tick of a recurring schedule, as a host presents it to the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tick<'a> {
    /// The schedule's name (unique per queue).
    pub schedule: &'a str,
    /// The tick's time, ms since the Unix epoch.
    pub at_ms: u64,
    /// A catch-up of missed ticks ([`Missed::CatchUpOnce`]): stored only if the schedule
    /// has a last tick, older than this one.
    pub catch_up: bool,
}

impl<'a> Tick<'a> {
    /// Tick `at_ms` of `schedule`, on time.
    pub fn new(schedule: &'a str, at_ms: u64) -> Self {
        Tick {
            schedule,
            at_ms,
            catch_up: false,
        }
    }
    /// The same tick as a catch-up.
    pub fn catching_up(mut self) -> Self {
        self.catch_up = true;
        self
    }
}

/// A schedule as operators see it (`bus schedules`, the dashboard): recorded by each
/// host that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleRecord {
    /// Its name, unique per queue.
    pub name: String,
    /// The cron expression (seconds first).
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub zone: String,
    /// The queue its messages go to.
    pub queue: String,
    /// Its policy for missed ticks.
    pub missed: Missed,
}

impl ScheduleRecord {
    /// The first tick strictly after `after`; `None` when the expression never fires
    /// again, or does not parse (a record written by another version).
    pub fn next_after(&self, after: SystemTime) -> Option<SystemTime> {
        let zone = chrono_tz::Tz::from_str(&self.zone).ok()?;
        let when = When::parse(&self.cron, zone).ok()?;
        when.after(to_ms(after)).map(from_ms)
    }
}

/// A cron expression in a time zone.
#[derive(Debug, Clone)]
struct When {
    cron: cron::Schedule,
    zone: chrono_tz::Tz,
}

impl When {
    fn parse(expression: &str, zone: chrono_tz::Tz) -> Result<Self> {
        let cron = cron::Schedule::from_str(expression).map_err(|e| {
            Error::Config(format!(
                "cron expression {expression:?}: {e} (six or seven fields, seconds first: \
                 \"0 */5 * * * *\" is every five minutes)"
            ))
        })?;
        Ok(When { cron, zone })
    }

    /// The first tick strictly after `ms`.
    fn after(&self, ms: u64) -> Option<u64> {
        let at = self.at(ms)?;
        self.cron
            .after(&at)
            .next()
            .map(|t| t.timestamp_millis() as u64)
    }

    /// The latest tick at or before `ms`.
    fn at_or_before(&self, ms: u64) -> Option<u64> {
        // `after(..).next_back()` is the latest tick strictly before its start.
        let at = self.at(ms.saturating_add(1))?;
        self.cron
            .after(&at)
            .next_back()
            .map(|t| t.timestamp_millis() as u64)
    }

    fn at(&self, ms: u64) -> Option<DateTime<chrono_tz::Tz>> {
        let utc = Utc.timestamp_millis_opt(i64::try_from(ms).ok()?).single()?;
        Some(utc.with_timezone(&self.zone))
    }
}

/// Sends one tick's message through a bus (the command type erased).
trait Produce: Send + Sync {
    fn queue(&self, bus: &Bus) -> Result<&'static str>;
    fn send<'a>(&'a self, bus: &'a Bus, tick: Tick<'a>) -> BoxFuture<'a, Result<bool>>;
}

struct Maker<C, F> {
    make: F,
    _command: PhantomData<fn() -> C>,
}

impl<C: Command, F: Fn() -> C + Send + Sync + 'static> Produce for Maker<C, F> {
    fn queue(&self, bus: &Bus) -> Result<&'static str> {
        bus.destination_name::<C>()
    }
    fn send<'a>(&'a self, bus: &'a Bus, tick: Tick<'a>) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let command = (self.make)();
            let options = SendOptions::new()
                .header(headers::SCHEDULE, tick.schedule)
                .header(headers::TICK, tick.at_ms.to_string());
            let transport = bus.transport();
            let produced = bus
                .produce(
                    "send",
                    std::slice::from_ref(&command),
                    Some(&options),
                    |queue, mut batch| async move {
                        let Some(message) = batch.pop() else {
                            return Ok(false);
                        };
                        let ticks = transport.extras().ticks.ok_or_else(|| {
                            crate::operator::unsupported(
                                "this transport's",
                                crate::Capability::RecurringTicks,
                            )
                        })?;
                        ticks.send_tick(queue, tick, message).await
                    },
                )
                .await?;
            Ok(produced.out.unwrap_or(false))
        })
    }
}

/// A recurring message: a command made by a function on every tick of a cron
/// expression (seconds first) in a time zone (UTC by default), registered with
/// [`HostBuilder::schedule`](crate::HostBuilder::schedule) or
/// [`HostBuilder::recurring`](crate::HostBuilder::recurring).
///
/// ```no_run
/// # use bus_core::{Host, MemoryTransport, Missed, Recurring};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Report;
/// # impl bus_core::Message for Report { const NAME: &'static str = "report";
/// #   const KIND: bus_core::MessageKind = bus_core::MessageKind::Command; }
/// # impl bus_core::Command for Report {}
/// # fn demo() -> bus_core::Result<()> {
/// let host = Host::builder()
///     .transport(MemoryTransport::new())
///     .schedule(
///         Recurring::new("0 30 6 * * Mon-Fri", || Report)
///             .name("morning-report")
///             .time_zone("Europe/Oslo")
///             .missed(Missed::CatchUpOnce),
///     )
///     .build()?;
/// # Ok(()) }
/// ```
#[must_use]
pub struct Recurring {
    name: String,
    expression: String,
    zone: chrono_tz::Tz,
    missed: Missed,
    when: Result<cron::Schedule>,
    produce: Arc<dyn Produce>,
}

impl fmt::Debug for Recurring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recurring")
            .field("name", &self.name)
            .field("cron", &self.expression)
            .field("zone", &self.zone.name())
            .field("missed", &self.missed)
            .finish_non_exhaustive()
    }
}

impl Recurring {
    /// `make()`'s command on every tick of `cron` (six fields, seconds first, or seven
    /// with a year; `"0 */5 * * * *"` is every five minutes), named after the command's
    /// queue. An expression that does not parse fails the host's build.
    pub fn new<C: Command>(cron: &str, make: impl Fn() -> C + Send + Sync + 'static) -> Self {
        let when = When::parse(cron, chrono_tz::UTC).map(|w| w.cron);
        Recurring {
            name: C::NAME.to_owned(),
            expression: cron.to_owned(),
            zone: chrono_tz::UTC,
            missed: Missed::default(),
            when,
            produce: Arc::new(Maker {
                make,
                _command: PhantomData,
            }),
        }
    }

    /// Its name, unique among the schedules of one queue (the queue's name by default).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The IANA time zone the expression is read in (`"Europe/Oslo"`; `"UTC"` by
    /// default): daylight saving moves the ticks with the wall clock. An unknown zone
    /// fails the host's build.
    pub fn time_zone(mut self, zone: &str) -> Self {
        match chrono_tz::Tz::from_str(zone) {
            Ok(tz) => self.zone = tz,
            Err(_) => {
                self.when = Err(Error::Config(format!(
                    "schedule {}: unknown time zone {zone:?} (an IANA name, such as \"Europe/Oslo\")",
                    self.name
                )));
            }
        }
        self
    }

    /// What becomes of ticks missed while every host was down ([`Missed::Skip`] by
    /// default).
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// The schedule, checked: its expression and zone, for the host's build.
    pub(crate) fn checked(self) -> Result<Checked> {
        let cron = self.when.map_err(|e| match e {
            Error::Config(text) => Error::Config(format!("schedule {}: {text}", self.name)),
            other => other,
        })?;
        crate::message::validate_name("schedule", &self.name)?;
        Ok(Checked {
            name: self.name,
            expression: self.expression,
            missed: self.missed,
            when: When {
                cron,
                zone: self.zone,
            },
            produce: self.produce,
        })
    }
}

/// A schedule that parsed, as the host keeps it.
pub(crate) struct Checked {
    name: String,
    expression: String,
    missed: Missed,
    when: When,
    produce: Arc<dyn Produce>,
}

impl fmt::Debug for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checked")
            .field("name", &self.name)
            .field("cron", &self.expression)
            .finish_non_exhaustive()
    }
}

impl Checked {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Its record for operators, on `bus`'s queue names.
    fn record(&self, bus: &Bus) -> Result<ScheduleRecord> {
        Ok(ScheduleRecord {
            name: self.name.clone(),
            cron: self.expression.clone(),
            zone: self.when.zone.name().to_owned(),
            queue: self.produce.queue(bus)?.to_owned(),
            missed: self.missed,
        })
    }
}

/// A host's clock for its schedules: the system's, shifted by a fixed offset (zero but
/// in tests that simulate skewed clocks).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Clock {
    offset_ms: i64,
}

impl Clock {
    pub(crate) fn shifted(offset_ms: i64) -> Self {
        Clock { offset_ms }
    }
    fn now_ms(self) -> u64 {
        to_ms(SystemTime::now()).saturating_add_signed(self.offset_ms)
    }
}

fn to_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_follow_the_expression_in_its_zone() {
        let every_five = When::parse("0 */5 * * * *", chrono_tz::UTC).unwrap();
        // 2026-01-01T00:02:00Z
        let t = 1_767_225_720_000;
        assert_eq!(every_five.after(t), Some(t + 3 * 60_000));
        assert_eq!(every_five.at_or_before(t), Some(t - 2 * 60_000));
        assert_eq!(
            every_five.at_or_before(t + 3 * 60_000),
            Some(t + 3 * 60_000)
        );
        // 06:30 in Oslo is 05:30 UTC in winter.
        let oslo = When::parse("0 30 6 * * *", chrono_tz::Europe::Oslo).unwrap();
        assert_eq!(oslo.after(t), Some(t - 2 * 60_000 + (5 * 60 + 30) * 60_000));
    }

    #[test]
    fn bad_expressions_and_zones_fail_the_build_with_their_name() {
        #[derive(Serialize, Deserialize)]
        struct Job;
        impl crate::Message for Job {
            const NAME: &'static str = "job";
            const KIND: crate::MessageKind = crate::MessageKind::Command;
        }
        impl Command for Job {}
        let bad = Recurring::new("every minute", || Job)
            .checked()
            .unwrap_err();
        assert!(bad.to_string().contains("\"every minute\""), "{bad}");
        let zone = Recurring::new("* * * * * *", || Job)
            .time_zone("Mars/Olympus")
            .checked()
            .unwrap_err();
        assert!(zone.to_string().contains("Mars/Olympus"), "{zone}");
        let ok = Recurring::new("*/2 * * * * *", || Job).checked().unwrap();
        assert_eq!(ok.name(), "job");
    }
}
