//! Who may use the dashboard: the access token (when set), the Host check (when not),
//! and the CSRF token every state change carries.

use axum::extract::{Form, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Json;
use rand::RngCore;
use serde::Deserialize;
use serde_json::json;

use super::AppState;

/// The cookie the login page sets.
const COOKIE: &str = "bus_dashboard_token";
/// The header every POST carries.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// The access token (if any) and this process's CSRF token.
pub(crate) struct Guard {
    token: Option<String>,
    csrf: String,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard { .. }")
    }
}

impl Guard {
    pub(crate) fn new(token: Option<String>) -> Self {
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        let csrf = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Guard { token, csrf }
    }

    pub(crate) fn csrf(&self) -> &str {
        &self.csrf
    }

    fn token_ok(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='));
        bearer
            .into_iter()
            .chain(cookie)
            .any(|given| same(given.as_bytes(), token.as_bytes()))
    }
}

/// Constant-time comparison, so the response time tells nothing about a token's prefix.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Without a token the dashboard is for this machine only: a request must name a
/// loopback host, so a web page whose DNS name was re-pointed at 127.0.0.1 (DNS
/// rebinding) cannot read it or take its CSRF token.
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn refuse(status: StatusCode, message: &str, api: bool) -> Response {
    if api {
        (status, Json(json!({ "error": message }))).into_response()
    } else {
        (status, message.to_owned()).into_response()
    }
}

/// The middleware in front of every route but the login page.
pub(crate) async fn guard(
    State(shared): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let path = request.uri().path();
    let api = path.starts_with("/api/");
    let guard = &shared.guard;
    if guard.token.is_none() && !loopback_host(headers) {
        return refuse(
            StatusCode::FORBIDDEN,
            "this dashboard has no access token and answers only to a loopback host name",
            api,
        );
    }
    if !guard.token_ok(headers) {
        if request.method() == Method::GET && !api && path != "/metrics" {
            return Redirect::to("/login").into_response();
        }
        return refuse(
            StatusCode::UNAUTHORIZED,
            "a valid access token is required",
            api,
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let csrf = headers.get(CSRF_HEADER).map(HeaderValue::as_bytes);
        if !csrf.is_some_and(|given| same(given, guard.csrf.as_bytes())) {
            return refuse(
                StatusCode::FORBIDDEN,
                "missing or wrong CSRF token: reload the page",
                api,
            );
        }
    }
    next.run(request).await
}

const LOGIN: &str = include_str!("../../assets/login.html");

pub(crate) async fn login_page(State(shared): State<AppState>) -> Response {
    if shared.guard.token.is_none() {
        return Redirect::to("/").into_response();
    }
    Html(LOGIN.replace("{{MESSAGE}}", "")).into_response()
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

pub(crate) async fn login(State(shared): State<AppState>, Form(form): Form<LoginForm>) -> Response {
    let Some(token) = &shared.guard.token else {
        return Redirect::to("/").into_response();
    };
    if !same(form.token.as_bytes(), token.as_bytes()) {
        let page = LOGIN.replace(
            "{{MESSAGE}}",
            r#"<p class="login-error">That token is not right.</p>"#,
        );
        return (StatusCode::UNAUTHORIZED, Html(page)).into_response();
    }
    // The token was checked to be cookie-safe at start.
    let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
    let mut response = Redirect::to("/").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_loopback_host_names_pass_without_a_token() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:1",
            "LOCALHOST",
            "[::1]:80",
            "127.1.2.3",
        ] {
            assert!(loopback_host(&host(ok)), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "10.0.0.1:80",
            "[::2]:80",
            "localhost.evil:80",
        ] {
            assert!(!loopback_host(&host(bad)), "{bad}");
        }
        assert!(!loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn tokens_come_as_bearer_or_cookie() {
        let guard = Guard::new(Some("t0k".into()));
        let mut headers = HeaderMap::new();
        assert!(!guard.token_ok(&headers));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; bus_dashboard_token=t0k"),
        );
        assert!(guard.token_ok(&headers));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("bus_dashboard_token=t0"),
        );
        assert!(!guard.token_ok(&headers));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer t0k"),
        );
        assert!(guard.token_ok(&headers));
        assert_eq!(guard.csrf().len(), 64);
        assert!(Guard::new(None).token_ok(&HeaderMap::new()));
    }
}
