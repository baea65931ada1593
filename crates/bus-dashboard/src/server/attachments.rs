//! The message view's attachment download: streams an attachment stored by
//! bus-attachments' Redis provider under this dashboard's prefix (in the same Redis),
//! chunk by chunk. Attachments in an object store are not offered: the dashboard has no
//! credentials for it, and answers 404.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bus_attachments::{AttachmentProvider, RedisProvider};
use serde::Deserialize;

use super::AppState;

/// `?scope=<queue or topic>&id=<attachment id>`, from the message's `bus-attachment` header.
#[derive(Debug, Deserialize)]
pub(crate) struct AttachmentQuery {
    scope: String,
    id: String,
}

pub(crate) async fn download(
    State(shared): State<AppState>,
    Query(query): Query<AttachmentQuery>,
) -> Response {
    let admin = shared.reader.management().admin();
    let provider = RedisProvider::new(admin.transport().client().clone(), admin.key_prefix());
    let reference = match provider.stat(&query.scope, &query.id).await {
        Ok(Some(reference)) => reference,
        Ok(None) => return (
            StatusCode::NOT_FOUND,
            "attachment not in Redis: deleted, expired, or in an object store (not offered here)",
        )
            .into_response(),
        Err(error) => return (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    };
    let body = match provider.open(&reference).await {
        Ok(body) => body,
        Err(error) => return (StatusCode::NOT_FOUND, error.to_string()).into_response(),
    };
    // Always a download, never rendered: the stored content type is the sender's word,
    // and HTML served from the dashboard's origin could act as the operator.
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}\"", file_name(&reference.name)),
            ),
            (header::CONTENT_LENGTH, reference.length.to_string()),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// The name as a header can carry it: anything but letters, digits, `.`, `-`, `_` and
/// spaces becomes `_`.
fn file_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ' ') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe.trim().is_empty() {
        "attachment".to_owned()
    } else {
        safe
    }
}
