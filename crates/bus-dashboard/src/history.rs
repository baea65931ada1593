//! The plots' data: the server samples every queue at a fixed interval and keeps the last
//! hour (by default) in memory, so a page opened now shows the past hour at once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;

use crate::snapshot::{QueueSnapshot, Reader};

/// A live snapshot closer than this to the last sample (ms) adds no point of its own:
/// a rate over a shorter time would be mostly noise.
const LIVE_GAP_MS: u64 = 500;

/// One sample of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Point {
    /// Redis time, ms since the Unix epoch.
    pub(crate) t: u64,
    pub(crate) ready: u64,
    pub(crate) in_flight: u64,
    pub(crate) expired: u64,
    pub(crate) delayed: u64,
    pub(crate) dead: u64,
    /// Messages finished per second since the previous sample.
    pub(crate) rate: f64,
    /// [`QueueSnapshot::finished_estimate`], to derive the next rate from.
    #[serde(skip)]
    finished: i64,
}

/// The samples of every queue, newest last, bounded in length.
#[derive(Debug, Clone)]
pub(crate) struct History {
    inner: Arc<Mutex<HashMap<String, VecDeque<Point>>>>,
    /// Redis time of the first sample this server took (what "since sampling began"
    /// counts from), `None` before it.
    since: Arc<Mutex<Option<u64>>>,
    capacity: usize,
}

impl History {
    pub(crate) fn new(interval: Duration, span: Duration) -> Self {
        let capacity = (span.as_millis() / interval.as_millis().max(1)).max(2) as usize;
        History {
            inner: Arc::default(),
            since: Arc::default(),
            capacity,
        }
    }

    /// Adds one round of snapshots; queues absent from it (removed) are forgotten.
    pub(crate) fn record(&self, snapshots: &[QueueSnapshot]) {
        if let Some(first) = snapshots.first() {
            let mut since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
            since.get_or_insert(first.at_ms);
        }
        let mut all = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|name, _| snapshots.iter().any(|s| &s.name == name));
        for snapshot in snapshots {
            let points = all.entry(snapshot.name.clone()).or_default();
            let point = point_after(points.back(), snapshot);
            if points.len() == self.capacity {
                points.pop_front();
            }
            points.push_back(point);
        }
    }

    /// The samples of one queue, oldest first.
    pub(crate) fn points(&self, name: &str) -> Vec<Point> {
        let all = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(name)
            .map(|points| points.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The samples of one queue for a plot: at most `max` (at least 2) points, oldest
    /// first. Longer histories are merged into buckets that keep the last counts of each
    /// bucket and its time-weighted mean rate, so the rate's integral (messages
    /// processed) is kept.
    pub(crate) fn plot(&self, name: &str, max: usize) -> Vec<Point> {
        downsample(&self.points(name), max.max(2))
    }

    /// Redis time of the first sample, `None` before any.
    pub(crate) fn since_ms(&self) -> Option<u64> {
        *self.since.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`History::plot`] ending with a point read from the live snapshot (when it is
    /// newer than the last sample), so a plot has a line from the first refresh on
    /// rather than after the second sample (10 s by default), and its right end is now.
    pub(crate) fn plot_live(&self, snapshot: &QueueSnapshot, max: usize) -> Vec<Point> {
        let mut points = self.plot(&snapshot.name, max.max(3) - 1);
        match points.last() {
            Some(last) if snapshot.at_ms < last.t + LIVE_GAP_MS => {}
            last => {
                let last = last.copied();
                points.push(point_after(last.as_ref(), snapshot));
            }
        }
        points
    }

    /// The rate shown beside a live snapshot: from the last sample to it (or the last
    /// sampled rate when the two are too close together to divide).
    pub(crate) fn rate_now(&self, snapshot: &QueueSnapshot) -> f64 {
        let all = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(points) = all.get(&snapshot.name) else {
            return 0.0;
        };
        match points.back() {
            Some(last) if snapshot.at_ms >= last.t + LIVE_GAP_MS => {
                point_after(Some(last), snapshot).rate
            }
            Some(last) => last.rate,
            None => 0.0,
        }
    }

    /// Samples every queue every `interval`, forever (the caller aborts the task).
    pub(crate) async fn run(self, reader: Reader, interval: Duration) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match reader.snapshot_all().await {
                Ok(snapshots) => self.record(&snapshots),
                // A gap in the plot, not a dead sampler: Redis may come back.
                Err(error) => tracing::warn!(%error, "dashboard: sampling the queues failed"),
            }
        }
    }
}

fn downsample(points: &[Point], max: usize) -> Vec<Point> {
    if points.len() <= max || max < 2 {
        return points.to_vec();
    }
    // The first point stays as it is: a plot starts there (its rate covers time before).
    let (first, rest) = (points[0], &points[1..]);
    let per_bucket = rest.len().div_ceil(max - 1);
    let mut out = Vec::with_capacity(max);
    out.push(first);
    let mut before = first.t;
    for bucket in rest.chunks(per_bucket) {
        let Some(&last) = bucket.last() else { continue };
        let mut start = before;
        let mut weighted = 0.0;
        for point in bucket {
            weighted += point.rate * point.t.saturating_sub(start) as f64;
            start = point.t;
        }
        let span = last.t.saturating_sub(before);
        out.push(Point {
            rate: if span > 0 {
                weighted / span as f64
            } else {
                last.rate
            },
            ..last
        });
        before = last.t;
    }
    out
}

fn point_after(previous: Option<&Point>, snapshot: &QueueSnapshot) -> Point {
    let finished = snapshot.finished_estimate();
    let rate = match previous {
        Some(p) if snapshot.at_ms > p.t => {
            let done = (finished - p.finished).max(0) as f64;
            done * 1000.0 / (snapshot.at_ms - p.t) as f64
        }
        _ => 0.0,
    };
    Point {
        t: snapshot.at_ms,
        ready: snapshot.ready,
        in_flight: snapshot.in_flight,
        expired: snapshot.expired_locks,
        delayed: snapshot.delayed,
        dead: snapshot.dead,
        rate,
        finished,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(name: &str, at_ms: u64, taken: u64, stored: u64) -> QueueSnapshot {
        QueueSnapshot {
            name: name.to_owned(),
            kind: "bus".to_owned(),
            system: "bus".to_owned(),
            destination: name.to_owned(),
            subscription: None,
            ready: 1,
            keyed: 0,
            in_flight: 0,
            expired_locks: 0,
            delayed: 0,
            dead: 0,
            oldest_ready_age_ms: None,
            taken_total: taken,
            stored,
            at_ms,
            paused: false,
            breaker_until_ms: None,
        }
    }

    #[test]
    fn the_rate_is_messages_finished_per_second_between_samples() {
        let history = History::new(Duration::from_secs(1), Duration::from_secs(3));
        history.record(&[snapshot("q", 10_000, 0, 0)]);
        // 50 taken, 10 still stored: 40 finished in 2 s.
        history.record(&[snapshot("q", 12_000, 50, 10)]);
        let points = history.points("q");
        assert_eq!(points.len(), 2);
        assert_eq!(points[0].rate, 0.0);
        assert_eq!(points[1].rate, 20.0);
        // 10 more finished in the 5 s after the last sample.
        assert_eq!(history.rate_now(&snapshot("q", 17_000, 50, 0)), 2.0);
    }

    #[test]
    fn plots_are_downsampled_keeping_the_processed_total() {
        let history = History::new(Duration::from_secs(1), Duration::from_secs(1000));
        let mut taken = 0;
        for t in 0..500u64 {
            taken += t % 7; // an uneven load
            history.record(&[snapshot("q", 10_000 + t * 1000 + t % 3 * 100, taken, 0)]);
        }
        let all = history.points("q");
        let plot = history.plot("q", 60);
        assert!(plot.len() <= 60, "{}", plot.len());
        assert_eq!(plot.last().unwrap().t, all.last().unwrap().t);
        let integral = |points: &[Point]| {
            points
                .windows(2)
                .map(|w| w[1].rate * (w[1].t - w[0].t) as f64 / 1000.0)
                .sum::<f64>()
        };
        // Both add up to what was finished after the first sample.
        let finished = (taken - all[0].finished as u64) as f64;
        assert!(
            (integral(&all) - finished).abs() < 1e-6,
            "{}",
            integral(&all)
        );
        assert!(
            (integral(&plot) - finished).abs() < 1e-6,
            "{}",
            integral(&plot)
        );
        assert_eq!(history.plot("q", 1000).len(), 500);
    }

    #[test]
    fn history_is_bounded_and_forgets_removed_queues() {
        let history = History::new(Duration::from_secs(1), Duration::from_secs(3));
        for t in 0..10 {
            history.record(&[snapshot("q", t * 1000, 0, 0), snapshot("r", t * 1000, 0, 0)]);
        }
        assert_eq!(history.points("q").len(), 3);
        assert_eq!(history.points("q")[2].t, 9000);
        history.record(&[snapshot("q", 10_000, 0, 0)]);
        assert!(history.points("r").is_empty());
    }
}
