//! Why a command failed, printed as one sentence: a connection failure names the address
//! tried and says what happened in words, never as Rust `Debug` output.

use std::process::ExitCode;

use fred::error::ErrorKind;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Management(#[from] bus_management::Error),
    #[error(transparent)]
    Babel(#[from] bus_babelqueue::Error),
    #[error("cannot connect to Redis at {url}: {reason}")]
    Connect {
        /// The URL, its password masked.
        url: String,
        /// What went wrong, in words.
        reason: String,
    },
    /// The operator did not confirm, or something asked for is not there.
    #[error("{0}")]
    Refused(String),
    #[error("cannot read standard input: {0}")]
    Stdin(#[from] std::io::Error),
    #[error("cannot print JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot write to standard output: {0}")]
    Stdout(#[source] std::io::Error),
    #[error(transparent)]
    Dashboard(#[from] bus_dashboard::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl From<bus_redis::Error> for Failure {
    fn from(error: bus_redis::Error) -> Self {
        Failure::Management(error.into())
    }
}

/// Prints the error and its causes to stderr, each cause once.
pub fn fail(error: &Failure) -> ExitCode {
    // Whoever reads the output closed it (`bus dead Q | head`): they have what they
    // wanted, so end quietly, as `cat` would.
    if let Failure::Stdout(e) = error {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return ExitCode::SUCCESS;
        }
    }
    eprintln!("bus: error: {}", bus_core::ErrorChain(error));
    ExitCode::FAILURE
}

/// Why connecting failed, in words. `url` is the URL tried and `with_ca` whether a CA was
/// given, for a hint about TLS.
pub fn connect_reason(error: &bus_management::Error, url: &str, with_ca: bool) -> String {
    // `Redis` is transparent: its `source()` skips the bus-redis error that holds fred's.
    let start: &(dyn std::error::Error + 'static) = match error {
        bus_management::Error::Redis(inner) => inner,
        other => other,
    };
    let mut reason = match fred_error(start) {
        Some(fred) => match fred.kind() {
            ErrorKind::IO => io_reason(fred.details(), url),
            ErrorKind::Auth => format!(
                "Redis refused the credentials (check the user and password): {}",
                fred.details()
            ),
            ErrorKind::Timeout if url.starts_with("rediss") => {
                "no answer in time (if that port speaks plain Redis, use redis://)".to_owned()
            }
            ErrorKind::Timeout => "no answer in time".to_owned(),
            _ => fred.details().to_owned(),
        },
        None => error.to_string(),
    };
    let config_error = matches!(
        error,
        bus_management::Error::Redis(bus_redis::Error::Config(_))
    );
    if url.starts_with("rediss") && !with_ca && config_error {
        reason.push_str(" (with this tool: --tls-ca FILE)");
    }
    reason
}

/// The Redis client's error in `error`'s chain, if any.
fn fred_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e fred::error::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        // Every crate of the bus reports fred's errors inside bus-redis's `RedisError`.
        if let Some(redis) = e.downcast_ref::<bus_redis::RedisError>() {
            return Some(redis.fred());
        }
        next = e.source();
    }
    None
}

/// An I/O failure in words. The Redis client keeps an I/O error only as its `Debug` text
/// (`Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }`, `Custom {
/// kind: .., error: ".." }`), so the kind and message are read back from it.
fn io_reason(details: &str, url: &str) -> String {
    let kind = after(details, "kind: ").map(|rest| {
        rest.split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or_default()
    });
    let message = quoted(details, "message: \"").or_else(|| quoted(details, "error: \""));
    match kind {
        Some("ConnectionRefused") => {
            "the connection was refused (is Redis running and listening on that address?)"
                .to_owned()
        }
        Some("ConnectionReset" | "ConnectionAborted" | "UnexpectedEof") => {
            let mut text = "the server closed the connection".to_owned();
            if !url.starts_with("rediss") {
                text.push_str(" (if that port speaks TLS, use rediss://)");
            }
            text
        }
        Some("TimedOut") => "no answer in time (a firewall, or the wrong address?)".to_owned(),
        _ => match message {
            Some(message) => lowercase_first(&message),
            None => details.to_owned(),
        },
    }
}

fn after<'t>(text: &'t str, marker: &str) -> Option<&'t str> {
    text.find(marker).map(|i| &text[i + marker.len()..])
}

/// The text of a `"..."` that follows `marker` (with `\"` kept as `"`).
fn quoted(text: &str, marker: &str) -> Option<String> {
    let rest = after(text, marker)?;
    let mut out = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The URL with its password (if any) masked.
pub fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    match url.rfind('@') {
        Some(at) if at > start => match url[start..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..start], &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{io_reason, redact};

    #[test]
    fn passwords_are_masked() {
        assert_eq!(redact("redis://u:p@h:1/2"), "redis://u:***@h:1/2");
        assert_eq!(redact("redis://:p@h"), "redis://:***@h");
        assert_eq!(redact("redis://u@h"), "redis://u@h");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("nonsense"), "nonsense");
    }

    #[test]
    fn io_failures_read_as_sentences() {
        let refused = r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#;
        assert!(io_reason(refused, "redis://h").starts_with("the connection was refused"));
        let reset =
            r#"Os { code: 104, kind: ConnectionReset, message: "Connection reset by peer" }"#;
        assert!(io_reason(reset, "redis://h").contains("use rediss://"));
        assert!(!io_reason(reset, "rediss://h").contains("use rediss://"));
        let dns = r#"Custom { kind: Uncategorized, error: "failed to lookup address information: Name or service not known" }"#;
        assert_eq!(
            io_reason(dns, "redis://h"),
            "failed to lookup address information: Name or service not known"
        );
        let other = r#"Os { code: 13, kind: PermissionDenied, message: "Permission denied" }"#;
        assert_eq!(io_reason(other, "redis://h"), "permission denied");
        assert_eq!(io_reason("something else", "redis://h"), "something else");
    }
}
