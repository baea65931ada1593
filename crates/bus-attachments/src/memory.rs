//! The in-memory provider: for tests and for a bus on the memory transport (the `tour`
//! sample without Redis). Attachments live in the process, in the sender's chunks.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use crate::{AttachmentMeta, AttachmentProvider, AttachmentRef, BodyStream, ByteStream};
use crate::{Error, Result};

/// One stored attachment: its chunks, when it expires, and its holders when shared.
#[derive(Debug)]
struct Stored {
    chunks: Arc<[Bytes]>,
    expires: Instant,
    shared: Option<Holders>,
}

/// A shared attachment's holders (as the Redis provider's refs hash): whether the
/// publisher still holds it, the copies' count, the tokens of the changes counted.
#[derive(Debug)]
struct Holders {
    pending: bool,
    count: i64,
    tokens: HashSet<String>,
}

/// Attachments in this process's memory, with the same limit and expiry as the others
/// (an expired one is not found, and dropped by the next `put`).
#[derive(Debug, Clone)]
pub struct MemoryProvider {
    stored: Arc<Mutex<HashMap<(String, String), Stored>>>,
    max_size: u64,
    ttl: Duration,
}

impl Default for MemoryProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryProvider {
    /// Default size limit: 100 MiB.
    pub const DEFAULT_MAX_SIZE: u64 = 100 * 1024 * 1024;
    /// Default expiry: 14 days.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(14 * 24 * 3600);

    /// An empty store with the default limit and expiry.
    pub fn new() -> Self {
        MemoryProvider {
            stored: Arc::default(),
            max_size: Self::DEFAULT_MAX_SIZE,
            ttl: Self::DEFAULT_TTL,
        }
    }
    /// The largest attachment stored.
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = bytes;
        self
    }
    /// Every attachment's expiry, from when it is stored.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// How many attachments are stored (expired ones included until the next `put`).
    pub fn len(&self) -> usize {
        self.map().len()
    }
    /// Whether none is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn map(&self) -> MutexGuard<'_, HashMap<(String, String), Stored>> {
        self.stored.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(attachment: &AttachmentRef) -> (String, String) {
        (attachment.scope.clone(), attachment.id.clone())
    }

    /// As the Redis provider's hold.lua: `change` holders once per `token` (`handover`:
    /// the publisher's); deletes it when handed over and none is left, or on a release
    /// when it is not shared.
    fn hold(&self, attachment: &AttachmentRef, handover: bool, change: i64, token: &str) -> bool {
        let mut map = self.map();
        let key = Self::key(attachment);
        let Some(stored) = map.get_mut(&key) else {
            return false;
        };
        let gone = match &mut stored.shared {
            None => !handover,
            Some(holders) => {
                if !holders.tokens.insert(token.to_owned()) {
                    return false;
                }
                holders.count += change;
                holders.pending &= !handover;
                !holders.pending && holders.count <= 0
            }
        };
        if gone {
            map.remove(&key);
        }
        gone
    }
}

#[async_trait]
impl AttachmentProvider for MemoryProvider {
    async fn put(
        &self,
        scope: &str,
        meta: AttachmentMeta,
        mut body: BodyStream,
    ) -> Result<AttachmentRef> {
        let max = self.max_size;
        if let Some(size) = meta.length.filter(|&length| length > max) {
            return Err(Error::TooLarge { size, max });
        }
        let (mut chunks, mut total) = (Vec::new(), 0u64);
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(Error::Body)?;
            total += piece.len() as u64;
            if total > max {
                return Err(Error::TooLarge { size: total, max });
            }
            chunks.push(piece);
        }
        if let Some(declared) = meta.length.filter(|&declared| declared != total) {
            return Err(Error::LengthMismatch {
                declared,
                actual: total,
            });
        }
        let attachment = AttachmentRef {
            id: ulid::Ulid::new().to_string(),
            scope: scope.to_owned(),
            name: meta.name,
            content_type: meta.content_type,
            length: total,
            metadata: meta.metadata,
        };
        let now = Instant::now();
        let mut map = self.map();
        map.retain(|_, stored| stored.expires > now);
        map.insert(
            Self::key(&attachment),
            Stored {
                chunks: chunks.into(),
                expires: now + self.ttl,
                shared: None,
            },
        );
        Ok(attachment)
    }

    async fn open(&self, attachment: &AttachmentRef) -> Result<ByteStream> {
        let chunks = match self.map().get(&Self::key(attachment)) {
            Some(stored) if stored.expires > Instant::now() => Arc::clone(&stored.chunks),
            _ => {
                return Err(Error::NotFound {
                    id: attachment.id.clone(),
                })
            }
        };
        let body = (0..chunks.len()).map(move |i| Ok(chunks[i].clone()));
        Ok(futures::stream::iter(body).boxed())
    }

    async fn delete(&self, attachment: &AttachmentRef) -> Result<bool> {
        Ok(self.map().remove(&Self::key(attachment)).is_some())
    }

    async fn share(&self, attachment: &AttachmentRef) -> Result<bool> {
        Ok(match self.map().get_mut(&Self::key(attachment)) {
            Some(stored) => {
                stored.shared = Some(Holders {
                    pending: true,
                    count: 0,
                    tokens: HashSet::new(),
                });
                true
            }
            None => false,
        })
    }

    async fn shared_by(
        &self,
        attachment: &AttachmentRef,
        copies: u64,
        token: &str,
    ) -> Result<bool> {
        let copies = i64::try_from(copies).unwrap_or(i64::MAX);
        Ok(self.hold(attachment, true, copies, token))
    }

    async fn release(&self, attachment: &AttachmentRef, token: &str) -> Result<bool> {
        Ok(self.hold(attachment, false, -1, token))
    }

    async fn touch(&self, attachment: &AttachmentRef, ttl: Duration) -> Result<bool> {
        Ok(match self.map().get_mut(&Self::key(attachment)) {
            Some(stored) => {
                stored.expires = Instant::now() + ttl;
                true
            }
            None => false,
        })
    }
}
