//! A host process for the request/reply and effects-once tests, every setting at its
//! default.
//!
//! Environment: `REDIS_URL`, `BUS_PREFIX`. Handles `Ask` (sets `asked_key`, waits
//! `delay_ms`, replies `n * 2`) and `Charge` (step `charge` through `Context::once`,
//! whose effect is an `INCR` of `charges_key`; on the first delivery it then sets
//! `charged_key` and blocks until the process is killed, so the step is done and the ack
//! never comes; a later delivery appends to `charge_done_key` and acks). Sets
//! `lifecycle_up_key` once running; runs until killed, SIGINT or SIGTERM.

use bus_chaos::process::{connect, init_logging};
use std::time::Duration;

use async_trait::async_trait;
use bus_chaos::{
    asked_key, charge_done_key, charged_key, charges_key, lifecycle_up_key, Ask, Charge,
};
use bus_core::{CommandProcessor, Context, Host, ProcessError};
use fred::prelude::{Client, KeysInterface, ListInterface};

struct Handler {
    client: Client,
    prefix: String,
}

#[async_trait]
impl CommandProcessor<Ask> for Handler {
    async fn process(&self, ask: Ask, ctx: &Context) -> Result<(), ProcessError> {
        let pid = std::process::id();
        let key = asked_key(&self.prefix, ask.n);
        let _: () = self.client.set(key, pid, None, None, false).await?;
        tokio::time::sleep(Duration::from_millis(ask.delay_ms)).await;
        ctx.reply(&(ask.n * 2)).await?;
        Ok(())
    }
}

#[async_trait]
impl CommandProcessor<Charge> for Handler {
    async fn process(&self, charge: Charge, ctx: &Context) -> Result<(), ProcessError> {
        let charges = charges_key(&self.prefix, charge.order);
        let charged: i64 = ctx
            .once("charge", || async {
                self.client.incr::<i64, _>(charges).await
            })
            .await?;
        let pid = std::process::id();
        if ctx.delivery_count() == 1 {
            let key = charged_key(&self.prefix, charge.order);
            let _: () = self.client.set(key, pid, None, None, false).await?;
            // Done with the step, never acked: the test kills this process here.
            std::future::pending::<()>().await;
        }
        let line = format!("{} {charged} {} {pid}", charge.order, ctx.delivery_count());
        let _: i64 = self
            .client
            .rpush(charge_done_key(&self.prefix), line)
            .await?;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    init_logging();
    let (transport, prefix) = connect().await?;
    let client = transport.client().clone();
    let handler = || Handler {
        client: client.clone(),
        prefix: prefix.clone(),
    };
    let running = Host::builder()
        .transport(transport)
        .command::<Ask, _>(handler())
        .command::<Charge, _>(handler())
        .build()?
        .start()
        .await?;
    let pid = std::process::id();
    let _: () = client
        .set(lifecycle_up_key(&prefix, pid), pid, None, None, false)
        .await?;
    bus_core::shutdown_signal().await;
    running.shutdown().await?;
    Ok(())
}
