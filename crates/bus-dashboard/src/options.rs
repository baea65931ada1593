//! [`DashboardOptions`]: how the dashboard samples, refreshes and guards itself.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::{Error, Result};

/// How the dashboard runs. Build from [`DashboardOptions::default`] with the by-value
/// setters.
///
/// ```
/// use std::time::Duration;
/// let options = bus_dashboard::DashboardOptions::default()
///     .token("s3cret-token")
///     .sample_interval(Duration::from_secs(5))
///     .saga_prefix("shop");
/// assert!(format!("{options:?}").contains("token: Some(\"<redacted>\")"));
/// ```
#[derive(Clone)]
pub struct DashboardOptions {
    pub(crate) token: Option<String>,
    pub(crate) sample_interval: Duration,
    pub(crate) history: Duration,
    pub(crate) refresh_interval: Duration,
    pub(crate) saga_prefix: Option<String>,
    pub(crate) page_size: u64,
    pub(crate) request_timeout: Duration,
    pub(crate) read_only: bool,
    pub(crate) operator: Option<String>,
}

impl Default for DashboardOptions {
    fn default() -> Self {
        DashboardOptions {
            token: None,
            sample_interval: Duration::from_secs(10),
            history: Duration::from_secs(3600),
            refresh_interval: Duration::from_secs(2),
            saga_prefix: None,
            page_size: 100,
            request_timeout: Duration::from_secs(10),
            read_only: false,
            operator: None,
        }
    }
}

impl DashboardOptions {
    /// The access token: every request must carry it (`Authorization: Bearer <token>`, or
    /// the cookie the login page sets). Required to listen on anything but loopback.
    /// Letters, digits and `-._~` only (it travels in a cookie).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// How often the server samples every queue for the plots (10 s by default).
    pub fn sample_interval(mut self, interval: Duration) -> Self {
        self.sample_interval = interval.max(Duration::from_millis(100));
        self
    }

    /// How far back the plots reach (one hour by default); the samples kept are this
    /// divided by the sample interval.
    pub fn history(mut self, span: Duration) -> Self {
        self.history = span;
        self
    }

    /// How often an open page refreshes its numbers (2 s by default).
    pub fn refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh_interval = interval.max(Duration::from_millis(200));
        self
    }

    /// The saga store's key prefix: by default the transport's key prefix, as
    /// `RedisSagaStore::for_transport` writes them (docs/sagas.md, "Key prefix").
    pub fn saga_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.saga_prefix = Some(prefix.into());
        self
    }

    /// How many messages a queue page and a dead-letter page read at most (100 by
    /// default; dead letters are grouped over at most ten times this).
    pub fn page_size(mut self, n: u64) -> Self {
        self.page_size = n.clamp(1, 10_000);
        self
    }

    /// How long a page's request may wait for Redis before it fails with 503 (10 s by
    /// default). A requeue or delete that times out may still complete: the page says so.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Read-only mode (off by default): every state change is refused with 403 and the
    /// pages show no buttons that change anything (`bus dashboard --read-only`).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Who the audit log records for this dashboard's changes (by default the
    /// operating-system user running it), beside the browser's address.
    pub fn operator(mut self, name: impl Into<String>) -> Self {
        self.operator = Some(name.into());
        self
    }

    /// Whether the dashboard may listen on `addr`: an error for a non-loopback address
    /// without a token, or an invalid token. [`Dashboard::serve`](crate::Dashboard::serve)
    /// checks it too; check before binding to refuse without ever opening the port.
    pub fn check_address(&self, addr: SocketAddr) -> Result<()> {
        if self.checked_token()?.is_none() && !addr.ip().is_loopback() {
            return Err(Error::TokenRequired { addr });
        }
        Ok(())
    }

    pub(crate) fn checked_token(&self) -> Result<Option<&str>> {
        let Some(token) = self.token.as_deref() else {
            return Ok(None);
        };
        if token.is_empty() {
            return Err(Error::InvalidToken("it is empty"));
        }
        let cookie_safe = |c: char| c.is_ascii_alphanumeric() || "-._~".contains(c);
        if !token.chars().all(cookie_safe) {
            return Err(Error::InvalidToken(
                "use letters, digits and -._~ only (it travels in a cookie)",
            ));
        }
        Ok(Some(token))
    }
}

impl fmt::Debug for DashboardOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DashboardOptions")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("sample_interval", &self.sample_interval)
            .field("history", &self.history)
            .field("refresh_interval", &self.refresh_interval)
            .field("saga_prefix", &self.saga_prefix)
            .field("page_size", &self.page_size)
            .field("request_timeout", &self.request_timeout)
            .field("read_only", &self.read_only)
            .field("operator", &self.operator)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked() {
        let options = DashboardOptions::default();
        assert_eq!(options.checked_token().unwrap(), None);
        assert!(options.clone().token("").checked_token().is_err());
        assert!(options.clone().token("a b").checked_token().is_err());
        assert!(options.clone().token("a;b").checked_token().is_err());
        assert_eq!(
            options.token("Abc-1.2_3~").checked_token().unwrap(),
            Some("Abc-1.2_3~")
        );
    }
}
