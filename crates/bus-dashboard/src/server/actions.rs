//! The state changes: `POST` only, each with the page's CSRF token (checked in `auth`),
//! each one management call (atomic as management makes it).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::Json;
use bus_management::{Requeued, Selection};
use serde::{Deserialize, Serialize};

use super::api::{ApiError, ApiResult};
use super::ops::record;
use super::AppState;

/// More ids than this in one request is a mistake of the caller, not an operator's choice.
const MAX_IDS: usize = 10_000;

#[derive(Deserialize)]
pub(crate) struct RequeueRequest {
    name: String,
    /// These dead letters; or, with `all`, every one.
    #[serde(default)]
    ids: Vec<String>,
    #[serde(default)]
    all: bool,
    /// Another queue or subscription to move them to; the same queue when absent.
    #[serde(default)]
    to: Option<String>,
}

/// Requeues one dead letter, a group, or all, to the same queue or another.
pub(crate) async fn requeue(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<RequeueRequest>,
) -> ApiResult<Requeued> {
    let fleet = shared.reader.fleet();
    // Checked before anything changes: a name of the bus's own must be valid.
    fleet.native_source(&request.name)?;
    let to = request.to.as_deref().filter(|t| !t.is_empty());
    if let Some(to) = to {
        fleet.native_source(to)?;
    }
    let selection = match (request.all, request.ids.len()) {
        (true, 0) => Selection::All,
        (true, _) => return Err(ApiError::bad_request("give ids or all, not both")),
        (false, 0) => return Err(ApiError::bad_request("no dead letters selected")),
        (false, n) if n > MAX_IDS => {
            return Err(ApiError::bad_request(format!(
                "at most {MAX_IDS} ids per request"
            )))
        }
        (false, _) => Selection::Ids(request.ids),
    };
    let done = fleet.requeue(&request.name, &selection, to).await?;
    tracing::info!(
        queue = %request.name,
        target = %done.target,
        requeued = done.requeued.len(),
        "dashboard: dead letters requeued"
    );
    let action = if done.target == request.name {
        "requeue"
    } else {
        "move"
    };
    let detail = format!(
        "to {}{}",
        done.target,
        if request.all { ", all" } else { "" }
    );
    let count = done.requeued.len() as u64;
    record(&shared, peer, action, &request.name, count, detail).await;
    Ok(Json(done))
}

#[derive(Deserialize)]
pub(crate) struct DeleteRequest {
    name: String,
    ids: Vec<String>,
}

#[derive(Serialize)]
pub(crate) struct Deleted {
    deleted: Vec<String>,
    not_found: Vec<String>,
}

/// Deletes dead letters (one, or a group), each by one atomic script.
pub(crate) async fn delete_dead_letters(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<DeleteRequest>,
) -> ApiResult<Deleted> {
    let fleet = shared.reader.fleet();
    fleet.native_source(&request.name)?;
    if request.ids.is_empty() {
        return Err(ApiError::bad_request("no dead letters selected"));
    }
    if request.ids.len() > MAX_IDS {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_IDS} ids per request"
        )));
    }
    let mut report = Deleted {
        deleted: Vec::new(),
        not_found: Vec::new(),
    };
    for id in request.ids {
        if fleet.delete_dead_letter(&request.name, &id).await? {
            report.deleted.push(id);
        } else {
            report.not_found.push(id);
        }
    }
    tracing::info!(queue = %request.name, deleted = report.deleted.len(), "dashboard: dead letters deleted");
    let count = report.deleted.len() as u64;
    let detail = format!("dead letters {}", report.deleted.join(" "));
    record(&shared, peer, "delete", &request.name, count, detail).await;
    Ok(Json(report))
}

#[derive(Deserialize)]
pub(crate) struct SagaRequest {
    partition: String,
    id: String,
}

#[derive(Serialize)]
pub(crate) struct SagaDeleted {
    existed: bool,
}

/// Deletes one saga, whatever its state.
pub(crate) async fn delete_saga(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<SagaRequest>,
) -> ApiResult<SagaDeleted> {
    let existed = shared
        .reader
        .management()
        .delete_saga(&request.partition, &request.id)
        .await?;
    tracing::info!(partition = %request.partition, id = %request.id, existed, "dashboard: saga deleted");
    if existed {
        let target = format!("{}/{}", request.partition, request.id);
        record(&shared, peer, "delete-saga", &target, 1, String::new()).await;
    }
    Ok(Json(SagaDeleted { existed }))
}

#[derive(Deserialize)]
pub(crate) struct FlowRequest {
    name: String,
}

#[derive(Serialize)]
pub(crate) struct FlowChanged {
    paused: bool,
}

/// Pauses a queue (flow control): its consumers stop reserving within a second, running
/// handlers finish, sends still enqueue. One `HSET` per shard.
pub(crate) async fn pause(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<FlowRequest>,
) -> ApiResult<FlowChanged> {
    let fleet = shared.reader.fleet();
    // A typo must not leave a `flow` hash behind for a queue nobody consumes.
    fleet.ensure_exists(&request.name).await?;
    fleet.pause(&request.name).await?;
    tracing::info!(queue = %request.name, "dashboard: queue paused");
    record(&shared, peer, "pause", &request.name, 1, String::new()).await;
    Ok(Json(FlowChanged { paused: true }))
}

/// Resumes a paused queue: its consumers reserve again within a second.
pub(crate) async fn resume(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<FlowRequest>,
) -> ApiResult<FlowChanged> {
    let fleet = shared.reader.fleet();
    fleet.ensure_exists(&request.name).await?;
    fleet.resume(&request.name).await?;
    tracing::info!(queue = %request.name, "dashboard: queue resumed");
    record(&shared, peer, "resume", &request.name, 1, String::new()).await;
    Ok(Json(FlowChanged { paused: false }))
}

#[derive(Serialize)]
pub(crate) struct BreakerClosed {
    breaker: &'static str,
}

/// Closes a queue's tripped fleet circuit breaker by hand: consumers on every host take
/// its messages again at once, with no probe. One `HDEL` per shard.
pub(crate) async fn close_breaker(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<FlowRequest>,
) -> ApiResult<BreakerClosed> {
    let fleet = shared.reader.fleet();
    fleet.ensure_exists(&request.name).await?;
    fleet.close_breaker(&request.name).await?;
    tracing::info!(queue = %request.name, "dashboard: fleet circuit breaker closed");
    record(
        &shared,
        peer,
        "close-breaker",
        &request.name,
        1,
        String::new(),
    )
    .await;
    Ok(Json(BreakerClosed { breaker: "closed" }))
}
