//! A queue's scheduled (delayed) messages cancelled from its page: `POST` only, one
//! atomic script each (`cancel.lua`, as `bus cancel`), audited, refused in read-only
//! mode (by `ops::read_only`, before it gets here).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::api::{ApiError, ApiResult};
use super::ops::record;
use super::AppState;

#[derive(Deserialize)]
pub(crate) struct CancelRequest {
    /// The queue (a command queue or a subscription).
    name: String,
    /// The delayed message's id as the queue page shows it (its storage id).
    id: String,
}

#[derive(Serialize)]
pub(crate) struct Cancelled {
    /// `false`: nothing waited under that id (delivered, or cancelled already).
    cancelled: bool,
}

/// Cancels one scheduled message: removed with its envelope, never delivered.
pub(crate) async fn cancel(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<CancelRequest>,
) -> ApiResult<Cancelled> {
    let Some(source) = shared.reader.fleet().native_source(&request.name)? else {
        return Err(ApiError::bad_request(
            "only the bus's own queues have scheduled messages to cancel",
        ));
    };
    if request.id.is_empty() {
        return Err(ApiError::bad_request("no scheduled message selected"));
    }
    let cancelled = shared
        .reader
        .management()
        .admin()
        .cancel(&source, &request.id)
        .await
        .map_err(bus_management::Error::from)?;
    tracing::info!(queue = %request.name, id = %request.id, cancelled, "dashboard: scheduled message cancelled");
    if cancelled {
        record(&shared, peer, "cancel", &request.name, 1, request.id).await;
    }
    Ok(Json(Cancelled { cancelled }))
}
