//! The operations pages' data (Redis's health, the hosts and their schedules, the audit
//! log) and read-only mode.

use axum::extract::{Query, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bus_management::{AuditEntry, Health, HostEntry, ScheduleEntry};
use serde::Deserialize;
use serde_json::json;

use super::api::ApiResult;
use super::AppState;

/// Most audit entries one page reads.
const AUDIT_PAGE: u64 = 500;

/// Redis's configuration checked for what loses or stalls messages (the checks of
/// `bus doctor`), with what to change.
pub(crate) async fn health(State(shared): State<AppState>) -> ApiResult<Health> {
    Ok(Json(shared.reader.management().health().await))
}

/// The hosts from their heartbeats, running ones first; a silent one is `lost`.
pub(crate) async fn hosts(State(shared): State<AppState>) -> ApiResult<Vec<HostEntry>> {
    Ok(Json(shared.reader.management().hosts().await?))
}

/// The recurring schedules the hosts run, with their last tick and next run.
pub(crate) async fn schedules(State(shared): State<AppState>) -> ApiResult<Vec<ScheduleEntry>> {
    Ok(Json(shared.reader.management().schedules().await?))
}

#[derive(Deserialize)]
pub(crate) struct AuditQuery {
    count: Option<u64>,
}

/// The newest entries of the audit log, newest first.
pub(crate) async fn audit(
    State(shared): State<AppState>,
    Query(query): Query<AuditQuery>,
) -> ApiResult<Vec<AuditEntry>> {
    let count = query.count.unwrap_or(100).clamp(1, AUDIT_PAGE);
    Ok(Json(shared.reader.management().audit_log(count).await?))
}

/// In read-only mode every state change (a `POST`) is refused before it reaches its
/// handler; reads pass.
pub(crate) async fn read_only(
    State(shared): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if shared.options.read_only && request.method() == Method::POST {
        return (
            StatusCode::FORBIDDEN,
            Json(json!({ "error": "the dashboard is read-only (started with --read-only): nothing was changed" })),
        )
            .into_response();
    }
    next.run(request).await
}
