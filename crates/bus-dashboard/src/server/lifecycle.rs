//! A queue's scheduled (delayed) messages cancelled from its page: `POST` only, one
//! atomic script each (`cancel.lua`, as `bus cancel`), audited, refused in read-only
//! mode (by `ops::read_only`, before it gets here).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::Json;
use bus_management::Action;
use serde::Deserialize;
use serde_json::Value;

use super::actions::apply;
use super::api::{ApiError, ApiResult};
use super::AppState;

#[derive(Deserialize)]
pub(crate) struct CancelRequest {
    /// The queue (a command queue or a subscription).
    name: String,
    /// The delayed message's id as the queue page shows it (its storage id).
    id: String,
}

/// Cancels one scheduled message: removed with its envelope, never delivered. Answers
/// `{"cancelled": false}` when nothing waited under the id (delivered, or cancelled
/// already).
pub(crate) async fn cancel(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<CancelRequest>,
) -> ApiResult<Value> {
    if request.id.is_empty() {
        return Err(ApiError::bad_request("no scheduled message selected"));
    }
    let action = Action::Cancel {
        queue: request.name,
        id: request.id,
    };
    apply(&shared, peer, action).await
}
