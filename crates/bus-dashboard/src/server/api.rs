//! The pages' data: `GET /api/...`, JSON.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bus_management::Address;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::views::{self, DeadGroup};
use super::AppState;
use crate::history::Point;
use crate::snapshot::QueueSnapshot;
use crate::Error;

/// An error as the pages show it: a status and `{"error": "..."}`.
#[derive(Debug)]
pub(crate) struct ApiError(StatusCode, String);

impl ApiError {
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError(StatusCode::BAD_REQUEST, message.into())
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        let status = match &error {
            Error::Management(
                bus_management::Error::InvalidSource { .. }
                | bus_management::Error::Bus(_)
                | bus_management::Error::UnknownKind { .. }
                | bus_management::Error::UnknownSource { .. }
                | bus_management::Error::UnknownQueue { .. }
                | bus_management::Error::AcrossKinds { .. }
                | bus_management::Error::NativeOnly { .. }
                | bus_management::Error::Redis(bus_redis::Error::InvalidRequest(_)),
            ) => StatusCode::BAD_REQUEST,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        // The page shows the whole chain: each level names only what happened there.
        ApiError(status, bus_core::ErrorChain(&error).to_string())
    }
}

impl From<bus_management::Error> for ApiError {
    fn from(error: bus_management::Error) -> Self {
        Error::from(error).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

pub(crate) type ApiResult<T> = Result<Json<T>, ApiError>;

/// Points per plot sent to a page: enough for its width, small enough to refresh often.
const PLOT_POINTS: usize = 240;

#[derive(Serialize)]
pub(crate) struct QueueRow {
    #[serde(flatten)]
    snapshot: QueueSnapshot,
    rate: f64,
    history: Vec<Point>,
}

#[derive(Serialize)]
pub(crate) struct Overview {
    prefix: String,
    sample_interval_ms: u64,
    history_ms: u64,
    now_ms: u64,
    /// Redis time of the server's first sample (`None` before it): the plots cover the
    /// time since then, up to `history_ms`.
    sampling_since_ms: Option<u64>,
    queues: Vec<QueueRow>,
}

/// Every queue's counts read now, its rate, and its sampled history.
pub(crate) async fn overview(State(shared): State<AppState>) -> ApiResult<Overview> {
    let snapshots = shared.reader.snapshot_all().await?;
    let now_ms = snapshots
        .first()
        .map_or_else(bus_core::transport::now_ms, |s| s.at_ms);
    let queues = snapshots
        .into_iter()
        .map(|snapshot| QueueRow {
            rate: shared.history.rate_now(&snapshot),
            history: shared.history.plot_live(&snapshot, PLOT_POINTS),
            snapshot,
        })
        .collect();
    Ok(Json(Overview {
        prefix: shared.reader.prefix().to_owned(),
        sample_interval_ms: shared.options.sample_interval.as_millis() as u64,
        history_ms: shared.options.history.as_millis() as u64,
        now_ms,
        sampling_since_ms: shared.history.since_ms(),
        queues,
    }))
}

#[derive(Deserialize)]
pub(crate) struct NameQuery {
    name: String,
}

#[derive(Serialize)]
pub(crate) struct ReadyView {
    #[serde(flatten)]
    message: bus_management::ReadyMessage,
    errors: Vec<bus_management::ErrorRecord>,
}

#[derive(Serialize)]
pub(crate) struct ScheduledView {
    #[serde(flatten)]
    message: bus_management::ScheduledMessage,
    errors: Vec<bus_management::ErrorRecord>,
}

#[derive(Serialize)]
pub(crate) struct QueuePage {
    snapshot: QueueSnapshot,
    limit: u64,
    ready: Vec<ReadyView>,
    scheduled: Vec<ScheduledView>,
    in_flight: Vec<bus_redis::admin::InFlightMessage>,
    /// Flow control (pause, limits); `None` for another kind's queue.
    flow: Option<bus_core::flow::Flow>,
    /// The circuit breakers of the running hosts that consume the queue with one.
    breakers: Vec<BreakerView>,
}

/// One host's circuit breaker on a queue, as its last heartbeat reported it.
#[derive(Serialize)]
pub(crate) struct BreakerView {
    host: String,
    state: bus_core::BreakerState,
}

/// The breakers of `name` in the running hosts' heartbeats.
fn breakers_of(hosts: &[bus_redis::admin::HostEntry], name: &str) -> Vec<BreakerView> {
    hosts
        .iter()
        .filter(|h| !h.lost)
        .filter_map(|h| {
            let state = *h.info.breakers.get(name)?;
            Some(BreakerView {
                host: h.info.id.clone(),
                state,
            })
        })
        .collect()
}

/// One queue: its counts, next ready messages, scheduled ones and those in flight, each
/// with its error history. Another kind's queue (BabelQueue's) shows its counts and its
/// next messages (its kind keeps no scheduled list or locks to show here).
pub(crate) async fn queue(
    State(shared): State<AppState>,
    Query(query): Query<NameQuery>,
) -> ApiResult<QueuePage> {
    let reader = &shared.reader;
    let management = reader.management();
    let admin = management.admin();
    let n = shared.options.page_size;
    let now_ms = reader.redis_now_ms().await?;
    let Some(source) = reader.fleet().native_source(&query.name)? else {
        return Ok(Json(other_queue(reader, &query.name, n, now_ms).await?));
    };
    let (snapshot, ready, scheduled, mut in_flight, (flow, hosts)) = tokio::try_join!(
        reader.snapshot(&query.name, now_ms),
        async { Ok(management.peek(&source, n).await?) },
        async { Ok(management.scheduled(&source, n).await?) },
        async {
            Ok(admin
                .in_flight(&source, n)
                .await
                .map_err(bus_management::Error::from)?)
        },
        async {
            Ok(tokio::try_join!(admin.flow(&source), admin.hosts())
                .map_err(bus_management::Error::from)?)
        },
    )?;
    for message in &mut in_flight {
        views::clip_summary(&mut message.message);
    }
    let ready_ids: Vec<String> = ready.iter().filter_map(|m| m.storage_id.clone()).collect();
    let scheduled_ids: Vec<String> = scheduled.iter().map(|m| m.storage_id.clone()).collect();
    let (ready_errors, scheduled_errors) = tokio::try_join!(
        admin.errors(&source, &ready_ids),
        admin.errors(&source, &scheduled_ids),
    )
    .map_err(|e| Error::from(bus_management::Error::from(e)))?;
    let mut ready_errors = ready_errors.into_iter();
    let ready = ready
        .into_iter()
        .map(|mut message| {
            views::clip_summary(&mut message.message);
            message
        })
        .map(|message| ReadyView {
            errors: match message.storage_id {
                Some(_) => ready_errors.next().unwrap_or_default(),
                None => Vec::new(),
            },
            message,
        })
        .collect();
    let scheduled = scheduled
        .into_iter()
        .zip(scheduled_errors)
        .map(|(mut message, errors)| {
            views::clip_summary(&mut message.message);
            ScheduledView { message, errors }
        })
        .collect();
    Ok(Json(QueuePage {
        snapshot,
        limit: n,
        ready,
        scheduled,
        in_flight,
        flow: Some(flow),
        breakers: breakers_of(&hosts, &query.name),
    }))
}

/// Another kind's queue: its counts and its next messages, with no error history (its
/// kind keeps none).
async fn other_queue(
    reader: &crate::snapshot::Reader,
    name: &str,
    n: u64,
    now_ms: u64,
) -> Result<QueuePage, Error> {
    let (snapshot, ready) = tokio::try_join!(reader.snapshot(name, now_ms), async {
        Ok(reader.fleet().peek(name, n).await?)
    })?;
    let ready = ready
        .into_iter()
        .map(|mut message| {
            views::clip_summary(&mut message.message);
            ReadyView {
                message,
                errors: Vec::new(),
            }
        })
        .collect();
    Ok(QueuePage {
        snapshot,
        limit: n,
        ready,
        scheduled: Vec::new(),
        in_flight: Vec::new(),
        flow: None,
        breakers: Vec::new(),
    })
}

#[derive(Serialize)]
pub(crate) struct DeadPage {
    name: String,
    /// All dead letters of the queue (`LLEN dead`).
    total: u64,
    /// How many were read and grouped (the oldest ones).
    read: usize,
    groups: Vec<DeadGroup>,
    letters: Vec<bus_management::DeadLetter>,
    /// Where they can be requeued: every queue (and subscription) of the same kind.
    targets: Vec<String>,
}

/// A queue's dead letters, grouped by reason and error.
pub(crate) async fn dead_letters(
    State(shared): State<AppState>,
    Query(query): Query<NameQuery>,
) -> ApiResult<DeadPage> {
    let fleet = shared.reader.fleet();
    let n = shared.options.page_size.saturating_mul(10);
    let (stats, mut letters, queues) = tokio::try_join!(
        fleet.stats(&query.name),
        fleet.dead_letters(&query.name, n),
        fleet.queues(),
    )?;
    // Requeue goes to a queue of the same kind only (the wire formats differ).
    let kind = Address::parse(&query.name).kind().map(str::to_owned);
    for letter in &mut letters {
        views::clip_summary(&mut letter.message);
    }
    Ok(Json(DeadPage {
        name: query.name,
        total: stats.dead_letters,
        read: letters.len(),
        groups: views::group(&letters),
        letters,
        targets: queues
            .into_iter()
            .filter(|q| Address::parse(q).kind() == kind.as_deref())
            .collect(),
    }))
}

#[derive(Deserialize)]
pub(crate) struct SagasQuery {
    partition: Option<String>,
}

/// Every saga (or one partition's), found with `SCAN`.
pub(crate) async fn sagas(
    State(shared): State<AppState>,
    Query(query): Query<SagasQuery>,
) -> ApiResult<Vec<bus_management::SagaEntry>> {
    let partition = query.partition.as_deref().filter(|p| !p.is_empty());
    Ok(Json(shared.reader.management().sagas(partition).await?))
}

#[derive(Deserialize)]
pub(crate) struct SagaQuery {
    partition: String,
    id: String,
}

#[derive(Serialize)]
pub(crate) struct SagaView {
    partition: String,
    id: String,
    key: String,
    exists: bool,
    ttl_ms: Option<u64>,
    stamp: Option<String>,
    /// The state as text (JSON as stored), or a note when it is binary.
    data: Option<String>,
}

/// One saga's state, stamp and time to live, read through the saga store (read only).
pub(crate) async fn saga(
    State(shared): State<AppState>,
    Query(query): Query<SagaQuery>,
) -> ApiResult<SagaView> {
    bus_core::transport::validate_name("saga partition", &query.partition)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let management = shared.reader.management();
    let key = management.saga_store().key(&query.partition, &query.id);
    let mut view = SagaView {
        partition: query.partition,
        id: query.id,
        key: key.clone(),
        exists: false,
        ttl_ms: None,
        stamp: None,
        data: None,
    };
    match management.saga(&view.partition, &view.id).await {
        Ok(Some(state)) => {
            view.exists = true;
            view.data = Some(state.data);
            view.stamp = Some(state.stamp);
            view.ttl_ms = state.ttl_ms;
        }
        Ok(None) => {}
        Err(bus_management::Error::Bus(bus_core::Error::NotASaga { reason, .. })) => {
            return Err(ApiError::bad_request(format!(
                "{key} is not a saga hash ({reason}); the dashboard leaves it alone"
            )));
        }
        Err(e) => return Err(Error::from(e).into()),
    }
    Ok(Json(view))
}

/// The keys of an ordered queue with the most messages waiting for them (the
/// "per-key backlogs"), bounded (`Admin::key_backlogs`); empty for another kind's queue or
/// a queue that is not ordered.
pub(crate) async fn key_backlogs(
    State(shared): State<AppState>,
    Query(query): Query<NameQuery>,
) -> ApiResult<bus_redis::admin::KeyBacklogs> {
    let reader = &shared.reader;
    let Some(source) = reader.fleet().native_source(&query.name)? else {
        return Ok(Json(bus_redis::admin::KeyBacklogs::default()));
    };
    let admin = reader.management().admin();
    Ok(Json(
        admin
            .key_backlogs(&source, KEY_BACKLOGS_SHOWN)
            .await
            .map_err(bus_management::Error::from)?,
    ))
}

/// How many keys the queue page lists.
const KEY_BACKLOGS_SHOWN: u64 = 20;
