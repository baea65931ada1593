//! A relay beside a host, sharing its shutdown.

use std::future::Future;

use bus_core::Host;
use tokio_util::sync::CancellationToken;

use crate::{Relay, Result};

/// Runs a [`Relay`] beside a [`Host`], as the host runs its recurring schedules: the
/// relay starts when the host has started and stops with it.
///
/// ```no_run
/// # async fn demo(host: bus_core::Host, pool: sqlx::PgPool) -> Result<(), bus_outbox::Error> {
/// use bus_outbox::{HostExt, Relay, RelayConfig};
/// let relay = Relay::new(pool, host.bus().transport().clone(), RelayConfig::default());
/// host.run_with_relay(relay, bus_core::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
pub trait HostExt {
    /// [`Host::run`] with `relay` running beside it until `shutdown` completes; then
    /// the relay finishes its cycle and the host shuts down gracefully.
    fn run_with_relay(
        self,
        relay: Relay,
        shutdown: impl Future<Output = ()> + Send,
    ) -> impl Future<Output = Result<()>> + Send;
}

impl HostExt for Host {
    async fn run_with_relay(
        self,
        relay: Relay,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<()> {
        let running = self.start().await?;
        let stop = CancellationToken::new();
        let relaying = tokio::spawn({
            let stop = stop.clone();
            async move { relay.run_until(stop).await }
        });
        shutdown.await;
        stop.cancel();
        let relayed = match relaying.await {
            Ok(result) => result,
            Err(panicked) => {
                tracing::error!(error = %panicked, "the outbox relay's task failed");
                Ok(())
            }
        };
        running.shutdown().await?;
        relayed
    }
}
