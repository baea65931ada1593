//! Bounded waiting: a test waits for what it expects, up to a deadline, never for a fixed
//! time, so it passes on a loaded machine and fails (rather than hangs) when the thing
//! never happens.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `condition` every few milliseconds until it holds or `limit` passes; returns
/// whether it held.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    eventually_async(limit, || std::future::ready(condition())).await
}

/// [`eventually`] for a condition that needs to await (a Redis query, say).
pub async fn eventually_async<F, Fut>(limit: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
