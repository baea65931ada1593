//! The heartbeat runner: the task that sends a host's [`HostInfo`] to the transport's
//! [`HostReporter`] every interval. Its in-flight figure is read off the workers' handler
//! slots when it reports, so a message costs the heartbeat nothing. The record and the
//! seam are `crate::heartbeat`'s, where a transport implements them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::breaker::Breaker;
use super::worker::HandlerSlots;
use crate::heartbeat::{hostname, HostInfo, HostReporter};

/// The heartbeat of one running host: its fixed description and where its in-flight
/// figure is read.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    reporter: Arc<dyn HostReporter>,
    info: HostInfo,
    /// The handler slots of the host's workers: their slots in use are its in-flight.
    slots: Vec<HandlerSlots>,
    interval: Duration,
    /// The circuit breakers of the host's workers, by queue.
    breakers: Vec<(String, Arc<Breaker>)>,
}

impl Heartbeat {
    pub(crate) fn new(
        reporter: Arc<dyn HostReporter>,
        queues: Vec<String>,
        concurrency: usize,
        interval: Duration,
    ) -> Self {
        let hostname = hostname();
        let pid = std::process::id();
        let started_at_ms = crate::envelope::now_ms();
        Heartbeat {
            reporter,
            info: HostInfo {
                id: format!("{hostname}:{pid}:{started_at_ms}"),
                hostname,
                pid,
                version: env!("CARGO_PKG_VERSION").to_owned(),
                queues,
                concurrency,
                in_flight: 0,
                started_at_ms,
                interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
                breakers: BTreeMap::new(),
            },
            slots: Vec::new(),
            interval,
            breakers: Vec::new(),
        }
    }

    /// Reports the state of these circuit breakers (queue, breaker) too.
    pub(crate) fn breakers(&mut self, breakers: Vec<(String, Arc<Breaker>)>) {
        self.breakers = breakers;
    }

    /// Reports the handlers running in these workers' slots as in flight.
    pub(crate) fn handler_slots(&mut self, slots: Vec<HandlerSlots>) {
        self.slots = slots;
    }

    /// Reports now and every interval until `stop`, then leaves. A failed report is
    /// logged and retried at the next tick: heartbeats never stop the host.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticks.tick() => {}
            }
            self.info.in_flight = self.slots.iter().map(HandlerSlots::in_use).sum();
            for (queue, breaker) in &self.breakers {
                self.info.breakers.insert(queue.clone(), breaker.state());
            }
            if let Err(e) = self.reporter.report(&self.info).await {
                tracing::warn!(error = %e, "host heartbeat failed; retrying at the next one");
            }
        }
        // Bounded like the rest of shutdown's settling: the record expires on its own.
        match tokio::time::timeout(
            crate::host::SETTLE_BOUND,
            self.reporter.leave(&self.info.id),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not remove the host's heartbeat record")
            }
            Err(_) => tracing::warn!(
                "could not remove the host's heartbeat record in time; it expires on its own"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heartbeat::DEFAULT_HEARTBEAT_INTERVAL;
    use crate::BreakerState;

    /// docs/redis-layout.md, "Host heartbeats": the record's fields and JSON types.
    fn documented() -> BTreeMap<String, String> {
        let doc = include_str!("../../../../docs/redis-layout.md");
        let section = doc
            .split("### Host heartbeats")
            .nth(1)
            .and_then(|s| s.split("| Field | JSON type | Meaning |").nth(1))
            .expect("the record's table");
        section
            .lines()
            .skip(2)
            .take_while(|line| line.starts_with("| `"))
            .map(|row| {
                let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
                (cells[0].trim_matches('`').to_owned(), cells[1].to_owned())
            })
            .collect()
    }

    /// The JSON type of a value, in the table's words.
    fn type_of(value: &serde_json::Value) -> &'static str {
        use serde_json::Value;
        match value {
            Value::String(_) => "string",
            Value::Number(n) if n.as_u64().is_some() => "integer",
            Value::Array(items) if items.iter().all(Value::is_string) => "array of strings",
            Value::Object(fields) if fields.values().all(Value::is_string) => {
                "object, string to string"
            }
            _ => "something else",
        }
    }

    #[test]
    fn the_documented_record_is_what_a_host_writes() {
        let mut info = Heartbeat::new(
            Arc::new(Nowhere),
            vec!["orders".into(), "paid/billing".into()],
            8,
            DEFAULT_HEARTBEAT_INTERVAL,
        )
        .info;
        let bare = serde_json::to_value(&info).unwrap();
        assert!(bare.get("breakers").is_none(), "absent without breakers");
        info.breakers
            .insert("orders".into(), BreakerState::HalfOpen);
        let record = serde_json::to_value(&info).unwrap();
        assert_eq!(record["breakers"]["orders"], "half-open");
        let written: BTreeMap<String, String> = record
            .as_object()
            .unwrap()
            .iter()
            .map(|(name, value)| (name.clone(), type_of(value).to_owned()))
            .collect();
        let documented: BTreeMap<String, String> = documented()
            .into_iter()
            .map(|(name, kind)| {
                // "integer, 0 or more" and the like: the kind is what precedes the range.
                let kind = match kind.split(',').next() {
                    Some("integer") => "integer".to_owned(),
                    _ => kind,
                };
                (name, kind)
            })
            .collect();
        assert_eq!(written, documented);
    }

    #[derive(Debug)]
    struct Nowhere;

    #[async_trait::async_trait]
    impl HostReporter for Nowhere {
        async fn report(&self, _: &HostInfo) -> crate::Result<()> {
            Ok(())
        }
    }
}
