//! [`Management::search`] and [`act`](Management::act): find ready, delayed and dead
//! messages in bounded pages and act on every match; [`edit_and_requeue`](Management::edit_and_requeue):
//! edit a dead letter and retry it ([`bus_redis::admin`]'s `search`, `act` and `edit`).
//! An operator acts on matches through `Action::ActOnMatches` (`ops`), which audits it.

use bus_core::transport::Source;
use bus_core::Headers;
use bus_redis::admin::{Acted, ActedPage, Action, EditRecord, Edited, SearchPage, SearchQuery};

use crate::{Management, Result};

impl Management {
    /// One page of a search (at most `limit` elements read) from `cursor` (`None`: the
    /// start); pass the page's `next` back for the next one. See
    /// [`bus_redis::admin::Admin::search`].
    pub async fn search(
        &self,
        source: &Source,
        query: &SearchQuery,
        cursor: Option<&str>,
        limit: u64,
    ) -> Result<SearchPage> {
        self.ensure_exists(source).await?;
        Ok(self.admin().search(source, query, cursor, limit).await?)
    }

    /// One page searched and its matches acted on, each only if still where it was found.
    pub async fn act(
        &self,
        source: &Source,
        query: &SearchQuery,
        cursor: Option<&str>,
        limit: u64,
        action: &Action,
    ) -> Result<ActedPage> {
        self.ensure_exists(source).await?;
        if let Action::Move(target) = action {
            self.ensure_exists(target).await?;
        }
        Ok(self
            .admin()
            .act(source, query, cursor, limit, action)
            .await?)
    }

    /// Every page acted on, from the start; `progress` sees each page.
    pub async fn act_all(
        &self,
        source: &Source,
        query: &SearchQuery,
        limit: u64,
        action: &Action,
        progress: impl FnMut(&ActedPage),
    ) -> Result<Acted> {
        self.ensure_exists(source).await?;
        if let Action::Move(target) = action {
            self.ensure_exists(target).await?;
        }
        Ok(self
            .admin()
            .act_all(source, query, limit, action, progress)
            .await?)
    }

    /// Edits dead letter `id`'s headers and JSON body and requeues it in one script, the
    /// original kept in the queue's edit history.
    pub async fn edit_and_requeue(
        &self,
        source: &Source,
        id: &str,
        headers: Headers,
        json_body: &str,
        who: &str,
    ) -> Result<Edited> {
        Ok(self
            .admin()
            .edit_and_requeue(source, id, headers, json_body, who)
            .await?)
    }

    /// The newest `count` edits of a queue, newest first.
    pub async fn edits(&self, source: &Source, count: u64) -> Result<Vec<EditRecord>> {
        Ok(self.admin().edits(source, count).await?)
    }
}
