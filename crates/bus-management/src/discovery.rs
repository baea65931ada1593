//! Finding the queues and topics that exist: the registry sets that consumers write at
//! start, merged with a `SCAN` of the key layout, so a queue is listed from its first send
//! even if no consumer ever started (the send path writes no registry).

use std::collections::{BTreeMap, BTreeSet};

use bus_core::Source;
use bus_redis::keys::{self, QueueKeys};
use fred::prelude::{Client, ClientLike, KeysInterface, SetsInterface};
use fred::types::scan::{ScanResult, Scanner};
use futures::{Stream, TryStreamExt};

use crate::management::source_name;
use crate::{Error, Management, Result};

/// Keys asked for per `SCAN` call: each call is short, so Redis keeps serving everyone
/// else while a large keyspace is walked.
const SCAN_COUNT: u32 = 1000;

/// What exists under one prefix: queue names, and each topic's subscription names.
#[derive(Debug, Default)]
pub(crate) struct Inventory {
    pub(crate) queues: BTreeSet<String>,
    pub(crate) topics: BTreeMap<String, BTreeSet<String>>,
}

impl Inventory {
    /// Every queue and subscription, queues first, each group sorted.
    pub(crate) fn sources(&self) -> Vec<Source> {
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

impl Management {
    /// The registry sets merged with the queues and topics whose keys exist.
    pub(crate) async fn inventory(&self) -> Result<Inventory> {
        let client = self.client();
        let prefix = self.prefix();
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

    /// Fails with [`Error::UnknownSource`] unless a consumer registered the queue (or the
    /// subscription) or one of its keys exists: a typo in a name or in the prefix is an
    /// error that says what exists, not a row of zeros.
    ///
    /// Costs one command for a queue that exists; the error costs a `SCAN` of the keyspace.
    pub async fn ensure_exists(&self, source: &Source) -> Result<()> {
        let client = self.client();
        let queue_keys: QueueKeys = self.keys(source);
        let key_list: Vec<String> = queue_keys.all().iter().map(|k| k.to_string()).collect();
        let (registered, existing) = match source {
            Source::Queue(queue) => tokio::try_join!(
                client.sismember::<bool, _, _>(keys::queue_registry(self.prefix()), queue),
                client.exists::<u64, _>(key_list),
            )?,
            Source::Subscription { topic, name } => tokio::try_join!(
                client.sismember::<bool, _, _>(keys::subscriptions(self.prefix(), topic), name),
                client.exists::<u64, _>(key_list),
            )?,
        };
        if registered || existing > 0 {
            return Ok(());
        }
        let known: Vec<String> = self
            .inventory()
            .await?
            .sources()
            .iter()
            .map(source_name)
            .collect();
        let other_prefixes = if known.is_empty() {
            self.other_prefixes().await?
        } else {
            Vec::new()
        };
        Err(Error::UnknownSource {
            name: source_name(source),
            prefix: self.prefix().to_owned(),
            known,
            other_prefixes,
        })
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
            })
            .filter(|prefix| prefix != self.prefix())
            .collect();
        Ok(prefixes.into_iter().collect())
    }
}

/// Every key matching `pattern` (`SCAN ... COUNT 1000`, never `KEYS`; every master of a
/// cluster). Keys that are not UTF-8 are not the bus's and are skipped.
async fn scan(client: &Client, pattern: &str) -> Result<Vec<String>, fred::error::Error> {
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
