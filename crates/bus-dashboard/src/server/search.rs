//! The Search page's data and actions (find ready, delayed and dead messages in bounded
//! pages; act on every match, page by page, after a dry run) and edit-and-retry of a dead
//! letter. Every change is an action applied (and audited) by `actions::apply`; read-only
//! mode refuses them before they get here.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Query, State};
use axum::Json;
use bus_core::transport::Source;
use bus_management::{Action, EditRecord, OnMatches, Pages, Place, SearchPage, SearchQuery};
use serde::Deserialize;
use serde_json::Value;

use super::actions::apply;
use super::api::{ApiError, ApiResult};
use super::AppState;

/// Elements one request reads when the page does not say.
const DEFAULT_PAGE: u64 = 2_000;

/// A search as the page sends it: empty fields are no criterion.
#[derive(Deserialize)]
pub(crate) struct SearchParams {
    name: String,
    #[serde(default)]
    id: String,
    #[serde(default, rename = "type")]
    message_type: String,
    /// `name=value` (or `name` for any value).
    #[serde(default)]
    header: String,
    #[serde(default)]
    error: String,
    #[serde(default)]
    body: String,
    /// `ready,delayed,dead` (all when empty).
    #[serde(default)]
    places: String,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    limit: Option<u64>,
}

impl SearchParams {
    fn query(&self) -> Result<SearchQuery, ApiError> {
        let mut query = SearchQuery::default();
        let given = |text: &str| !text.trim().is_empty();
        if given(&self.id) {
            query = query.id(self.id.trim());
        }
        if given(&self.message_type) {
            query = query.message_type(self.message_type.trim());
        }
        if given(&self.header) {
            let (name, value) = self.header.split_once('=').unwrap_or((&self.header, ""));
            query = query.header(name.trim(), value.trim());
        }
        if given(&self.error) {
            query = query.error(self.error.trim());
        }
        if given(&self.body) {
            query = query.body(self.body.trim());
        }
        let places = self
            .places
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|p| p.trim().parse::<Place>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(query.places(places))
    }

    /// What the audit log says was searched.
    fn describe(&self) -> String {
        [
            ("id", &self.id),
            ("type", &self.message_type),
            ("header", &self.header),
            ("error", &self.error),
            ("body", &self.body),
            ("in", &self.places),
        ]
        .iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| format!("{k} {v:?}"))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// The bus's own queue or subscription `name`: a search and the edit history read the
/// bus's layout.
fn native(shared: &AppState, name: &str) -> Result<Source, ApiError> {
    shared.reader.fleet().native_source(name)?.ok_or_else(|| {
        ApiError::bad_request(format!(
            "{name} is another kind's queue: search and edit work on the bus's own queues"
        ))
    })
}

/// One page of a search.
pub(crate) async fn search(
    State(shared): State<AppState>,
    Query(params): Query<SearchParams>,
) -> ApiResult<SearchPage> {
    let source = native(&shared, &params.name)?;
    let query = params.query()?;
    let limit = params.limit.unwrap_or(DEFAULT_PAGE);
    let page = shared
        .reader
        .management()
        .search(&source, &query, params.cursor.as_deref(), limit)
        .await?;
    Ok(Json(page))
}

#[derive(Deserialize)]
pub(crate) struct ActRequest {
    #[serde(flatten)]
    search: SearchParams,
    /// `requeue`, `delete` or `move`.
    action: String,
    /// The queue to move to.
    #[serde(default)]
    to: Option<String>,
}

/// One page searched and acted on; the page calls it again with `next` until done. Each
/// page that changed something is one audit entry.
pub(crate) async fn act(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<ActRequest>,
) -> ApiResult<Value> {
    let act = match (request.action.as_str(), request.to) {
        ("requeue", _) => OnMatches::Requeue,
        ("delete", _) => OnMatches::Delete,
        ("move", Some(to)) if !to.is_empty() => OnMatches::MoveTo(to),
        ("move", _) => return Err(ApiError::bad_request("a move needs `to`")),
        (other, _) => {
            return Err(ApiError::bad_request(format!(
                "no action {other:?}: use requeue, delete or move"
            )))
        }
    };
    let search = request.search;
    let action = Action::ActOnMatches {
        query: search.query()?,
        criteria: search.describe(),
        act,
        pages: Pages::One {
            limit: search.limit.unwrap_or(DEFAULT_PAGE),
            cursor: search.cursor,
        },
        queue: search.name,
    };
    apply(&shared, peer, action).await
}

#[derive(Deserialize)]
pub(crate) struct EditRequest {
    name: String,
    /// The dead letter's storage id.
    id: String,
    headers: BTreeMap<String, String>,
    /// The new body, JSON text.
    body: String,
}

/// Edits a dead letter's headers and body and requeues it (one script); audited.
pub(crate) async fn edit(
    State(shared): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(request): Json<EditRequest>,
) -> ApiResult<Value> {
    let action = Action::Edit {
        queue: request.name,
        id: request.id,
        headers: request.headers,
        body: request.body,
    };
    apply(&shared, peer, action).await
}

#[derive(Deserialize)]
pub(crate) struct EditsQuery {
    name: String,
}

/// The queue's edit history, newest first.
pub(crate) async fn edits(
    State(shared): State<AppState>,
    Query(query): Query<EditsQuery>,
) -> ApiResult<Vec<EditRecord>> {
    let source = native(&shared, &query.name)?;
    Ok(Json(shared.reader.management().edits(&source, 100).await?))
}
