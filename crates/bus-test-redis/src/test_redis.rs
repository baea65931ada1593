//! [`TestRedis`]: a Redis URL plus a unique key namespace for one test.

use crate::client::SyncClient;
use crate::error::HarnessError;
use crate::server::RedisServer;

/// Set this to use an existing server instead of starting one per test.
pub const URL_ENV: &str = "BUS_TEST_REDIS_URL";

/// What a test uses: a Redis URL plus a unique key namespace for that test.
///
/// Drop deletes the namespace's keys (SCAN + DEL, best effort) from a shared server;
/// a private server is simply killed.
#[derive(Debug)]
pub struct TestRedis {
    url: String,
    namespace: String,
    server: Option<RedisServer>,
}

impl TestRedis {
    /// If `BUS_TEST_REDIS_URL` is set (and not empty), uses that server (no process
    /// started); else starts a private [`RedisServer`] for this test.
    pub fn start() -> Result<TestRedis, HarnessError> {
        match std::env::var(URL_ENV) {
            Ok(url) if !url.trim().is_empty() => Self::with_url(url.trim()),
            _ => {
                let server = RedisServer::start()?;
                Ok(TestRedis {
                    url: server.url(),
                    namespace: new_namespace(),
                    server: Some(server),
                })
            }
        }
    }

    /// Uses an existing server (for example one [`RedisServer`] shared by several
    /// tests) with a fresh namespace. Fails unless the server answers PING.
    pub fn with_url(url: impl Into<String>) -> Result<TestRedis, HarnessError> {
        let url = url.into();
        let ping = SyncClient::connect(url.as_str()).and_then(|mut c| c.cmd(&["PING"]));
        match ping {
            Ok(reply) if reply.as_str() == Some("PONG") => Ok(TestRedis {
                url,
                namespace: new_namespace(),
                server: None,
            }),
            Ok(reply) => Err(HarnessError::io(
                format!("PING {url}"),
                std::io::Error::other(format!("unexpected reply {reply:?}")),
            )),
            Err(e) => Err(HarnessError::io(format!("connecting to {url}"), e)),
        }
    }

    /// The Redis URL, e.g. `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Unique per `TestRedis`: `"t-"` + a lowercase ULID. Prefix every key with it.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `"<namespace>:<name>"`, a key inside this test's namespace.
    pub fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.namespace)
    }

    /// The private server; `None` when using `BUS_TEST_REDIS_URL` or [`TestRedis::with_url`].
    pub fn server_mut(&mut self) -> Option<&mut RedisServer> {
        self.server.as_mut()
    }

    /// A new blocking connection to [`TestRedis::url`].
    ///
    /// # Panics
    /// If the server cannot be reached.
    pub fn client(&self) -> SyncClient {
        SyncClient::connect(self.url.as_str())
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url))
    }

    /// All keys of this namespace (`SCAN MATCH "<ns>*" COUNT 1000`, never `KEYS`), sorted.
    ///
    /// # Panics
    /// If the server cannot be reached or SCAN fails.
    pub fn keys(&self) -> Vec<String> {
        self.client()
            .scan_match(&self.pattern())
            .unwrap_or_else(|e| panic!("SCAN {} on {}: {e}", self.pattern(), self.url))
    }

    /// An integer reply of `args` ([`SyncClient::int`]): `LLEN`, `ZCARD`, `GET` of a
    /// counter (nil is 0).
    ///
    /// # Panics
    /// If the server cannot be reached or the reply is not an integer.
    pub fn int(&self, args: &[&str]) -> i64 {
        self.client()
            .int(args)
            .unwrap_or_else(|e| panic!("{args:?} on {}: {e}", self.url))
    }

    /// A key's size by its type ([`SyncClient::len`]); 0 when it is missing.
    ///
    /// # Panics
    /// If the server cannot be reached.
    pub fn len(&self, key: &str) -> i64 {
        self.client()
            .len(key)
            .unwrap_or_else(|e| panic!("the size of {key} on {}: {e}", self.url))
    }

    /// A list's elements ([`SyncClient::list`]).
    ///
    /// # Panics
    /// If the server cannot be reached or the key is not a list.
    pub fn list(&self, key: &str) -> Vec<Vec<u8>> {
        self.client()
            .list(key)
            .unwrap_or_else(|e| panic!("LRANGE {key} on {}: {e}", self.url))
    }

    fn pattern(&self) -> String {
        // A ULID is Crockford base32, so the namespace has no glob characters to escape.
        format!("{}*", self.namespace)
    }

    fn delete_namespace(&self) -> std::io::Result<()> {
        let mut client = SyncClient::connect(self.url.as_str())?;
        let keys = client.scan_match(&self.pattern())?;
        for batch in keys.chunks(500) {
            let mut args = vec!["DEL"];
            args.extend(batch.iter().map(String::as_str));
            client.cmd(&args)?;
        }
        Ok(())
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        // A private server dies with us (killed, dir removed): nothing to clean.
        if self.server.is_none() {
            let _ = self.delete_namespace();
        }
    }
}

fn new_namespace() -> String {
    format!("t-{}", ulid::Ulid::new().to_string().to_lowercase())
}
