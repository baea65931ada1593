//! The inbox: a handler's database writes and its message's mark commit together.

use std::collections::BTreeSet;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::Source;
use bus_core::{Context, Message, Middleware, Next, ProcessError};
use sqlx::{PgPool, Postgres, Transaction};
use tokio::sync::{Mutex, OwnedMappedMutexGuard, OwnedMutexGuard};

use crate::{Error, Result};

type Slot = Arc<Mutex<Option<Transaction<'static, Postgres>>>>;

tokio::task_local! {
    // The handler runs inside the layer's future (bus-core's `Next`), so a task-local
    // hands it the transaction without a hook in bus-core's `Context`.
    static TRANSACTION: Slot;
}

const RECORD: &str =
    "INSERT INTO bus_inbox (source, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";

/// Middleware that runs each handler in a PostgreSQL transaction of its own, recorded in
/// the inbox, and commits it when the handler succeeds, before the message is
/// acknowledged. The handler writes in it through [`InboxExt::transaction`].
///
/// For each message (of the covered types, see [`InboxLayer::message`]):
///
/// 1. a transaction begins and inserts `(source, message id)` into `bus_inbox`;
/// 2. if that row is already there (committed by an earlier delivery), the transaction
///    is rolled back and the message acknowledged without running the handler; if an
///    earlier delivery still runs (its lock was lost), the insert waits for it and then
///    skips or runs accordingly;
/// 3. otherwise the handler runs; on `Ok` the transaction commits, then the host acks;
///    on `Err` (or a failed commit) it rolls back and the message is retried as usual.
///
/// What this guarantees: the handler's writes through [`InboxExt::transaction`] commit
/// at most once per message and source, and exactly once if the message is ever handled
/// successfully, whatever crashes (a crash after the commit and before the ack
/// redelivers the message, which is then acknowledged without a run). Everything else a
/// handler does (calls to other services, writes through other connections, messages
/// sent on the bus directly) happens at least once, as without the inbox; mark such
/// steps with [`Context::once`] (which has its own window) or write follow-up messages
/// with the [`Outbox`](crate::Outbox) into the same transaction. The mark is kept until
/// [`prune_inbox`] removes it: a redelivery after that runs the handler again.
///
/// Give the layer a pool of its own (not a clone of the application's): the host runs
/// handlers and their middleware on threads of their own, with a runtime of their own,
/// and the connections the layer opens there belong to that runtime and end with the
/// host, so a pool shared with the rest of the application would hand it dead
/// connections once the host has stopped.
#[derive(Debug, Clone)]
pub struct InboxLayer {
    pool: PgPool,
    /// The message types covered; empty: all.
    types: BTreeSet<&'static str>,
}

impl InboxLayer {
    /// An inbox in `pool`'s database (tables from [`Outbox::migrate`](crate::Outbox::migrate)),
    /// covering every message the host handles.
    pub fn new(pool: PgPool) -> Self {
        InboxLayer {
            pool,
            types: BTreeSet::new(),
        }
    }

    /// Covers message type `M`; once any type is named, only the named ones are covered
    /// (the others run without a transaction).
    pub fn message<M: Message>(mut self) -> Self {
        self.types.insert(M::TYPE);
        self
    }

    fn covers(&self, ctx: &Context) -> bool {
        self.types.is_empty() || self.types.contains(ctx.message_type())
    }
}

#[async_trait]
impl Middleware for InboxLayer {
    async fn handle(&self, ctx: &Context, next: Next<'_>) -> Result<(), ProcessError> {
        if !self.covers(ctx) {
            return next.run(ctx).await;
        }
        let mut tx = self.pool.begin().await.map_err(ProcessError::retry)?;
        let recorded = sqlx::query(RECORD)
            .bind(source_name(ctx.source()))
            .bind(ctx.message_id().as_str())
            .execute(&mut *tx)
            .await
            .map_err(ProcessError::retry)?;
        if recorded.rows_affected() == 0 {
            tracing::debug!(message_id = %ctx.message_id(),
                "inbox: the message was handled and committed before; acknowledged without running its handler");
            tx.rollback().await.map_err(ProcessError::retry)?;
            return Ok(());
        }
        let slot: Slot = Arc::new(Mutex::new(Some(tx)));
        let result = TRANSACTION.scope(Arc::clone(&slot), next.run(ctx)).await;
        // Waits for a guard the handler leaked into a task of its own to be dropped.
        let tx = slot.lock().await.take();
        match (result, tx) {
            (Ok(()), Some(tx)) => tx.commit().await.map_err(ProcessError::retry),
            (Ok(()), None) => Err(ProcessError::retry(
                "inbox: the handler's transaction was gone when it returned",
            )),
            // Dropping the transaction rolls it back.
            (Err(error), _) => Err(error),
        }
    }
}

/// The inbox's name of a source: `queue`, or `topic/subscription` (an event's copies
/// share the message id, one per subscription).
fn source_name(source: &Source) -> String {
    match source {
        Source::Queue(queue) => queue.clone(),
        Source::Subscription { topic, name } => format!("{topic}/{name}"),
    }
}

/// The transaction of the message being handled, locked for the holder: use it as a
/// `&mut sqlx::Transaction<'static, Postgres>` (or `&mut PgConnection`, e.g.
/// `query.execute(&mut **tx)`), and drop it before the handler returns.
pub struct InboxTransaction(
    OwnedMappedMutexGuard<Option<Transaction<'static, Postgres>>, Transaction<'static, Postgres>>,
);

impl std::fmt::Debug for InboxTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxTransaction").finish_non_exhaustive()
    }
}

impl Deref for InboxTransaction {
    type Target = Transaction<'static, Postgres>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for InboxTransaction {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// `ctx.transaction()` for handlers behind an [`InboxLayer`].
#[async_trait]
pub trait InboxExt {
    /// The transaction the inbox opened for this message: what is written in it commits
    /// with the message's inbox mark, once, when the handler returns `Ok`.
    /// [`Error::NoInbox`] outside an [`InboxLayer`] that covers the message.
    async fn transaction(&self) -> Result<InboxTransaction>;
}

#[async_trait]
impl InboxExt for Context {
    async fn transaction(&self) -> Result<InboxTransaction> {
        let slot = TRANSACTION
            .try_with(Arc::clone)
            .map_err(|_| Error::NoInbox)?;
        let guard: OwnedMutexGuard<_> = slot.lock_owned().await;
        OwnedMutexGuard::try_map(guard, Option::as_mut)
            .map(InboxTransaction)
            .map_err(|_| Error::NoInbox)
    }
}

/// Deletes inbox marks older than `keep` and returns how many: a redelivery of a message
/// whose mark is gone runs its handler again, so keep marks longer than any message can
/// wait for a redelivery (its retries and delays). Run it now and then (daily, say).
pub async fn prune_inbox(pool: &PgPool, keep: Duration) -> Result<u64> {
    let seconds = keep.as_secs_f64();
    let done = sqlx::query(
        "DELETE FROM bus_inbox WHERE handled_at < clock_timestamp() - make_interval(secs => $1)",
    )
    .bind(seconds)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
