//! The object stores the object_store provider is tested on: object_store's local
//! filesystem backend, a real Azure Blob emulator (Azurite) and a real S3 server (moto),
//! the servers started by the harness on free loopback ports.

#![allow(dead_code)]

use std::sync::Arc;

use bus_attachments::ObjectStoreProvider;
use bus_test_redis::{Azurite, MotoS3};
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;

/// What keeps a store alive: its directory or its server process.
#[derive(Debug)]
enum Backing {
    Dir(tempfile::TempDir),
    Azurite(Azurite),
    S3(MotoS3),
}

/// One object store of a test, and what backs it (dropped with it).
#[derive(Debug)]
pub struct Store {
    pub store: Arc<dyn ObjectStore>,
    backing: Backing,
}

impl Store {
    /// Local files in a temporary directory.
    pub fn fs() -> Store {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        Store {
            store,
            backing: Backing::Dir(dir),
        }
    }

    /// A container on a fresh Azurite.
    pub fn azurite() -> Store {
        let azurite = Azurite::start().unwrap_or_else(|e| panic!("{e}"));
        let store = MicrosoftAzureBuilder::new()
            .with_account(Azurite::ACCOUNT)
            .with_access_key(Azurite::KEY)
            .with_container_name(Azurite::CONTAINER)
            .with_endpoint(azurite.endpoint())
            .with_allow_http(true)
            .build()
            .unwrap();
        Store {
            store: Arc::new(store),
            backing: Backing::Azurite(azurite),
        }
    }

    /// A bucket on a fresh moto S3 server (path-style requests; moto checks no keys).
    pub fn s3() -> Store {
        let moto = MotoS3::start().unwrap_or_else(|e| panic!("{e}"));
        let store = AmazonS3Builder::new()
            .with_endpoint(moto.endpoint())
            .with_bucket_name(MotoS3::BUCKET)
            .with_region(MotoS3::REGION)
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .with_allow_http(true)
            .build()
            .unwrap();
        Store {
            store: Arc::new(store),
            backing: Backing::S3(moto),
        }
    }

    /// The provider with its defaults over this store.
    pub fn provider(&self) -> ObjectStoreProvider {
        ObjectStoreProvider::new(Arc::clone(&self.store), "attachments")
    }

    /// A count of the objects, for the scenarios shared with the Redis provider
    /// (tests/lifecycle).
    pub fn count(&self) -> impl Fn() -> futures::future::BoxFuture<'static, usize> + Sync {
        let store = Arc::clone(&self.store);
        move || {
            let store = Arc::clone(&store);
            Box::pin(async move {
                store
                    .list(None)
                    .try_collect::<Vec<_>>()
                    .await
                    .unwrap()
                    .len()
            })
        }
    }

    /// Every object's path, sorted.
    pub async fn objects(&self) -> Vec<String> {
        let mut found: Vec<String> = self
            .store
            .list(None)
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await
            .unwrap();
        found.sort();
        found
    }
}

/// One test per store for each scenario `async fn name(store: Store)` of the file.
macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {
        on_every_store!(@store fs, $($scenario),*);
        on_every_store!(@store azurite, $($scenario),*);
        on_every_store!(@store s3, $($scenario),*);
    };
    (@store $store:ident, $($scenario:ident),*) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    let store = tokio::task::spawn_blocking(super::stores::Store::$store)
                        .await
                        .unwrap();
                    super::$scenario(store).await;
                }
            )*
        }
    };
}
