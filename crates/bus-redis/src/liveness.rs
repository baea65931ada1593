//! Dead-link detection: a watchdog per client that replaces connections Redis no longer
//! answers on.
//!
//! fred's own check (`UnresponsiveConfig`) measures the time since the last *write*
//! without a reply, so a connection that keeps being written to (retries, renewals,
//! sends) is never found dead, and a blocked connection is never checked at all: on a
//! half-open link a busy consumer waited forever. The watchdog asks instead: it PINGs
//! every node the client is connected to, once per [`CHECK_EVERY`], and a PING without
//! a reply within the dead-link timeout makes fred close and reopen the client's
//! connections. Commands that were in flight are sent again on the new connection
//! (every script is safe under that; a send may be stored twice, which at-least-once
//! delivery already allows).

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::prelude::{ClientState, Options};
use fred::types::ConnectHandle;

/// How often the watchdog checks: with the dead-link timeout, what bounds detection.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Watches `client` until its connection task ends (the client quit).
pub(crate) fn watch(client: Client, connection: ConnectHandle, dead_after: Duration) {
    tokio::spawn(async move {
        tokio::pin!(connection);
        loop {
            tokio::select! {
                _ = &mut connection => return,
                () = tokio::time::sleep(CHECK_EVERY) => {}
            }
            // A client that is reconnecting is already being taken care of.
            if client.state() != ClientState::Connected {
                continue;
            }
            if let Some(dead) = unanswered_node(&client, dead_after).await {
                tracing::warn!(server = %dead, timeout = ?dead_after,
                    "Redis did not answer a PING in time: the connection is taken for dead and replaced");
                tokio::select! {
                    _ = &mut connection => return,
                    reconnected = client.force_reconnection() => if let Err(e) = reconnected {
                        tracing::warn!(error = %e, "reconnecting after a dead link failed; the reconnect policy keeps trying");
                    },
                }
            }
        }
    });
}

/// The first node (of a cluster: each node the client has a connection to) that leaves a
/// PING unanswered for `dead_after`.
async fn unanswered_node(client: &Client, dead_after: Duration) -> Option<String> {
    let options = Options {
        timeout: Some(dead_after),
        // A PING is not worth re-sending: the next check sends a new one.
        max_attempts: Some(1),
        ..Options::default()
    };
    if client.is_clustered() {
        for server in client.active_connections() {
            let on_node = Options {
                cluster_node: Some(server.clone()),
                ..options.clone()
            };
            if timed_out(client.with_options(&on_node).ping::<()>(None).await) {
                return Some(server.to_string());
            }
        }
        None
    } else {
        timed_out(client.with_options(&options).ping::<()>(None).await).then(|| {
            client
                .active_connections()
                .first()
                .map_or_else(|| "redis".to_owned(), ToString::to_string)
        })
    }
}

/// Only a missing reply counts: an error reply (a full Redis, a script running too long)
/// is an answer.
fn timed_out(reply: Result<(), fred::error::Error>) -> bool {
    matches!(reply, Err(e) if *e.kind() == fred::error::ErrorKind::Timeout)
}
