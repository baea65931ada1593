//! The conformance scenarios on the in-memory transport and store.

use std::sync::Arc;

use bus_core::MemoryTransport;
use bus_workflows::conformance::{self, Log};
use bus_workflows::{MemoryWorkflowStore, Workflows};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_children_and_nesting() {
    conformance::all(
        Arc::new(MemoryTransport::new()),
        Arc::new(MemoryWorkflowStore::new()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_resumes_once() {
    let workflows = Workflows::new(MemoryWorkflowStore::new());
    let log = Log::default();
    let host = conformance::start(Arc::new(MemoryTransport::new()), &workflows, &log).await;
    conformance::sleep_resumes_once(&host, &log).await;
    host.shutdown().await.unwrap();
}
