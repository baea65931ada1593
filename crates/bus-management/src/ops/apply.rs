//! [`Fleet::apply`]: an [`Action`] carried out. Each arm resolves the address to its kind's
//! operator, checks that the kind can do it (before anything is written), checks that the
//! queue exists where a typo would otherwise go unnoticed, makes the one call that does
//! the change, and returns what it did; the audit entry is appended once, after, from
//! that outcome alone (`outcome.rs`).

use bus_core::operator::{unsupported, Capability};
use bus_core::transport::Source;
use bus_redis::admin::{ActedPage, Action as SearchAction};

use super::{Action, Actor, Audited, Done, OnMatches, Outcome, Pages};
use crate::{parse_source, Error, Fleet, Result};

impl Fleet {
    /// Carries out `action` for `actor` and appends its audit entry (who, through what,
    /// what, on what, how many) once, after the change. A change that fails or is refused
    /// records nothing, and neither does a miss (nothing waited under the id, no such
    /// saga) or a send ([`Done`] says which outcomes are recorded). A failed append does
    /// not undo the change: it is in [`Outcome::audited`].
    ///
    /// ```no_run
    /// use bus_management::{Action, Actor, Fleet};
    ///
    /// # async fn demo(fleet: Fleet) -> bus_management::Result<()> {
    /// let by = Actor::new(bus_management::os_user(), "my-tool");
    /// let outcome = fleet.apply(Action::Pause { queue: "orders".into() }, &by).await?;
    /// println!("{}", outcome.lines().join("\n"));
    /// # Ok(()) }
    /// ```
    pub async fn apply(&self, action: Action, actor: &Actor) -> Result<Outcome> {
        self.apply_watched(action, actor, |_| {}).await
    }

    /// [`Fleet::apply`], with `progress` called after each page of an action over a
    /// search's pages ([`Pages::All`]), for a face that shows how far it got.
    pub async fn apply_watched(
        &self,
        action: Action,
        actor: &Actor,
        progress: impl FnMut(&ActedPage) + Send,
    ) -> Result<Outcome> {
        let done = self.run(action, actor, progress).await?;
        let audited = match done.entry(actor) {
            None => Audited::Nothing,
            Some(entry) => match self.management().audit(&entry).await {
                Ok(id) => Audited::Recorded(id),
                Err(error) => Audited::Failed(error),
            },
        };
        Ok(Outcome { done, audited })
    }

    async fn run(
        &self,
        action: Action,
        actor: &Actor,
        progress: impl FnMut(&ActedPage) + Send,
    ) -> Result<Done> {
        match action {
            Action::Requeue {
                queue,
                selection,
                to,
            } => self.requeue_dead(queue, selection, to).await,
            Action::DeleteDead { queue, ids } => self.delete_dead(queue, ids).await,
            Action::Purge { queue } => {
                self.target(&queue, Capability::Purge).await?;
                let purged = self.purge(&queue).await?;
                Ok(Done::Purged { queue, purged })
            }
            Action::Pause { queue } => self.set_paused(queue, true).await,
            Action::Resume { queue } => self.set_paused(queue, false).await,
            Action::CloseBreaker { queue } => {
                self.target(&queue, Capability::CloseBreaker).await?;
                self.close_breaker(&queue).await?;
                Ok(Done::BreakerClosed { queue })
            }
            Action::Cancel { queue, id } => self.cancel_delayed(queue, id).await,
            Action::Send {
                queue,
                message_type,
                body,
                headers,
            } => self.send_one(queue, message_type, body, headers).await,
            Action::Unsubscribe { topic, name, force } => {
                self.unsubscribe(topic, name, force).await
            }
            Action::DeleteSaga { partition, id } => self.delete_saga(partition, id).await,
            Action::Edit {
                queue,
                id,
                headers,
                body,
            } => self.edit_dead(queue, id, headers, body, actor).await,
            Action::ActOnMatches {
                queue,
                query,
                criteria,
                act,
                pages,
            } => {
                let matches = Matches {
                    queue,
                    query,
                    criteria,
                    act,
                };
                self.act_on_matches(matches, pages, progress).await
            }
            Action::Redrive {
                layout,
                queue,
                to,
                reason,
                max,
                dry_run,
            } => {
                let options = redrive_options(to, reason, max, dry_run);
                self.redrive(layout, queue, options, dry_run).await
            }
        }
    }

    /// Resolves `address` to its kind, refuses what the kind cannot do (before anything
    /// is written), and fails unless the queue exists: a typo is an error that says
    /// what does exist, not a change that finds nothing (or, for a pause, leaves a
    /// `flow` hash behind for a queue nobody consumes).
    async fn target(&self, address: &str, capability: Capability) -> Result<()> {
        let (operator, _) = self.resolve(address)?;
        if !operator.supports(capability) {
            return Err(unsupported(operator.kind(), capability).into());
        }
        self.ensure_exists(address).await
    }

    /// The bus's own queue or subscription `address` names, for a change only the bus's
    /// own layout has (`action`); another kind's queue is refused.
    fn native(&self, address: &str, action: &'static str) -> Result<Source> {
        let (operator, at) = self.resolve(address)?;
        if !at.is_native() {
            return Err(Error::NativeOnly {
                action,
                address: at.to_string(),
                kind: operator.kind(),
            });
        }
        parse_source(at.name())
    }

    /// A plain JSON message, which only the bus's own queues take.
    async fn send_one(
        &self,
        queue: String,
        message_type: Option<String>,
        body: String,
        headers: bus_core::Headers,
    ) -> Result<Done> {
        let source = self.native(&queue, "send")?;
        let id = self
            .management()
            .send(&source, message_type.as_deref(), &body, headers)
            .await?;
        Ok(Done::Sent { queue, id })
    }

    async fn unsubscribe(&self, topic: String, name: String, force: bool) -> Result<Done> {
        let removed = self
            .management()
            .remove_subscription(&topic, &name, force)
            .await?;
        Ok(Done::Unsubscribed {
            topic,
            subscription: name,
            forced: force,
            removed,
        })
    }

    async fn delete_saga(&self, partition: String, id: String) -> Result<Done> {
        let existed = self.management().delete_saga(&partition, &id).await?;
        Ok(Done::SagaDeleted {
            partition,
            id,
            existed,
        })
    }

    async fn requeue_dead(
        &self,
        queue: String,
        selection: super::Selection,
        to: Option<String>,
    ) -> Result<Done> {
        let elsewhere = to
            .as_deref()
            .is_some_and(|to| crate::Address::parse(to) != crate::Address::parse(&queue));
        let capability = if elsewhere {
            Capability::RequeueElsewhere
        } else {
            Capability::Requeue
        };
        self.target(&queue, capability).await?;
        if let Some(to) = &to {
            // A name of the bus's own must be valid; a new one is fine (a send creates a
            // queue).
            self.native_source(to)?;
        }
        let report = self.requeue(&queue, &selection, to.as_deref()).await?;
        Ok(Done::Requeued {
            all: selection == super::Selection::All,
            queue,
            report,
        })
    }

    async fn delete_dead(&self, queue: String, ids: Vec<String>) -> Result<Done> {
        self.target(&queue, Capability::DeleteDeadLetter).await?;
        let (mut deleted, mut not_found) = (Vec::new(), Vec::new());
        for id in ids {
            if self.delete_dead_letter(&queue, &id).await? {
                deleted.push(id);
            } else {
                not_found.push(id);
            }
        }
        Ok(Done::Deleted {
            queue,
            deleted,
            not_found,
        })
    }

    async fn redrive(
        &self,
        layout: bus_babelqueue::Layout,
        queue: String,
        options: bus_babelqueue::RedriveOptions,
        dry_run: bool,
    ) -> Result<Done> {
        let kind = match layout {
            bus_babelqueue::Layout::Laravel { .. } => bus_babelqueue::LARAVEL_KIND,
            _ => bus_babelqueue::LEGACY_KIND,
        };
        let client = self.management().admin().transport().client().clone();
        // The layout's own admin: a Laravel layout's key prefix comes with it.
        let babel = bus_babelqueue::Admin::new(client).layout(layout.clone());
        let report = babel.admin().redrive(&layout, &queue, &options).await?;
        Ok(Done::Redriven {
            target: format!("{kind}:{queue}"),
            queue,
            dry_run,
            report,
        })
    }

    async fn cancel_delayed(&self, queue: String, id: String) -> Result<Done> {
        // No existence check: once its last delayed message is cancelled a queue may
        // hold no key, and cancelling again is a miss, not a typo.
        let source = self.native(&queue, "cancel")?;
        let cancelled = self.management().cancel(&source, &id).await?;
        Ok(Done::Cancelled {
            queue,
            id,
            cancelled,
        })
    }

    async fn edit_dead(
        &self,
        queue: String,
        id: String,
        headers: bus_core::Headers,
        body: String,
        actor: &Actor,
    ) -> Result<Done> {
        let source = self.native(&queue, "edit")?;
        let edited = self
            .management()
            .edit_and_requeue(&source, &id, headers, &body, actor.who())
            .await?;
        Ok(Done::Edited { queue, id, edited })
    }

    async fn set_paused(&self, queue: String, paused: bool) -> Result<Done> {
        if paused {
            self.target(&queue, Capability::Pause).await?;
            self.pause(&queue).await?;
        } else {
            self.target(&queue, Capability::Resume).await?;
            self.resume(&queue).await?;
        }
        Ok(Done::Paused { queue, paused })
    }

    async fn act_on_matches(
        &self,
        matches: Matches,
        pages: Pages,
        progress: impl FnMut(&ActedPage) + Send,
    ) -> Result<Done> {
        let Matches {
            queue,
            query,
            criteria,
            act,
        } = matches;
        let source = self.native(&queue, "search")?;
        let what = match &act {
            OnMatches::Requeue => SearchAction::Requeue,
            OnMatches::Delete => SearchAction::Delete,
            OnMatches::MoveTo(to) => SearchAction::Move(self.native(to, "search")?),
        };
        let management = self.management();
        Ok(match pages {
            Pages::One { cursor, limit } => {
                let page = management
                    .act(&source, &query, cursor.as_deref(), limit, &what)
                    .await?;
                Done::ActedOnPage {
                    queue,
                    act,
                    criteria,
                    page,
                }
            }
            Pages::All { limit } => {
                let acted = management
                    .act_all(&source, &query, limit, &what, progress)
                    .await?;
                Done::ActedOnAll {
                    queue,
                    act,
                    criteria,
                    acted,
                }
            }
        })
    }
}

/// What [`Action::Redrive`] asks for, as BabelQueue's redrive takes it.
fn redrive_options(
    to: Option<String>,
    reason: Option<String>,
    max: Option<usize>,
    dry_run: bool,
) -> bus_babelqueue::RedriveOptions {
    let mut options = bus_babelqueue::RedriveOptions::new().dry_run(dry_run);
    if let Some(to) = to {
        options = options.to(to);
    }
    if let Some(reason) = reason {
        options = options.reason(reason);
    }
    if let Some(max) = max {
        options = options.max(max);
    }
    options
}

/// The search part of [`Action::ActOnMatches`].
struct Matches {
    queue: String,
    query: bus_redis::admin::SearchQuery,
    criteria: String,
    act: OnMatches,
}
