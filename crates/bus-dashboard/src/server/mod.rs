//! [`Dashboard`]: the axum server, its routes and its assets.

mod actions;
mod api;
mod attachments;
mod auth;
mod lifecycle;
mod ops;
mod search;
mod timing;
mod views;
mod workflows;

use std::future::Future;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use axum::Router;
use bus_management::{Fleet, Management};
use bus_redis::RedisTransport;
use serde_json::json;
use tokio::net::TcpListener;

use crate::history::History;
use crate::metrics::QueueMetrics;
use crate::snapshot::Reader;
use crate::{DashboardOptions, Result};

const INDEX: &str = include_str!("../../assets/index.html");
const APP_JS: &str = include_str!("../../assets/app.js");
const OPS_JS: &str = include_str!("../../assets/ops.js");
const SEARCH_JS: &str = include_str!("../../assets/search.js");
const TIMING_JS: &str = include_str!("../../assets/timing.js");
const APP_CSS: &str = include_str!("../../assets/app.css");

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) reader: Reader,
    pub(crate) history: History,
    pub(crate) options: DashboardOptions,
    pub(crate) guard: auth::Guard,
    /// The page, with this process's CSRF token and settings filled in.
    index: String,
}

type AppState = Arc<Shared>;

/// The web dashboard (`bus dashboard`): live counts and plots of every queue and
/// subscription, message browsing, dead letters grouped by error with requeue and delete,
/// and sagas. Its HTML, CSS and JavaScript are embedded; it needs no internet.
///
/// Safe by default: [`Dashboard::serve`] refuses a non-loopback listener unless an access
/// token is set ([`DashboardOptions::token`]); state changes only through `POST` with the
/// page's CSRF token; it shows no connection string (so no password). See
/// `docs/operations.md` ("Metrics and dashboard").
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let config = bus_redis::RedisConfig::from_url("redis://127.0.0.1:6379")?;
/// let transport = bus_redis::RedisTransport::connect(&config).await?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let options = bus_dashboard::DashboardOptions::default();
/// bus_dashboard::Dashboard::new(transport, options).serve(listener).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Dashboard {
    fleet: Fleet,
    options: DashboardOptions,
}

impl Dashboard {
    /// A dashboard of the queues under the transport's key prefix, read and changed
    /// through its connection (and [`bus_management::Management`] over it).
    pub fn new(transport: RedisTransport, options: DashboardOptions) -> Self {
        Self::for_fleet(Fleet::new(Management::from_transport(transport)), options)
    }

    /// A dashboard of every queue of every kind the fleet serves: the bus's own and
    /// others (BabelQueue's layouts) beside them, each read and changed through its
    /// kind's operator.
    pub fn for_fleet(fleet: Fleet, options: DashboardOptions) -> Self {
        Dashboard { fleet, options }
    }

    /// Serves the dashboard on `listener` until the task is dropped.
    pub async fn serve(self, listener: TcpListener) -> Result<()> {
        self.serve_with_shutdown(listener, std::future::pending())
            .await
    }

    /// Serves the dashboard on `listener` until `shutdown` completes. Fails at once on a
    /// non-loopback listener without a token, or an invalid token.
    pub async fn serve_with_shutdown(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        self.options.check_address(listener.local_addr()?)?;
        let interval = self.options.sample_interval;
        let (router, shared) = self.build()?;
        // The sampler lives as long as the server.
        let sampler = tokio::spawn(shared.history.clone().run(shared.reader.clone(), interval));
        let _stop_sampler = AbortOnDrop(sampler);
        // The peer's address goes into the audit log.
        let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
        axum::serve(listener, service)
            .with_graceful_shutdown(shutdown)
            .await?;
        Ok(())
    }

    fn build(self) -> Result<(Router, AppState)> {
        let guard = auth::Guard::new(self.options.checked_token()?.map(str::to_owned));
        let reader = Reader::for_fleet(self.fleet, self.options.saga_prefix.as_deref());
        let index = INDEX
            .replace("{{CSRF}}", guard.csrf())
            .replace(
                "{{REFRESH_MS}}",
                &self.options.refresh_interval.as_millis().to_string(),
            )
            .replace("{{PREFIX}}", &views::html_escape(reader.prefix()))
            .replace(
                "{{READ_ONLY}}",
                if self.options.read_only {
                    "true"
                } else {
                    "false"
                },
            );
        let shared = Arc::new(Shared {
            history: History::new(self.options.sample_interval, self.options.history),
            reader,
            options: self.options,
            guard,
            index,
        });
        let metrics = QueueMetrics::from_reader(shared.reader.clone())
            .timeout(shared.options.request_timeout)
            .metrics_only();
        let guarded = Router::new()
            .route("/", get(index_page))
            .route("/api/overview", get(api::overview))
            .route("/api/queue", get(api::queue))
            .route("/api/queue/keys", get(api::key_backlogs))
            .route("/api/dead-letters", get(api::dead_letters))
            .route("/api/sagas", get(api::sagas))
            .route("/api/saga", get(api::saga))
            .route("/api/health", get(ops::health))
            .route("/api/audit", get(ops::audit))
            .route("/api/hosts", get(ops::hosts))
            .route("/api/schedules", get(ops::schedules))
            .route("/api/dead-letters/requeue", post(actions::requeue))
            .route(
                "/api/dead-letters/delete",
                post(actions::delete_dead_letters),
            )
            .route("/api/sagas/delete", post(actions::delete_saga))
            .route("/api/attachment", get(attachments::download))
            .route("/api/queue/pause", post(actions::pause))
            .route("/api/queue/resume", post(actions::resume))
            .route("/api/queue/close-breaker", post(actions::close_breaker))
            .route("/api/search", get(search::search))
            .route("/api/search/act", post(search::act))
            .route("/api/dead-letters/edit", post(search::edit))
            .route("/api/edits", get(search::edits))
            .route("/api/timing", get(timing::timing))
            .route("/api/timing/type", get(timing::type_history))
            .route("/api/scheduled/cancel", post(lifecycle::cancel))
            .with_state(shared.clone())
            .merge(workflows::routes(shared.clone()))
            .merge(metrics)
            .layer(from_fn_with_state(shared.clone(), bounded))
            .layer(from_fn_with_state(shared.clone(), ops::read_only))
            .layer(from_fn_with_state(shared.clone(), auth::guard));
        let router = Router::new()
            .route("/login", get(auth::login_page).post(auth::login))
            // Static and secret-free: the login page needs the style sheet.
            .route("/assets/app.js", get(app_js))
            .route("/assets/ops.js", get(ops_js))
            .route("/assets/search.js", get(search_js))
            .route("/assets/timing.js", get(timing_js))
            .route("/assets/app.css", get(app_css))
            .with_state(shared.clone())
            .merge(guarded)
            .layer(axum::middleware::map_response(security_headers));
        Ok((router, shared))
    }
}

async fn index_page(State(shared): State<AppState>) -> Html<String> {
    Html(shared.index.clone())
}

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
        .into_response()
}

async fn ops_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        OPS_JS,
    )
        .into_response()
}

async fn search_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SEARCH_JS,
    )
        .into_response()
}

async fn timing_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        TIMING_JS,
    )
        .into_response()
}

async fn app_css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], APP_CSS).into_response()
}

/// No request waits on Redis without limit (fred would wait for its reconnect).
async fn bounded(State(shared): State<AppState>, request: Request, next: Next) -> Response {
    let limit = shared.options.request_timeout;
    let changes = request.method() == Method::POST;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let error = if changes {
                format!("Redis did not answer within {limit:?}: the change may or may not have been made; reload to see")
            } else {
                format!("Redis did not answer within {limit:?}")
            };
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "error": error })),
            )
                .into_response()
        }
    }
}

/// Everything is same-origin and nothing is framed: a page of ours cannot be loaded in
/// someone else's frame, nor run a script from elsewhere.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let fixed = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::Error;

    #[test]
    fn only_loopback_may_go_without_a_token() {
        let open = DashboardOptions::default();
        let guarded = DashboardOptions::default().token("t0ken");
        let lan: SocketAddr = "192.0.2.7:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        for loopback in ["127.0.0.1:8080", "[::1]:8080"] {
            assert!(open.check_address(loopback.parse().unwrap()).is_ok());
        }
        for addr in [lan, any] {
            let error = open.check_address(addr).unwrap_err();
            assert!(matches!(error, Error::TokenRequired { .. }), "{error}");
            assert!(guarded.check_address(addr).is_ok());
        }
        assert!(matches!(
            DashboardOptions::default()
                .token("bad token")
                .check_address(lan),
            Err(Error::InvalidToken(_))
        ));
    }
}
