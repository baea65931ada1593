//! The one error type of the harness.

use std::io;

/// Why the harness could not give a test its Redis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// A Redis binary (`redis-server`, or `redis-cli` for clusters) could not be found.
    #[error(
        "redis-server is not installed: install Debian's package with \
         `apt-get install -y redis-server` (or set BUS_TEST_REDIS_URL); \
         could not run `{program}`"
    )]
    NotInstalled {
        /// The program that was not found.
        program: String,
    },

    /// An object storage server of the attachment tests (azurite, moto) is not installed.
    #[error("`{program}` is not installed: {install}")]
    ServerMissing {
        /// Where it was looked for.
        program: String,
        /// How to install it.
        install: String,
    },

    /// An I/O step of the harness failed (temp dir, spawn, connect, ...).
    #[error("{context}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// redis-server exited or did not answer PING before the deadline.
    #[error("{message}\n--- tail of redis-server output and log ---\n{log_tail}")]
    NotReady {
        /// What went wrong, with the port and deadline.
        message: String,
        /// The last lines of the server's stdout/stderr and `redis.log`.
        log_tail: String,
    },

    /// PostgreSQL (`initdb`, `postgres` or `psql`) failed or did not accept connections
    /// before the deadline.
    #[error("{message}\n--- tail of the PostgreSQL output ---\n{log_tail}")]
    PostgresNotReady {
        /// What went wrong, with the port and deadline.
        message: String,
        /// The last lines of the server's log, or the program's output.
        log_tail: String,
    },

    /// The local cluster could not be formed.
    #[error("redis cluster: {message}\n{detail}")]
    Cluster {
        /// What went wrong.
        message: String,
        /// Output of `redis-cli --cluster create` or the last `CLUSTER INFO`.
        detail: String,
    },
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }

    /// Maps a spawn failure: `NotFound` means the binary is missing from PATH.
    pub(crate) fn spawn(program: &str, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::NotFound {
            HarnessError::NotInstalled {
                program: program.to_owned(),
            }
        } else {
            HarnessError::io(format!("spawning `{program}`"), source)
        }
    }
}
