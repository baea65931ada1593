//! The conformance scenarios on the in-memory transport and store.

use std::sync::Arc;

use bus_conformance::workflows;
use bus_core::MemoryTransport;
use bus_workflows::MemoryWorkflowStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_children_and_nesting() {
    workflows::all(
        Arc::new(MemoryTransport::new()),
        Arc::new(MemoryWorkflowStore::new()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_across_a_host_restart() {
    workflows::sleep_across_a_restart(
        Arc::new(MemoryTransport::new()),
        Arc::new(MemoryWorkflowStore::new()),
    )
    .await;
}
