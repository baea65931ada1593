//! Per-type timing as the pages and `/metrics` show it: the hosts' minutes
//! ([`bus_redis::admin::MinuteTiming`]) summed per type over a window, and one type's
//! history in at most a plot's worth of points.

use std::collections::BTreeMap;

use bus_core::timing::{TypeTiming, BUCKET_BOUNDS_US};
use bus_redis::admin::MinuteTiming;
use serde::Serialize;

/// One type's runs over a window, with its durations in ms.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TypeRow {
    pub(crate) message_type: String,
    pub(crate) handled: u64,
    pub(crate) failed: u64,
    pub(crate) mean_ms: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p95_ms: f64,
    pub(crate) p99_ms: f64,
    /// Time all runs took, ms: where the handlers' time goes.
    pub(crate) total_ms: f64,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl TypeRow {
    pub(crate) fn new(message_type: &str, t: &TypeTiming) -> Self {
        TypeRow {
            message_type: message_type.to_owned(),
            handled: t.handled,
            failed: t.failed,
            mean_ms: ms(t.mean_us()),
            p50_ms: ms(t.quantile_us(0.5)),
            p95_ms: ms(t.quantile_us(0.95)),
            p99_ms: ms(t.quantile_us(0.99)),
            total_ms: ms(t.total_us),
        }
    }
}

/// Every type's runs over `minutes`, summed.
pub(crate) fn by_type(minutes: &[MinuteTiming]) -> BTreeMap<String, TypeTiming> {
    let mut sum = BTreeMap::<String, TypeTiming>::new();
    for minute in minutes {
        for (name, timing) in &minute.types {
            sum.entry(name.clone()).or_default().add(timing);
        }
    }
    sum
}

/// The rows of every type, busiest (most runs) first.
pub(crate) fn rows(minutes: &[MinuteTiming]) -> Vec<TypeRow> {
    let mut rows: Vec<TypeRow> = by_type(minutes)
        .iter()
        .map(|(name, timing)| TypeRow::new(name, timing))
        .collect();
    rows.sort_by(|a, b| {
        (b.handled + b.failed)
            .cmp(&(a.handled + a.failed))
            .then_with(|| a.message_type.cmp(&b.message_type))
    });
    rows
}

/// One point of a type's history: its runs in `span_minutes` minutes from `t` (ms).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HistoryPoint {
    pub(crate) t: u64,
    pub(crate) handled: u64,
    pub(crate) failed: u64,
    pub(crate) mean_ms: f64,
    pub(crate) p95_ms: f64,
}

/// The history of `message_type` over the minutes `from..=to`, in at most `points`
/// points of equal span (minutes without runs count as zero).
pub(crate) fn history(
    minutes: &[MinuteTiming],
    message_type: &str,
    from: u64,
    to: u64,
    points: u64,
) -> (u64, Vec<HistoryPoint>) {
    let count = to.saturating_sub(from) + 1;
    let span = count.div_ceil(points.max(1)).max(1);
    let mut merged: Vec<TypeTiming> = vec![TypeTiming::default(); count.div_ceil(span) as usize];
    for minute in minutes {
        if let (Some(timing), true) = (
            minute.types.get(message_type),
            (from..=to).contains(&minute.minute),
        ) {
            merged[((minute.minute - from) / span) as usize].add(timing);
        }
    }
    let points = merged
        .iter()
        .enumerate()
        .map(|(i, t)| HistoryPoint {
            t: (from + i as u64 * span) * 60_000,
            handled: t.handled,
            failed: t.failed,
            mean_ms: ms(t.mean_us()),
            p95_ms: ms(t.quantile_us(0.95)),
        })
        .collect();
    (span, points)
}

/// A histogram's bucket as a page shows it: its upper bound in ms (`None`: the rest).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Bucket {
    pub(crate) le_ms: Option<f64>,
    pub(crate) count: u64,
}

pub(crate) fn buckets(timing: &TypeTiming) -> Vec<Bucket> {
    timing
        .buckets
        .iter()
        .enumerate()
        .map(|(i, &count)| Bucket {
            le_ms: BUCKET_BOUNDS_US.get(i).map(|&us| ms(us)),
            count,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute(minute: u64, name: &str, handled: u64) -> MinuteTiming {
        let mut timing = TypeTiming::default();
        timing.handled = handled;
        timing.total_us = handled * 2_000;
        timing.buckets[TypeTiming::bucket_of(2_000)] = handled;
        MinuteTiming::new(minute, [(name.to_owned(), timing)].into())
    }

    #[test]
    fn rows_sum_each_type_busiest_first() {
        let minutes = [minute(10, "a", 1), minute(11, "b", 5), minute(12, "a", 2)];
        let rows = rows(&minutes);
        let names: Vec<_> = rows
            .iter()
            .map(|r| (r.message_type.as_str(), r.handled))
            .collect();
        assert_eq!(names, [("b", 5), ("a", 3)]);
        assert_eq!(rows[1].mean_ms, 2.0);
        assert_eq!(rows[1].p95_ms, 2.5);
        assert_eq!(rows[1].total_ms, 6.0);
    }

    #[test]
    fn a_history_merges_minutes_into_equal_spans() {
        let minutes = [
            minute(10, "a", 1),
            minute(11, "a", 2),
            minute(15, "a", 4),
            minute(15, "b", 9),
        ];
        let (span, points) = history(&minutes, "a", 10, 15, 3);
        assert_eq!(span, 2);
        let handled: Vec<_> = points.iter().map(|p| (p.t / 60_000, p.handled)).collect();
        assert_eq!(handled, [(10, 3), (12, 0), (14, 4)]);
        let (span, points) = history(&minutes, "a", 10, 15, 240);
        assert_eq!((span, points.len()), (1, 6));
    }
}
