//! Edit and retry a dead letter: its headers and JSON body replaced,
//! the edited envelope requeued and the dead letter removed in one script
//! (`lua/admin_edit_requeue.lua`); the original, its errors and who edited it are kept in
//! the queue's capped `edited` stream ([`QueueKeys::edited`]), read back by
//! [`Admin::edits`]. docs/operations.md ("Edit and retry").

use bus_core::defaults;
use bus_core::records::{ErrorRecord, MessageSummary};
use bus_core::transport::Source;
use bus_core::{Envelope, Format, Headers};
use bytes::Bytes;
use fred::prelude::{ClientLike, HashesInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use serde::Serialize;

use super::partitions::locate;
use super::records::parse_errors;
use super::Admin;
use crate::keys::QueueKeys;
use crate::scripts;
use crate::{Error, Result};

/// Edits kept per queue (about: `XADD MAXLEN ~`).
pub const EDITS_KEPT: u64 = 1_000;

/// What an edit did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
#[non_exhaustive]
pub enum Edited {
    /// The edited message is on the ready list; the original is in the edit history.
    Requeued {
        /// Its message id (unchanged by the edit).
        message_id: String,
    },
    /// No dead letter of the queue has that id (any more): requeued or deleted
    /// meanwhile, or a wrong id. Nothing changed.
    NotFound,
}

/// One entry of a queue's edit history.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct EditRecord {
    /// The stream entry's id.
    pub id: String,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// The dead letter's storage id.
    pub storage_id: String,
    /// Who edited it.
    pub who: String,
    /// The original envelope, decoded (`None` if it does not decode).
    pub original: Option<MessageSummary>,
    /// The edited envelope, decoded.
    pub edited: Option<MessageSummary>,
    /// The original's error history.
    pub errors: Vec<ErrorRecord>,
}

impl Admin {
    /// Replaces the headers and the JSON body of dead letter `id` (as
    /// [`Admin::dead_letters`] shows it) and requeues it: one script removes the dead
    /// letter, appends the original to the queue's edit history and pushes the edited
    /// envelope onto the ready list as a fresh message (same message id and type, a new
    /// delivery count). Refused, with nothing changed, for a body that is not JSON, a
    /// MessagePack envelope, or an edited envelope over 1 MiB.
    pub async fn edit_and_requeue(
        &self,
        source: &Source,
        id: &str,
        headers: Headers,
        json_body: &str,
        who: &str,
    ) -> Result<Edited> {
        let body: Box<serde_json::value::RawValue> = serde_json::from_str(json_body)
            .map_err(|e| Error::InvalidRequest(format!("the edited body is not JSON: {e}")))?;
        let shards = self.shards(source).await?;
        let Some((shard, own)) = locate(&shards, id) else {
            return Ok(Edited::NotFound);
        };
        let keys = &shards[shard].keys;
        let original: Option<Bytes> = self.client().hget(&keys.msgs, &own).await?;
        let Some(original) = original else {
            return Ok(Edited::NotFound);
        };
        let mut envelope = Envelope::decode(&original).map_err(|e| {
            Error::InvalidRequest(format!(
                "dead letter {id} does not decode, so it cannot be edited: {e}"
            ))
        })?;
        if envelope.format != Format::Json {
            return Err(Error::InvalidRequest(format!(
                "dead letter {id} is a MessagePack envelope: only JSON envelopes can be edited"
            )));
        }
        envelope.headers = headers;
        envelope.body = Bytes::copy_from_slice(body.get().as_bytes());
        let edited = envelope.encode()?;
        if edited.len() > defaults::MAX_MESSAGE_SIZE {
            return Err(Error::InvalidRequest(format!(
                "the edited message is {} bytes, over the limit of {}",
                edited.len(),
                defaults::MAX_MESSAGE_SIZE
            )));
        }
        let done = scripts::ADMIN_EDIT_REQUEUE
            .run_int(
                self.client(),
                edit_keys(keys),
                vec![
                    Value::from(own),
                    Value::Bytes(edited.into()),
                    Value::from(who),
                    Value::from(EDITS_KEPT as i64),
                ],
            )
            .await?;
        Ok(match done {
            1 => Edited::Requeued {
                message_id: envelope.id.to_string(),
            },
            _ => Edited::NotFound,
        })
    }

    /// The newest `count` edits of a queue (over all its shards), newest first.
    pub async fn edits(&self, source: &Source, count: u64) -> Result<Vec<EditRecord>> {
        let mut out = Vec::new();
        for shard in self.shards(source).await? {
            let args: Vec<Value> = vec![
                shard.keys.edited().into(),
                "+".into(),
                "-".into(),
                "COUNT".into(),
                count.max(1).to_string().into(),
            ];
            let command = CustomCommand::new_static("XREVRANGE", ClusterHash::FirstKey, false);
            let reply: Value = self.client().custom(command, args).await?;
            if let Value::Array(items) = reply {
                out.extend(items.into_iter().filter_map(|item| {
                    let mut record = edit_record(item)?;
                    record.storage_id = shard.shown_id(&record.storage_id);
                    Some(record)
                }));
            }
        }
        out.sort_by_key(|record| std::cmp::Reverse(record.at_ms));
        out.truncate(usize::try_from(count).unwrap_or(usize::MAX));
        Ok(out)
    }
}

fn edit_keys(keys: &QueueKeys) -> Vec<String> {
    vec![
        keys.dead.clone(),
        keys.msgs.clone(),
        keys.dead_info.clone(),
        keys.errors.clone(),
        keys.deliveries.clone(),
        keys.ready.clone(),
        keys.edited(),
        keys.flow.clone(),
        keys.kof.clone(),
        keys.kbusy.clone(),
        keys.kheads.clone(),
        keys.kq.clone(),
    ]
}

/// One `[id, [field, value, ...]]` of the stream; `None` for another shape.
fn edit_record(item: Value) -> Option<EditRecord> {
    let Value::Array(mut parts) = item else {
        return None;
    };
    let Value::Array(fields) = parts.pop()? else {
        return None;
    };
    let id = parts.pop()?.as_string()?;
    let at_ms = id.split('-').next()?.parse().ok()?;
    let mut record = EditRecord {
        id,
        at_ms,
        storage_id: String::new(),
        who: String::new(),
        original: None,
        edited: None,
        errors: Vec::new(),
    };
    for pair in fields.chunks(2) {
        let [field, value] = pair else { continue };
        let (Some(field), Some(value)) = (field.as_string(), value.as_bytes()) else {
            continue;
        };
        match field.as_str() {
            "id" => record.storage_id = String::from_utf8_lossy(value).into_owned(),
            "who" => record.who = String::from_utf8_lossy(value).into_owned(),
            "original" => record.original = MessageSummary::decode(value).ok(),
            "edited" => record.edited = MessageSummary::decode(value).ok(),
            "errors" => record.errors = parse_errors(value),
            _ => {}
        }
    }
    Some(record)
}
