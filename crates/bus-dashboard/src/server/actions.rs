//! The state changes: `POST` only, each with the page's CSRF token (checked in `auth`),
//! refused in read-only mode (by `ops::read_only`, before they get here). Each handler
//! reads its request into a [`bus_management::Action`] and hands it to [`apply`], which
//! applies it as the operator (audited by [`Fleet::apply`](bus_management::Fleet::apply))
//! and answers with the outcome.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::Json;
use bus_management::{Action, Actor, Selection};
use serde::Deserialize;
use serde_json::Value;

use super::api::{ApiError, ApiResult};
use super::AppState;

/// More ids than this in one request is a mistake of the caller, not an operator's choice.
const MAX_IDS: usize = 10_000;

/// Applies `action` as the dashboard's operator, from `peer`, and answers with what it
/// did. A failed audit append leaves the change made and is logged.
pub(crate) async fn apply(shared: &AppState, peer: SocketAddr, action: Action) -> ApiResult<Value> {
    let who = shared
        .options
        .operator
        .clone()
        .unwrap_or_else(bus_management::os_user);
    let actor = Actor::new(who, format!("dashboard from {}", peer.ip()));
    let outcome = shared.reader.fleet().apply(action, &actor).await?;
    let said = outcome.lines().join("; ");
    match outcome.missed() {
        Some(missed) => tracing::info!(%missed, "dashboard: nothing to change"),
        None => tracing::info!(outcome = %said, "dashboard: change made"),
    }
    if let Some(error) = outcome.audit_failure() {
        tracing::warn!(%error, outcome = %said, "dashboard: the change was made, but its audit entry could not be written");
    }
    Ok(Json(outcome.answer()))
}

/// At most [`MAX_IDS`] ids, and at least one.
fn checked(ids: &[String]) -> Result<(), ApiError> {
    match ids.len() {
        0 => Err(ApiError::bad_request("no dead letters selected")),
        n if n > MAX_IDS => Err(ApiError::bad_request(format!(
            "at most {MAX_IDS} ids per request"
        ))),
        _ => Ok(()),
    }
}

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
) -> ApiResult<Value> {
    let selection = match (request.all, request.ids.is_empty()) {
        (true, true) => Selection::All,
        (true, false) => return Err(ApiError::bad_request("give ids or all, not both")),
        (false, _) => {
            checked(&request.ids)?;
            Selection::Ids(request.ids)
        }
    };
    let action = Action::Requeue {
        queue: request.name,
        selection,
        to: request.to.filter(|t| !t.is_empty()),
    };
    apply(&shared, peer, action).await
}

#[derive(Deserialize)]
pub(crate) struct DeleteRequest {
    name: String,
    ids: Vec<String>,
}

/// Deletes dead letters (one, or a group), each by one atomic script.
pub(crate) async fn delete_dead_letters(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<DeleteRequest>,
) -> ApiResult<Value> {
    checked(&request.ids)?;
    let action = Action::DeleteDead {
        queue: request.name,
        ids: request.ids,
    };
    apply(&shared, peer, action).await
}

#[derive(Deserialize)]
pub(crate) struct SagaRequest {
    partition: String,
    id: String,
}

/// Deletes one saga, whatever its state.
pub(crate) async fn delete_saga(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<SagaRequest>,
) -> ApiResult<Value> {
    let action = Action::DeleteSaga {
        partition: request.partition,
        id: request.id,
    };
    apply(&shared, peer, action).await
}

#[derive(Deserialize)]
pub(crate) struct FlowRequest {
    name: String,
}

/// Pauses a queue (flow control): its consumers stop reserving within a second, running
/// handlers finish, sends still enqueue. One `HSET` per shard.
pub(crate) async fn pause(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<FlowRequest>,
) -> ApiResult<Value> {
    apply(
        &shared,
        peer,
        Action::Pause {
            queue: request.name,
        },
    )
    .await
}

/// Resumes a paused queue: its consumers reserve again within a second.
pub(crate) async fn resume(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<FlowRequest>,
) -> ApiResult<Value> {
    apply(
        &shared,
        peer,
        Action::Resume {
            queue: request.name,
        },
    )
    .await
}

/// Closes a queue's tripped fleet circuit breaker by hand: consumers on every host take
/// its messages again at once, with no probe. One `HDEL` per shard.
pub(crate) async fn close_breaker(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<FlowRequest>,
) -> ApiResult<Value> {
    let action = Action::CloseBreaker {
        queue: request.name,
    };
    apply(&shared, peer, action).await
}
