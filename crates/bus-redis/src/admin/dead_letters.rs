//! Dead letters: read them, requeue them (to their queue or another), delete them.

use bus_core::records::{source_name, DeadLetter};
use std::collections::HashSet;

use bus_core::transport::Source;
use bytes::Bytes;
use fred::prelude::{HashesInterface, ListInterface};
use fred::types::Value;

pub use bus_core::operator::{Requeued, Selection};

use super::partitions::locate;
use super::records::{parse_errors, DeadInfo};
use super::{hash_tag, last_index, Admin};
use crate::keys::QueueKeys;
use crate::scripts::{self, LuaScript};
use crate::Result;

/// Dead letters handled per script call (or per copy step across slots).
const BATCH: usize = 100;

impl Admin {
    /// The first `n` dead letters of a queue, oldest first, with their reason, errors,
    /// delivery count and envelope.
    ///
    /// On a partitioned queue: over all its shards, oldest first by the time each was
    /// dead-lettered, storage ids prefixed with their shard (`1:~42`).
    pub async fn dead_letters(&self, source: &Source, n: u64) -> Result<Vec<DeadLetter>> {
        let shards = self.shards(source).await?;
        if let [only] = shards.as_slice() {
            return self.dead_letters_at(&only.keys, n).await;
        }
        let mut out = Vec::new();
        for shard in &shards {
            for mut dead in self.dead_letters_at(&shard.keys, n).await? {
                dead.storage_id = shard.shown_id(&dead.storage_id);
                out.push(dead);
            }
        }
        out.sort_by_key(|dead| dead.dead_lettered_at_ms);
        out.truncate(usize::try_from(n).unwrap_or(usize::MAX));
        for (position, dead) in out.iter_mut().enumerate() {
            dead.position = position as u64;
        }
        Ok(out)
    }

    async fn dead_letters_at(&self, keys: &QueueKeys, n: u64) -> Result<Vec<DeadLetter>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let client = self.client();
        // Everything is read as bytes: a foreign consumer may have written any bytes into
        // an error text or a reason, and one such letter must not hide the others.
        let ids: Vec<Bytes> = client.lrange(&keys.dead, 0, last_index(n)).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (envelopes, infos, errors, counts) = tokio::try_join!(
            client.hmget::<Vec<Option<Bytes>>, _, _>(&keys.msgs, ids.clone()),
            client.hmget::<Vec<Option<Bytes>>, _, _>(&keys.dead_info, ids.clone()),
            client.hmget::<Vec<Option<Bytes>>, _, _>(&keys.errors, ids.clone()),
            client.hmget::<Vec<Option<u64>>, _, _>(&keys.deliveries, ids.clone()),
        )?;
        let counts = counts.into_iter().map(Option::unwrap_or_default);
        let mut out = Vec::with_capacity(ids.len());
        for (position, (((id, envelope), info), (errors, delivery_count))) in ids
            .into_iter()
            .zip(envelopes)
            .zip(infos)
            .zip(errors.into_iter().zip(counts))
            .enumerate()
        {
            let info = info.as_deref().map(DeadInfo::parse);
            out.push(DeadLetter::new(
                position as u64,
                String::from_utf8_lossy(&id),
                envelope,
                info.as_ref().and_then(|i| i.reason.clone()),
                info.and_then(|i| i.at_ms),
                delivery_count,
                errors.as_deref().map(parse_errors).unwrap_or_default(),
            ));
        }
        Ok(out)
    }

    /// Requeues dead letters: to the back of their own queue's ready list (`to` `None` or
    /// the source itself), or to another queue or subscription.
    ///
    /// * **Same queue**: one atomic script per batch (`lua/admin_requeue.lua`). The message keeps
    ///   its storage id, envelope and error history; its dead-letter info and delivery count
    ///   are removed, so it gets its full delivery limit again.
    /// * **Another queue in the same slot** (another subscription of the same topic): one
    ///   atomic script per batch (`lua/admin_move.lua`) appends the envelope to the target's ready
    ///   list as a fresh element and deletes it from the source.
    /// * **Another queue in another slot**: Redis Cluster allows no script across slots,
    ///   so it is two steps per batch: the envelopes are appended to the target's ready
    ///   list (`RPUSH`, fresh elements: the target's consumer gives them new storage ids),
    ///   then deleted from the source's dead letters by a script that deletes only those
    ///   still there. A crash between the steps leaves a message in both queues, never in
    ///   neither; see [`Requeued::duplicated`].
    ///
    /// Picking ids out of the dead list (`LREM`) is linear in its length: fine for
    /// management, where lists are drained, not kept long.
    pub async fn requeue(
        &self,
        source: &Source,
        selection: &Selection,
        to: Option<&Source>,
    ) -> Result<Requeued> {
        let target = to.unwrap_or(source);
        let mut report = Requeued::default();
        report.target = source_name(target);
        // A partitioned queue's shards each on their own; its ids name their shard.
        let from = self.shards(source).await?;
        let to = if target == source {
            None
        } else {
            Some(self.shards(target).await?)
        };
        let mut parts: Vec<Option<Selection>> = vec![None; from.len()];
        match selection {
            Selection::All => parts.fill(Some(Selection::All)),
            Selection::Ids(ids) => {
                for id in ids {
                    match locate(&from, id) {
                        Some((shard, own)) => match &mut parts[shard] {
                            Some(Selection::Ids(own_ids)) => own_ids.push(own),
                            part => *part = Some(Selection::Ids(vec![own])),
                        },
                        None => report.not_found.push(id.clone()),
                    }
                }
            }
        }
        for (index, (shard, part)) in from.iter().zip(parts).enumerate() {
            let Some(part) = part else { continue };
            let mut done = Requeued::default();
            let from_keys = &shard.keys;
            match &to {
                None => {
                    let keys = vec![
                        from_keys.dead.clone(),
                        from_keys.msgs.clone(),
                        from_keys.dead_info.clone(),
                        from_keys.deliveries.clone(),
                        from_keys.ready.clone(),
                    ];
                    self.run_taking(
                        &scripts::ADMIN_REQUEUE,
                        &from_keys.dead,
                        keys,
                        &part,
                        &mut done,
                    )
                    .await?;
                }
                // Shard i of the source goes to shard i mod N of a partitioned target.
                Some(targets) => {
                    let target_shard = &targets[index % targets.len()];
                    let same_slot = hash_tag(target) == hash_tag(source)
                        && shard.index.is_none()
                        && target_shard.index.is_none();
                    if same_slot {
                        let keys = vec![
                            from_keys.dead.clone(),
                            from_keys.msgs.clone(),
                            from_keys.dead_info.clone(),
                            from_keys.errors.clone(),
                            from_keys.deliveries.clone(),
                            target_shard.keys.ready.clone(),
                            from_keys.kof.clone(),
                            from_keys.kbusy.clone(),
                            from_keys.kheads.clone(),
                            from_keys.kq.clone(),
                            from_keys.ready.clone(),
                        ];
                        self.run_taking(
                            &scripts::ADMIN_MOVE,
                            &from_keys.dead,
                            keys,
                            &part,
                            &mut done,
                        )
                        .await?;
                    } else {
                        self.copy_across_slots(from_keys, &target_shard.keys, &part, &mut done)
                            .await?;
                    }
                }
            }
            let shown =
                |ids: Vec<String>| ids.iter().map(|id| shard.shown_id(id)).collect::<Vec<_>>();
            report.requeued.extend(shown(done.requeued));
            report.not_found.extend(shown(done.not_found));
            report.skipped.extend(shown(done.skipped));
            report.duplicated.extend(shown(done.duplicated));
        }
        Ok(report)
    }

    /// Deletes one dead letter: its id leaves the dead list and its envelope, dead-letter
    /// info, errors and delivery count are deleted, in one atomic script. Returns whether
    /// it was a dead letter of the queue. A letter with an attachment leaves its envelope
    /// in the queue's attachment orphans list ([`QueueKeys::attachment_orphans`]), whose
    /// attachment an attachment-aware host then deletes.
    pub async fn delete_dead_letter(&self, source: &Source, id: &str) -> Result<bool> {
        let shards = self.shards(source).await?;
        let Some((shard, own)) = locate(&shards, id) else {
            return Ok(false);
        };
        let deleted = self
            .delete_dead(&shards[shard].keys, vec![own], Deleted::Gone)
            .await?;
        Ok(!deleted.is_empty())
    }

    /// Pops up to `max` envelopes from each attachment orphans list under the prefix
    /// ([`QueueKeys::attachment_orphans`], found with `SCAN`): the deleted dead letters
    /// whose attachments are to be deleted. Popped means taken: an envelope whose
    /// attachment is then not deleted leaves it to its expiry.
    pub async fn take_attachment_orphans(&self, max: usize) -> Result<Vec<Bytes>> {
        let pattern = format!(
            "{}:{{*:att-orphans",
            crate::keys::escape_glob(self.key_prefix())
        );
        let mut taken = Vec::new();
        for list in super::discovery::scan(self.client(), &pattern).await? {
            let popped: Vec<Bytes> = self.client().lpop(&list, Some(max.max(1))).await?;
            taken.extend(popped);
        }
        Ok(taken)
    }

    /// Runs `admin_delete_dead.lua` on `ids`; returns those deleted.
    pub(super) async fn delete_dead(
        &self,
        keys: &QueueKeys,
        ids: Vec<String>,
        deleted: Deleted,
    ) -> Result<Vec<String>> {
        let script = &scripts::ADMIN_DELETE_DEAD;
        let mut script_keys = vec![
            keys.dead.clone(),
            keys.msgs.clone(),
            keys.dead_info.clone(),
            keys.errors.clone(),
            keys.deliveries.clone(),
            keys.kof.clone(),
            keys.kbusy.clone(),
            keys.kheads.clone(),
            keys.kq.clone(),
            keys.ready.clone(),
        ];
        if deleted == Deleted::Gone {
            script_keys.push(keys.attachment_orphans());
        }
        let reply = script
            .call(
                self.client(),
                script_keys,
                ids.into_iter().map(Value::from).collect(),
            )
            .await?;
        script.strings(reply)
    }

    /// Runs a script built on `take_dead` (`lua/admin_common.lua`) over the selection, in
    /// batches.
    async fn run_taking(
        &self,
        script: &LuaScript,
        dead: &str,
        keys: Vec<String>,
        selection: &Selection,
        report: &mut Requeued,
    ) -> Result<()> {
        let call = |args: Vec<Value>| {
            let keys = keys.clone();
            async move {
                let reply = script.run_array(self.client(), keys, args).await?;
                let Ok([taken, skipped]) = <[Value; 2]>::try_from(reply.clone()) else {
                    return Err(script.unexpected(&Value::Array(reply)));
                };
                Ok((script.strings(taken)?, script.strings(skipped)?))
            }
        };
        match selection {
            Selection::All => {
                // At most what was there at the start: a message that dies again at once
                // must not keep the loop going.
                let mut left: u64 = self.client().llen(dead).await?;
                while left > 0 {
                    let max = left.min(BATCH as u64) as i64;
                    let (taken, skipped) = call(vec![Value::from("all"), Value::from(max)]).await?;
                    if taken.is_empty() && skipped.is_empty() {
                        break;
                    }
                    left = left.saturating_sub((taken.len() + skipped.len()) as u64);
                    report.requeued.extend(taken);
                    push_unique(&mut report.skipped, skipped);
                }
            }
            Selection::Ids(ids) => {
                for chunk in unique(ids).chunks(BATCH) {
                    let mut args = vec![Value::from("ids")];
                    args.extend(chunk.iter().map(|id| Value::from(id.as_str())));
                    let (taken, skipped) = call(args).await?;
                    let done: HashSet<&String> = taken.iter().chain(&skipped).collect();
                    report
                        .not_found
                        .extend(chunk.iter().filter(|id| !done.contains(id)).cloned());
                    report.requeued.extend(taken);
                    report.skipped.extend(skipped);
                }
            }
        }
        Ok(())
    }

    /// Requeue to a queue in another slot: copy, then delete what is still dead.
    async fn copy_across_slots(
        &self,
        from: &QueueKeys,
        to: &QueueKeys,
        selection: &Selection,
        report: &mut Requeued,
    ) -> Result<()> {
        let client = self.client();
        match selection {
            Selection::All => {
                let mut left: u64 = client.llen(&from.dead).await?;
                // Dead letters without an envelope stay at the head: read past them.
                let mut offset: i64 = 0;
                while left > 0 {
                    let count = left.min(BATCH as u64) as i64;
                    let ids: Vec<String> = client
                        .lrange(&from.dead, offset, offset + count - 1)
                        .await?;
                    if ids.is_empty() {
                        break;
                    }
                    left = left.saturating_sub(ids.len() as u64);
                    let envelopes: Vec<Option<Bytes>> =
                        client.hmget(&from.msgs, ids.clone()).await?;
                    let (found, missing) = split_found(ids, envelopes);
                    offset += missing.len() as i64;
                    push_unique(&mut report.skipped, missing);
                    self.copy_then_delete(from, to, found, report).await?;
                }
            }
            Selection::Ids(ids) => {
                let script = &scripts::ADMIN_DEAD_ENVELOPES;
                for chunk in unique(ids).chunks(BATCH) {
                    let reply = script
                        .run_array(
                            client,
                            vec![from.dead.clone(), from.msgs.clone()],
                            chunk.iter().map(|id| Value::from(id.as_str())).collect(),
                        )
                        .await?;
                    let envelopes = reply
                        .into_iter()
                        .map(|v| script.bytes(v))
                        .collect::<Result<Vec<_>>>()?;
                    let (found, missing) = split_found(chunk.to_vec(), envelopes);
                    report.not_found.extend(missing);
                    self.copy_then_delete(from, to, found, report).await?;
                }
            }
        }
        Ok(())
    }

    async fn copy_then_delete(
        &self,
        from: &QueueKeys,
        to: &QueueKeys,
        found: Vec<(String, Bytes)>,
        report: &mut Requeued,
    ) -> Result<()> {
        if found.is_empty() {
            return Ok(());
        }
        let (ids, envelopes): (Vec<String>, Vec<Value>) = found
            .into_iter()
            .map(|(id, envelope)| (id, Value::Bytes(envelope)))
            .unzip();
        // Step 1: the copies, all or none (one command).
        let _: i64 = self.client().rpush(&to.ready, envelopes).await?;
        // Step 2: delete the originals that are still dead letters.
        let deleted: HashSet<String> = self
            .delete_dead(from, ids.clone(), Deleted::Moved)
            .await?
            .into_iter()
            .collect();
        for id in ids {
            if deleted.contains(&id) {
                report.requeued.push(id);
            } else {
                report.duplicated.push(id);
            }
        }
        Ok(())
    }
}

/// What becomes of the messages [`Admin::delete_dead`] deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deleted {
    /// Gone for good: their attachments are orphans.
    Gone,
    /// Moved to another queue (the copy across slots): they keep their attachments.
    Moved,
}

fn unique(ids: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    ids.iter().filter(|id| seen.insert(*id)).cloned().collect()
}

fn push_unique(into: &mut Vec<String>, more: Vec<String>) {
    for id in more {
        if !into.contains(&id) {
            into.push(id);
        }
    }
}

/// Splits ids into those with an envelope and those without.
fn split_found(
    ids: Vec<String>,
    envelopes: Vec<Option<Bytes>>,
) -> (Vec<(String, Bytes)>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (id, envelope) in ids.into_iter().zip(envelopes) {
        match envelope {
            Some(envelope) => found.push((id, envelope)),
            None => missing.push(id),
        }
    }
    (found, missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_keeps_the_first_of_each() {
        let ids: Vec<String> = ["a", "b", "a", "c", "b"].map(String::from).to_vec();
        assert_eq!(unique(&ids), ["a", "b", "c"]);
    }
}
