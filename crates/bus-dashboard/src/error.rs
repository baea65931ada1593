//! The error type of bus-dashboard.

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong serving the dashboard or the queue metrics.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A management call failed (Redis, an invalid queue name, a script's reply): every
    /// read of Redis goes through management.
    #[error(transparent)]
    Management(#[from] bus_management::Error),
    /// The dashboard was asked to listen on an address other than loopback without an
    /// access token: anyone who reaches the port could requeue and delete messages.
    #[error(
        "the dashboard listens on {addr}, which is not a loopback address: set an access \
         token (or listen on 127.0.0.1)"
    )]
    TokenRequired {
        /// The address it was to listen on.
        addr: std::net::SocketAddr,
    },
    /// An access token that cannot work (empty, or characters a cookie cannot carry).
    #[error("invalid access token: {0}")]
    InvalidToken(&'static str),
    /// Redis did not answer in time (unreachable, or reconnecting).
    #[error("Redis did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// Listening or serving failed.
    #[error("the HTTP server failed: {0}")]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_server_says_why_once() {
        let cause = std::io::Error::new(std::io::ErrorKind::AddrInUse, "address in use");
        let error = Error::from(cause);
        for (how, text) in [
            ("{}", error.to_string()),
            ("ErrorChain", bus_core::ErrorChain(&error).to_string()),
        ] {
            assert_eq!(
                text, "the HTTP server failed: address in use",
                "{how} hides or repeats the cause"
            );
        }
    }
}
