//! The Timing page's data: each message type's runs, failures and durations from the
//! hosts' per-type timing (docs/redis-layout.md, "Per-type timing"), over a window of up
//! to 72 hours, and one type's history.

use axum::extract::{Query, State};
use axum::Json;
use bus_redis::admin::MAX_TIMING_MINUTES;
use serde::{Deserialize, Serialize};

use super::api::{ApiError, ApiResult};
use super::AppState;
use crate::timing::{buckets, by_type, history, rows, Bucket, HistoryPoint, TypeRow};

/// Points per history plot, as the overview's plots.
const PLOT_POINTS: u64 = 240;

#[derive(Deserialize)]
pub(crate) struct TimingQuery {
    /// The window: the last this many minutes (60 by default, at most 72 h).
    minutes: Option<u64>,
    /// One type's history (`/api/timing/type`).
    name: Option<String>,
}

impl TimingQuery {
    fn minutes(&self) -> u64 {
        self.minutes.unwrap_or(60).clamp(1, MAX_TIMING_MINUTES)
    }
}

#[derive(Serialize)]
pub(crate) struct TimingView {
    /// Redis's time, ms.
    now_ms: u64,
    minutes: u64,
    /// Every type that ran in the window, busiest first.
    types: Vec<TypeRow>,
}

/// Every type's runs over the last `minutes` (the current minute included).
pub(crate) async fn timing(
    State(shared): State<AppState>,
    Query(query): Query<TimingQuery>,
) -> ApiResult<TimingView> {
    let admin = shared.reader.management().admin();
    let now_ms = admin
        .redis_now_ms()
        .await
        .map_err(bus_management::Error::from)?;
    let to = now_ms / 60_000;
    let minutes = query.minutes();
    let read = admin
        .timing(to + 1 - minutes, to)
        .await
        .map_err(bus_management::Error::from)?;
    Ok(Json(TimingView {
        now_ms,
        minutes,
        types: rows(&read),
    }))
}

#[derive(Serialize)]
pub(crate) struct TypeHistory {
    message_type: String,
    now_ms: u64,
    minutes: u64,
    /// Minutes per point.
    span_minutes: u64,
    summary: TypeRow,
    points: Vec<HistoryPoint>,
    buckets: Vec<Bucket>,
}

/// One type's runs per minute (merged into at most 240 points) and its histogram over
/// the last `minutes`.
pub(crate) async fn type_history(
    State(shared): State<AppState>,
    Query(query): Query<TimingQuery>,
) -> ApiResult<TypeHistory> {
    let Some(name) = query.name.as_deref().filter(|n| !n.is_empty()) else {
        return Err(ApiError::bad_request("name the message type: ?name=..."));
    };
    let admin = shared.reader.management().admin();
    let now_ms = admin
        .redis_now_ms()
        .await
        .map_err(bus_management::Error::from)?;
    let to = now_ms / 60_000;
    let minutes = query.minutes();
    let from = to + 1 - minutes;
    let read = admin
        .timing(from, to)
        .await
        .map_err(bus_management::Error::from)?;
    let total = by_type(&read).remove(name).unwrap_or_default();
    let (span_minutes, points) = history(&read, name, from, to, PLOT_POINTS);
    Ok(Json(TypeHistory {
        message_type: name.to_owned(),
        now_ms,
        minutes,
        span_minutes,
        summary: TypeRow::new(name, &total),
        points,
        buckets: buckets(&total),
    }))
}
