//! Finding the queues and topics that exist: the registry sets that consumers write at
//! start, merged with a `SCAN` of the key layout, so a queue is listed from its first send
//! even if no consumer ever started (the send path writes no registry).

use bus_core::transport::Source;
use fred::prelude::{Client, ClientLike, KeysInterface, SetsInterface};
use fred::types::scan::{ScanResult, Scanner};
use futures::{Stream, TryStreamExt};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use super::Admin;
use crate::keys::{self, QueueKeys};
use crate::Result;

/// Keys asked for per `SCAN` call: each call is short, so Redis keeps serving everyone
/// else while a large keyspace is walked.
const SCAN_COUNT: u32 = 1000;

/// A topic and the subscriptions registered for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Topic {
    /// The topic.
    pub topic: String,
    /// Its subscriptions, sorted.
    pub subscriptions: Vec<String>,
}

/// What exists under one prefix: queue names, and each topic's subscription names.
#[derive(Debug, Default)]
struct Inventory {
    queues: BTreeSet<String>,
    topics: BTreeMap<String, BTreeSet<String>>,
}

impl Inventory {
    /// Every queue and subscription, queues first, each group sorted.
    fn sources(&self) -> Vec<Source> {
        let queues = self.queues.iter().cloned().map(Source::Queue);
        let subscriptions = self.topics.iter().flat_map(|(topic, names)| {
            names.iter().map(|name| Source::Subscription {
                topic: topic.clone(),
                name: name.clone(),
            })
        });
        queues.chain(subscriptions).collect()
    }
}

impl Admin {
    /// The command queues, sorted: those consumers registered (`<prefix>:registry:queues`)
    /// and those whose keys exist (found with `SCAN`, never `KEYS`), so a queue is listed
    /// from its first send even if no consumer ever started.
    pub async fn queues(&self) -> Result<Vec<String>> {
        Ok(self.inventory().await?.queues.into_iter().collect())
    }

    /// The topics, each with its subscriptions, sorted: those consumers registered (the
    /// registry and each topic's `subs` set) and those whose keys exist.
    pub async fn topics(&self) -> Result<Vec<Topic>> {
        Ok(self
            .inventory()
            .await?
            .topics
            .into_iter()
            .map(|(topic, names)| Topic {
                topic,
                subscriptions: names.into_iter().collect(),
            })
            .collect())
    }

    /// Every queue and subscription, in the order `queues` then `topics` list them.
    pub async fn sources(&self) -> Result<Vec<Source>> {
        Ok(self.inventory().await?.sources())
    }

    /// The registry sets merged with the queues and topics whose keys exist.
    async fn inventory(&self) -> Result<Inventory> {
        let client = self.client();
        let prefix = self.key_prefix();
        let pattern = keys::discovery_pattern(Some(prefix));
        let (registered_queues, registered_topics, found) = tokio::try_join!(
            client.smembers::<Vec<String>, _>(keys::queue_registry(prefix)),
            client.smembers::<Vec<String>, _>(keys::topic_registry(prefix)),
            scan(client, &pattern),
        )?;
        let mut inventory = Inventory::default();
        inventory.queues.extend(registered_queues);
        for topic in registered_topics {
            inventory.topics.entry(topic).or_default();
        }
        for key in &found {
            match keys::source_of_key(key) {
                Some((p, Source::Queue(queue))) if p == prefix => {
                    inventory.queues.insert(queue);
                }
                Some((p, Source::Subscription { topic, name })) if p == prefix => {
                    inventory.topics.entry(topic).or_default().insert(name);
                }
                _ => {
                    if let Some((p, topic)) = keys::topic_of_key(key) {
                        if p == prefix {
                            inventory.topics.entry(topic).or_default();
                        }
                    } else if let Some((p, queue, _)) = keys::shard_of_key(key) {
                        // A shard of a partitioned queue: listed as its queue.
                        if p == prefix {
                            inventory.queues.insert(queue);
                        }
                    }
                }
            }
        }
        for (topic, names) in inventory.topics.iter_mut() {
            let registered: Vec<String> =
                client.smembers(keys::subscriptions(prefix, topic)).await?;
            names.extend(registered);
        }
        Ok(inventory)
    }

    /// Whether a consumer registered the queue (or the subscription) or one of its keys
    /// exists. One command.
    pub async fn exists(&self, source: &Source) -> Result<bool> {
        let client = self.client();
        let queue_keys: QueueKeys = self.keys(source);
        let key_list: Vec<String> = queue_keys.all().iter().map(|k| k.to_string()).collect();
        let (registered, existing) = match source {
            Source::Queue(queue) => tokio::try_join!(
                client.sismember::<bool, _, _>(keys::queue_registry(self.key_prefix()), queue),
                client.exists::<u64, _>(key_list),
            )?,
            Source::Subscription { topic, name } => tokio::try_join!(
                client.sismember::<bool, _, _>(keys::subscriptions(self.key_prefix(), topic), name),
                client.exists::<u64, _>(key_list),
            )?,
        };
        // A partitioned queue's consumers record it (its keys are its shards').
        Ok(registered || existing > 0 || self.partitions(source).await? > 1)
    }

    /// The other key prefixes under which this Redis holds queues or topics of the bus,
    /// sorted: what a wrong `--prefix` probably meant. One `SCAN` of the keyspace.
    pub async fn other_prefixes(&self) -> Result<Vec<String>> {
        let found = scan(self.client(), &keys::discovery_pattern(None)).await?;
        let prefixes: BTreeSet<String> = found
            .iter()
            .filter_map(|key| {
                keys::source_of_key(key)
                    .map(|(prefix, _)| prefix)
                    .or_else(|| keys::topic_of_key(key).map(|(prefix, _)| prefix))
                    .or_else(|| keys::shard_of_key(key).map(|(prefix, ..)| prefix))
            })
            .filter(|prefix| prefix != self.key_prefix())
            .collect();
        Ok(prefixes.into_iter().collect())
    }
}

/// Every key matching `pattern` (`SCAN ... COUNT 1000`, never `KEYS`; every master of a
/// cluster). Keys that are not UTF-8 are not the bus's and are skipped.
pub(super) async fn scan(
    client: &Client,
    pattern: &str,
) -> Result<Vec<String>, fred::error::Error> {
    let mut found = Vec::new();
    if client.is_clustered() {
        collect(
            client.scan_cluster(pattern, Some(SCAN_COUNT), None),
            &mut found,
        )
        .await?;
    } else {
        collect(client.scan(pattern, Some(SCAN_COUNT), None), &mut found).await?;
    }
    Ok(found)
}

async fn collect(
    pages: impl Stream<Item = Result<ScanResult, fred::error::Error>>,
    found: &mut Vec<String>,
) -> Result<(), fred::error::Error> {
    futures::pin_mut!(pages);
    while let Some(mut page) = pages.try_next().await? {
        found.extend(
            page.take_results()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|key| key.into_string()),
        );
        page.next();
    }
    Ok(())
}
