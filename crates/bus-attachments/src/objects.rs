//! The object storage provider (the `object_store` crate: S3, Azure Blob, GCS, local
//! files). An attachment is two objects: its body, uploaded in parts as it streams in,
//! and a small JSON sidecar written last (its reference and expiry), which marks it
//! complete. Object stores cannot set a per-object expiry from the client (S3 and Azure
//! lifecycle rules are bucket-wide), so the expiry is written in the sidecar and
//! [`ObjectStoreProvider::sweep`] deletes what has expired (docs/concepts.md,
//! "Attachments").

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, WriteMultipart};
use serde::{Deserialize, Serialize};

use crate::{AttachmentMeta, AttachmentProvider, AttachmentRef, BodyStream, ByteStream};
use crate::{Error, Result};

/// The sidecar object's suffix.
const SIDECAR: &str = ".meta";

/// The suffix of a shared attachment's folder of releases: one empty object per holder
/// that let go, named by its release token (`<id>.released/<token>`).
const RELEASED: &str = ".released";

/// What the sidecar holds.
#[derive(Debug, Serialize, Deserialize)]
struct Sidecar {
    attachment: AttachmentRef,
    expires_at_ms: u64,
    /// Shared by the copies of an event: deleted when as many releases as `holders` are
    /// stored. Object stores have no atomic counter: each release is an object of its own,
    /// and whoever writes last (a release, or the publisher's `holders`) then counts them
    /// all (every store here reads its own writes and lists them at once).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    shared: bool,
    /// How many copies hold it; `None` until the publisher knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    holders: Option<u64>,
}

/// Attachments in an object store, streamed in parts of `part_size` (at most two parts
/// in flight), so the sender holds about three parts of a large file, the reader one
/// stream buffer.
#[derive(Debug, Clone)]
pub struct ObjectStoreProvider {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    part_size: usize,
    max_size: u64,
    ttl: Duration,
}

impl ObjectStoreProvider {
    /// Default part size: 5 MiB, S3's smallest part.
    pub const DEFAULT_PART_SIZE: usize = 5 * 1024 * 1024;
    /// Default size limit: 100 MiB.
    pub const DEFAULT_MAX_SIZE: u64 = 100 * 1024 * 1024;
    /// Default expiry: 14 days.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(14 * 24 * 3600);
    /// Parts uploading at once.
    const PARTS_IN_FLIGHT: usize = 2;

    /// On `store`, under the path `prefix` (`<prefix>/<scope>/<id>`).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: impl Into<String>) -> Self {
        ObjectStoreProvider {
            store,
            prefix: prefix.into(),
            part_size: Self::DEFAULT_PART_SIZE,
            max_size: Self::DEFAULT_MAX_SIZE,
            ttl: Self::DEFAULT_TTL,
        }
    }
    /// The size of each uploaded part (S3 needs at least 5 MiB but for the last).
    pub fn part_size(mut self, bytes: usize) -> Self {
        self.part_size = bytes.max(1);
        self
    }
    /// The largest attachment stored; a larger one is refused and nothing of it kept.
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = bytes;
        self
    }
    /// Every attachment's expiry, from when it is stored; [`sweep`](Self::sweep) enforces it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    fn body_path(&self, scope: &str, id: &str) -> Path {
        Path::from_iter([self.prefix.as_str(), scope, id])
    }

    fn sidecar_path(&self, scope: &str, id: &str) -> Path {
        Path::from_iter([self.prefix.as_str(), scope, &format!("{id}{SIDECAR}")])
    }

    fn released_path(&self, scope: &str, id: &str) -> Path {
        Path::from_iter([self.prefix.as_str(), scope, &format!("{id}{RELEASED}")])
    }

    /// Deletes a shared attachment once its releases reach its holders; whether it did.
    async fn delete_if_released(&self, attachment: &AttachmentRef) -> Result<bool> {
        let Some(holders) = self
            .sidecar(attachment)
            .await?
            .and_then(|sidecar| sidecar.holders)
        else {
            return Ok(false);
        };
        let released = self
            .store
            .list(Some(&self.released_path(&attachment.scope, &attachment.id)))
            .try_fold(0u64, |n, _| async move { Ok(n + 1) })
            .await?;
        if released < holders {
            return Ok(false);
        }
        self.delete(attachment).await
    }

    fn expiry(&self, ttl: Duration) -> u64 {
        now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
    }

    async fn sidecar(&self, attachment: &AttachmentRef) -> Result<Option<Sidecar>> {
        let path = self.sidecar_path(&attachment.scope, &attachment.id);
        let bytes = match self.store.get(&path).await {
            Ok(got) => got.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Corrupt {
                id: attachment.id.clone(),
                reason: e.to_string(),
            })
    }

    async fn write_sidecar(&self, sidecar: &Sidecar) -> Result<()> {
        let path = self.sidecar_path(&sidecar.attachment.scope, &sidecar.attachment.id);
        let json = serde_json::to_vec(sidecar).map_err(|e| Error::Corrupt {
            id: sidecar.attachment.id.clone(),
            reason: e.to_string(),
        })?;
        self.store.put(&path, json.into()).await?;
        Ok(())
    }

    /// Uploads the body; returns its length.
    async fn upload(
        &self,
        path: &Path,
        declared: Option<u64>,
        mut body: BodyStream,
    ) -> Result<u64> {
        let upload = self.store.put_multipart(path).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, self.part_size);
        let mut total = 0u64;
        let outcome = async {
            while let Some(piece) = body.next().await {
                let piece = piece.map_err(Error::Body)?;
                total += piece.len() as u64;
                if total > self.max_size {
                    return Err(Error::TooLarge {
                        size: total,
                        max: self.max_size,
                    });
                }
                if let Some(declared) = declared.filter(|&declared| total > declared) {
                    return Err(Error::LengthMismatch {
                        declared,
                        actual: total,
                    });
                }
                writer.wait_for_capacity(Self::PARTS_IN_FLIGHT).await?;
                writer.put(piece);
            }
            match declared.filter(|&declared| declared != total) {
                Some(declared) => Err(Error::LengthMismatch {
                    declared,
                    actual: total,
                }),
                None => Ok(()),
            }
        }
        .await;
        match outcome {
            Ok(()) => {
                writer.finish().await?;
                Ok(total)
            }
            Err(error) => {
                // Nothing of a refused body is kept (an incomplete multipart upload is
                // the bucket's AbortIncompleteMultipartUpload rule's to remove).
                let _ = writer.abort().await;
                Err(error)
            }
        }
    }

    /// Deletes every attachment under the prefix whose expiry has passed, and every body
    /// without a sidecar older than the TTL (an upload whose sender died before the
    /// sidecar); returns how many attachments it deleted. Run it periodically (a
    /// bucket lifecycle rule "expire after the TTL" on the prefix does the same without a
    /// sweeper when no attachment is ever `touch`ed).
    pub async fn sweep(&self) -> Result<usize> {
        let now = now_ms();
        let ttl = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let prefix = Path::from_iter([self.prefix.as_str()]);
        let mut listing = self.store.list(Some(&prefix));
        let mut deleted = 0;
        while let Some(object) = listing.try_next().await? {
            let location = object.location.to_string();
            let Some(name) = object.location.filename() else {
                continue;
            };
            if name.ends_with(SIDECAR) {
                let bytes = match self.store.get(&object.location).await {
                    Ok(got) => got.bytes().await?,
                    Err(object_store::Error::NotFound { .. }) => continue,
                    Err(error) => return Err(error.into()),
                };
                let expired = serde_json::from_slice::<Sidecar>(&bytes)
                    .map_or(true, |sidecar| sidecar.expires_at_ms <= now);
                if expired {
                    let body = location.trim_end_matches(SIDECAR).to_owned();
                    self.delete_quietly(&Path::from(body)).await?;
                    self.delete_quietly(&object.location).await?;
                    deleted += 1;
                }
            } else {
                let modified = u64::try_from(object.last_modified.timestamp_millis()).unwrap_or(0);
                let sidecar = Path::from(format!("{location}{SIDECAR}"));
                if modified.saturating_add(ttl) <= now
                    && matches!(
                        self.store.head(&sidecar).await,
                        Err(object_store::Error::NotFound { .. })
                    )
                {
                    self.delete_quietly(&object.location).await?;
                    deleted += 1;
                }
            }
        }
        Ok(deleted)
    }

    async fn delete_quietly(&self, path: &Path) -> Result<bool> {
        match self.store.delete(path).await {
            Ok(()) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

#[async_trait]
impl AttachmentProvider for ObjectStoreProvider {
    async fn put(
        &self,
        scope: &str,
        meta: AttachmentMeta,
        body: BodyStream,
    ) -> Result<AttachmentRef> {
        if let Some(size) = meta.length.filter(|&length| length > self.max_size) {
            return Err(Error::TooLarge {
                size,
                max: self.max_size,
            });
        }
        let id = ulid::Ulid::new().to_string();
        let path = self.body_path(scope, &id);
        let length = self.upload(&path, meta.length, body).await?;
        let attachment = AttachmentRef {
            id,
            scope: scope.to_owned(),
            name: meta.name,
            content_type: meta.content_type,
            length,
            metadata: meta.metadata,
        };
        let sidecar = Sidecar {
            attachment,
            expires_at_ms: self.expiry(self.ttl),
            shared: false,
            holders: None,
        };
        if let Err(error) = self.write_sidecar(&sidecar).await {
            let _ = self.delete_quietly(&path).await;
            return Err(error);
        }
        Ok(sidecar.attachment)
    }

    async fn open(&self, attachment: &AttachmentRef) -> Result<ByteStream> {
        let not_found = || Error::NotFound {
            id: attachment.id.clone(),
        };
        match self.sidecar(attachment).await? {
            Some(sidecar) if sidecar.expires_at_ms > now_ms() => {}
            _ => return Err(not_found()),
        }
        let path = self.body_path(&attachment.scope, &attachment.id);
        let body = match self.store.get(&path).await {
            Ok(got) => got.into_stream(),
            Err(object_store::Error::NotFound { .. }) => return Err(not_found()),
            Err(error) => return Err(error.into()),
        };
        Ok(body.map_err(Error::from).boxed())
    }

    async fn delete(&self, attachment: &AttachmentRef) -> Result<bool> {
        // S3 answers the delete of a missing object with success: whether the attachment
        // was there is asked first (its sidecar marks it complete).
        let sidecar = self.sidecar_path(&attachment.scope, &attachment.id);
        let existed = match self.store.head(&sidecar).await {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(error) => return Err(error.into()),
        };
        // The sidecar last: a body left by a failed delete is still found by the sweep.
        self.delete_quietly(&self.body_path(&attachment.scope, &attachment.id))
            .await?;
        let releases: Vec<Path> = self
            .store
            .list(Some(&self.released_path(&attachment.scope, &attachment.id)))
            .map_ok(|object| object.location)
            .try_collect()
            .await?;
        for release in releases {
            self.delete_quietly(&release).await?;
        }
        self.delete_quietly(&sidecar).await?;
        Ok(existed)
    }

    async fn share(&self, attachment: &AttachmentRef) -> Result<bool> {
        let Some(mut sidecar) = self.sidecar(attachment).await? else {
            return Ok(false);
        };
        sidecar.shared = true;
        self.write_sidecar(&sidecar).await?;
        Ok(true)
    }

    async fn shared_by(&self, attachment: &AttachmentRef, copies: u64, _: &str) -> Result<bool> {
        // Writing the count twice is the same as once: no token needed.
        let Some(mut sidecar) = self.sidecar(attachment).await? else {
            return Ok(false);
        };
        sidecar.holders = Some(copies);
        self.write_sidecar(&sidecar).await?;
        self.delete_if_released(attachment).await
    }

    async fn release(&self, attachment: &AttachmentRef, token: &str) -> Result<bool> {
        match self.sidecar(attachment).await? {
            None => Ok(false),
            Some(sidecar) if !sidecar.shared => self.delete(attachment).await,
            Some(_) => {
                let released = self.released_path(&attachment.scope, &attachment.id);
                self.store
                    .put(&released.child(token), bytes::Bytes::new().into())
                    .await?;
                self.delete_if_released(attachment).await
            }
        }
    }

    async fn touch(&self, attachment: &AttachmentRef, ttl: Duration) -> Result<bool> {
        let Some(mut sidecar) = self.sidecar(attachment).await? else {
            return Ok(false);
        };
        sidecar.expires_at_ms = self.expiry(ttl);
        self.write_sidecar(&sidecar).await?;
        Ok(true)
    }
}
