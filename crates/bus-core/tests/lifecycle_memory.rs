//! A message's life on the in-memory transport: the hook before a dead letter, expiry,
//! deduplication at send, delayed messages by id, recurring messages.

use std::sync::Arc;

use async_trait::async_trait;
use bus_conformance::{self as conformance, Probe, SeenDeadLetter};
use bus_core::transport::Source;
use bus_core::MemoryTransport;

struct Memory(MemoryTransport);

#[async_trait]
impl Probe for Memory {
    async fn dead_letters(&self, source: &Source) -> Vec<SeenDeadLetter> {
        self.0.dead_letters(source).iter().map(Into::into).collect()
    }
    async fn counts(&self, source: &Source) -> [usize; 4] {
        let stats = self.0.stats(source);
        [
            stats.ready,
            stats.in_flight,
            stats.delayed,
            stats.dead_letters,
        ]
        .map(|n| n as usize)
    }
}

macro_rules! with_probe {
    ($($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let transport = MemoryTransport::new();
            conformance::$check(Arc::new(transport.clone()), &Memory(transport)).await;
        }
    )*};
}
with_probe!(
    the_hook_before_a_dead_letter_sees_why_and_never_stops_it,
    expired_messages_are_dead_lettered_unhandled,
    expired_messages_can_be_dropped,
    a_dedup_key_stores_one_message_per_window,
    a_batch_with_dedup_keys_stores_each_key_once,
    delayed_commands_can_be_read_cancelled_and_rescheduled,
    a_delayed_publish_reaches_each_subscription_at_its_time,
    a_tick_is_stored_once_and_only_when_newer
);

macro_rules! on_memory {
    ($($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            conformance::$check(Arc::new(MemoryTransport::new())).await;
        }
    )*};
}
on_memory!(
    three_hosts_with_skewed_clocks_send_each_tick_once,
    missed_ticks_are_skipped_or_caught_up_once
);
