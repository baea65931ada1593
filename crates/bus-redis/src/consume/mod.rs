//! The consumer of one queue or subscription (`consumer.rs`: reserve, ack, renew, retry,
//! dead-letter, release, recover) and the receipts its scripts take (`receipts.rs`). A
//! partitioned queue's consumer runs one per shard (`partition.rs`).

pub(crate) mod consumer;
pub(crate) mod receipts;
