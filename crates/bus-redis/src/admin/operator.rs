//! The native layout behind bus-core's [`Operator`]: queues named `queue`, subscriptions
//! `topic/subscription`, as the `bus` tool names them; every method is one of
//! [`Admin`]'s, so the guarantees are those documented there.

use async_trait::async_trait;
use bus_core::operator::{Capability, Operator, Purged, ReadyMessage, Requeued, Selection};
use bus_core::records::{source_name, DeadLetter, QueueStats};
use bus_core::transport::Source;

use super::Admin;

/// The kind name of the bus's own queues.
pub const KIND: &str = "bus";

/// `queue`, or `topic/subscription`, read as a [`Source`].
pub fn parse_name(name: &str) -> bus_core::Result<Source> {
    match name.split_once('/') {
        None => Source::queue(name),
        Some((topic, subscription)) => Source::subscription(topic, subscription),
    }
}

#[async_trait]
impl Operator for Admin {
    fn kind(&self) -> &'static str {
        KIND
    }

    /// Everything.
    fn supports(&self, _: Capability) -> bool {
        true
    }

    async fn queues(&self) -> bus_core::Result<Vec<String>> {
        Ok(self.sources().await?.iter().map(source_name).collect())
    }

    async fn exists(&self, queue: &str) -> bus_core::Result<bool> {
        Ok(Admin::exists(self, &parse_name(queue)?).await?)
    }

    async fn stats(&self, queue: &str) -> bus_core::Result<QueueStats> {
        Ok(Admin::stats(self, &parse_name(queue)?).await?)
    }

    async fn peek(&self, queue: &str, n: u64) -> bus_core::Result<Vec<ReadyMessage>> {
        Ok(Admin::peek(self, &parse_name(queue)?, n).await?)
    }

    async fn dead_letters(&self, queue: &str, n: u64) -> bus_core::Result<Vec<DeadLetter>> {
        Ok(Admin::dead_letters(self, &parse_name(queue)?, n).await?)
    }

    async fn requeue(
        &self,
        queue: &str,
        selection: &Selection,
        to: Option<&str>,
    ) -> bus_core::Result<Requeued> {
        let to = to.map(parse_name).transpose()?;
        Ok(Admin::requeue(self, &parse_name(queue)?, selection, to.as_ref()).await?)
    }

    async fn delete_dead_letter(&self, queue: &str, id: &str) -> bus_core::Result<bool> {
        Ok(Admin::delete_dead_letter(self, &parse_name(queue)?, id).await?)
    }

    async fn purge(&self, queue: &str) -> bus_core::Result<Purged> {
        Ok(Admin::purge(self, &parse_name(queue)?).await?)
    }

    async fn pause(&self, queue: &str) -> bus_core::Result<()> {
        Ok(Admin::pause(self, &parse_name(queue)?).await?)
    }

    async fn resume(&self, queue: &str) -> bus_core::Result<()> {
        Ok(Admin::resume(self, &parse_name(queue)?).await?)
    }

    async fn close_breaker(&self, queue: &str) -> bus_core::Result<()> {
        Ok(Admin::close_breaker(self, &parse_name(queue)?).await?)
    }
}
