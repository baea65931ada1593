//! Finding BabelQueue queues in a database: one bounded `SCAN`, key names classified by
//! the rule in `docs/babelqueue.md` ("Management"), then `TYPE` of each candidate.

use std::collections::{BTreeMap, BTreeSet};

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::admin::{into_array, Admin};
use crate::keys::{validate_queue, Layout};
use crate::{Error, Result};

/// A queue found by [`Admin::queues`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FoundQueue {
    /// Its layout.
    pub layout: Layout,
    /// The bare queue name.
    pub queue: String,
    /// The keys of it that exist (what it was found by).
    pub keys: Vec<String>,
}

/// What a key name says about a queue: `(layout is Laravel, queue, expected type)`.
/// Legacy ready lists are never recognised by name (any list could be one).
pub(crate) fn classify(key: &str, laravel_prefix: &str) -> Option<(bool, String, &'static str)> {
    let named = |rest: &str, suffix: &str| {
        rest.strip_suffix(suffix)
            .filter(|q| validate_queue(q).is_ok())
            .map(str::to_owned)
    };
    if let Some(rest) = key
        .strip_prefix(laravel_prefix)
        .filter(|_| !laravel_prefix.is_empty())
    {
        for (suffix, kind) in [
            (".dlq:notify", "list"),
            (".dlq", "list"),
            (":reserved", "zset"),
            (":delayed", "zset"),
            (":notify", "list"),
        ] {
            if let Some(queue) = named(rest, suffix) {
                return Some((true, queue, kind));
            }
        }
        return validate_queue(rest)
            .is_ok()
            .then(|| (true, rest.to_owned(), "list"));
    }
    for (suffix, kind) in [
        (":processing:deadlines", "zset"),
        (":processing", "list"),
        (".dlq", "list"),
    ] {
        if let Some(queue) = named(key, suffix) {
            return Some((false, queue, kind));
        }
    }
    None
}

impl Admin {
    /// Every BabelQueue queue found in the database, sorted by layout and name. One full
    /// `SCAN` (bounded `COUNT`, never `KEYS`), then `TYPE` of each candidate key. A legacy
    /// queue is found through a companion key (`Q:processing`, `Q:processing:deadlines`,
    /// `Q.dlq`): a legacy queue with only ready messages is a plain list that no name tells
    /// apart from other lists, so it is not listed (name it to count or peek it). A Laravel
    /// queue is any list or set under the prefix.
    pub async fn queues(&self) -> Result<Vec<FoundQueue>> {
        let mut candidates: BTreeMap<String, (bool, String, &'static str)> = BTreeMap::new();
        let mut cursor = "0".to_owned();
        loop {
            let cmd = CustomCommand::new_static("SCAN", ClusterHash::Random, false);
            let args = vec![
                Value::from(cursor.as_str()),
                Value::from("COUNT"),
                Value::from(i64::from(self.scan_count)),
            ];
            let reply: Value = self.client.custom(cmd, args).await?;
            let (next, keys) = scan_reply(reply)?;
            for key in keys {
                if let Some(found) = classify(&key, &self.laravel_prefix) {
                    candidates.insert(key, found);
                }
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
        let names: Vec<&String> = candidates.keys().collect();
        let types = self.types(&names).await?;
        let mut queues: BTreeMap<(bool, String), BTreeSet<String>> = BTreeMap::new();
        for ((key, (laravel, queue, kind)), found) in candidates.iter().zip(types) {
            if found == *kind {
                queues
                    .entry((*laravel, queue.clone()))
                    .or_default()
                    .insert(key.clone());
            }
        }
        Ok(queues
            .into_iter()
            .map(|((laravel, queue), keys)| FoundQueue {
                layout: if laravel {
                    Layout::Laravel {
                        prefix: self.laravel_prefix.clone(),
                    }
                } else {
                    Layout::Legacy
                },
                queue,
                keys: keys.into_iter().collect(),
            })
            .collect())
    }
}

/// `[cursor, [key, ...]]`.
fn scan_reply(reply: Value) -> Result<(String, Vec<String>)> {
    let bad = |detail: String| {
        Error::from(bus_redis::Error::Protocol {
            script: "SCAN",
            detail,
        })
    };
    let Value::Array(mut parts) = reply else {
        return Err(bad(format!("{reply:?}")));
    };
    if parts.len() != 2 {
        return Err(bad(format!("{parts:?}")));
    }
    let keys = parts.pop().map(into_array).unwrap_or_default();
    let cursor = parts
        .pop()
        .and_then(|c| c.as_string())
        .ok_or_else(|| bad("no cursor".into()))?;
    let keys = keys
        .into_iter()
        // Key names that are not UTF-8 are no BabelQueue queue's (names are text).
        .filter_map(|k| {
            k.into_bytes()
                .and_then(|b| String::from_utf8(b.to_vec()).ok())
        })
        .collect();
    Ok((cursor, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_classify() {
        let c = |k: &str| classify(k, "queues:");
        assert_eq!(
            c("orders:processing"),
            Some((false, "orders".into(), "list"))
        );
        assert_eq!(
            c("orders:processing:deadlines"),
            Some((false, "orders".into(), "zset"))
        );
        assert_eq!(c("a.b.dlq"), Some((false, "a.b".into(), "list")));
        assert_eq!(c("orders"), None);
        assert_eq!(c(".dlq"), None);
        assert_eq!(c("bus:{orders}:ready"), None);
        assert_eq!(c("queues:orders"), Some((true, "orders".into(), "list")));
        assert_eq!(
            c("queues:orders.dlq"),
            Some((true, "orders".into(), "list"))
        );
        assert_eq!(
            c("queues:orders.dlq:notify"),
            Some((true, "orders".into(), "list"))
        );
        assert_eq!(c("queues:o:reserved"), Some((true, "o".into(), "zset")));
        assert_eq!(c("queues:o:delayed"), Some((true, "o".into(), "zset")));
        assert_eq!(c("queues:o:notify"), Some((true, "o".into(), "list")));
        assert_eq!(c("queues:"), None);
        assert_eq!(classify("queues:o", ""), None);
    }
}
