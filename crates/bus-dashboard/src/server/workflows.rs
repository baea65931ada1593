//! The Workflows page (bus-workflows): open and recently done batches with their progress,
//! dead members and callbacks, continuations waiting for their children, and runs parked
//! by a sleep or a wait with their signal. Its script is assets/workflows.js; its routes
//! are merged into the guarded ones.

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bus_workflows::store::WorkflowStore;
use bus_workflows::{BatchId, BatchStatus, ParkedInfo, RedisWorkflowStore};
use serde::{Deserialize, Serialize};

use super::api::{ApiError, ApiResult};
use super::AppState;

const SCRIPT: &str = include_str!("../../assets/workflows.js");

/// Batches and parked runs listed per kind.
const LISTED: usize = 100;
/// Dead members shown on a batch's page.
const DEAD_SHOWN: usize = 100;

pub(crate) fn routes(shared: AppState) -> Router {
    Router::new()
        .route("/api/workflows", get(overview))
        .route("/api/workflows/batch", get(batch))
        .route("/assets/workflows.js", get(script))
        .with_state(shared)
}

fn store(shared: &AppState) -> RedisWorkflowStore {
    RedisWorkflowStore::for_transport(shared.reader.management().admin().transport())
}

fn failed(error: bus_workflows::Error) -> ApiError {
    match error {
        bus_workflows::Error::Redis(e) => bus_management::Error::from(e).into(),
        other => ApiError::bad_request(bus_core::ErrorChain(&other).to_string()),
    }
}

#[derive(Serialize)]
pub(crate) struct Overview {
    open: Vec<BatchStatus>,
    done: Vec<BatchStatus>,
    parked: Vec<ParkedInfo>,
}

async fn statuses(
    store: &RedisWorkflowStore,
    ids: &[BatchId],
) -> Result<Vec<BatchStatus>, ApiError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(status) = store.status(id, 0).await.map_err(failed)? {
            out.push(status);
        }
    }
    Ok(out)
}

/// Open batches (oldest first), recently done ones (newest first), parked runs.
async fn overview(State(shared): State<AppState>) -> ApiResult<Overview> {
    let store = store(&shared);
    let (open, done) = store.list(LISTED).await.map_err(failed)?;
    Ok(Json(Overview {
        open: statuses(&store, &open).await?,
        done: statuses(&store, &done).await?,
        parked: store.parked(LISTED).await.map_err(failed)?,
    }))
}

#[derive(Deserialize)]
pub(crate) struct BatchQuery {
    id: String,
}

/// One batch with its dead members.
async fn batch(
    State(shared): State<AppState>,
    Query(query): Query<BatchQuery>,
) -> Result<Response, ApiError> {
    let id = BatchId::parse(&query.id).map_err(failed)?;
    match store(&shared)
        .status(&id, DEAD_SHOWN)
        .await
        .map_err(failed)?
    {
        Some(status) => Ok(Json(status).into_response()),
        None => Ok((
            StatusCode::NOT_FOUND,
            Json(
                serde_json::json!({ "error": format!("no batch {id} (never opened, or expired)") }),
            ),
        )
            .into_response()),
    }
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response()
}
