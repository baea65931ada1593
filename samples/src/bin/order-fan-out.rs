//! Fan out, fan in (docs/concepts.md, "Workflows"): each order is priced line by line, in
//! parallel, and continues once every line settled, with their prices; a batch of orders
//! says when all of them are priced.
//!
//! ```text
//! cargo run -p samples --bin order-fan-out
//! ```
//!
//! Runs on `REDIS_URL`, else a local Redis, else a private `redis-server`, else in memory.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{CommandProcessor, Context, Host, ProcessError, RedisCommand};
use bus_workflows::{
    ChildPolicy, ChildResult, MemoryWorkflowStore, RedisWorkflowStore, WorkflowContext, Workflows,
    WorkflowsExt,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// An order to price: its lines (sku, quantity).
#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "sample-orders")]
struct PriceOrder {
    order: u64,
    lines: Vec<(String, u32)>,
}

/// One line of an order: priced on its own, by any host.
#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "sample-order-lines")]
struct PriceLine {
    sku: String,
    quantity: u32,
}

/// Every order of the batch is priced (the batch's success callback).
#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "sample-orders-priced")]
struct OrdersPriced {
    orders: usize,
}

/// Prices in cents; a sku not listed is dead-lettered (no such product).
fn unit_price(sku: &str) -> Option<u64> {
    match sku {
        "tea" => Some(450),
        "mug" => Some(1200),
        "kettle" => Some(3900),
        "spoon" => Some(150),
        _ => None,
    }
}

struct Orders(mpsc::UnboundedSender<String>);

#[async_trait]
impl CommandProcessor<PriceOrder> for Orders {
    async fn process(&self, order: PriceOrder, ctx: &Context) -> Result<(), ProcessError> {
        let lines: Vec<PriceLine> = order
            .lines
            .iter()
            .map(|(sku, quantity)| PriceLine {
                sku: sku.clone(),
                quantity: *quantity,
            })
            .collect();
        // Fan out: the first run sends the lines and parks the order (no lease, no handler
        // slot while the lines run). Fan in: the order comes back once every line settled.
        let priced = ctx
            .fan_out::<u64, _, _>(ChildPolicy::Continue, |children| async move {
                children.send_all(&lines).await?;
                Ok(())
            })
            .await?;
        let total: u64 = priced.iter().filter_map(ChildResult::value).sum();
        let missing: Vec<String> = priced
            .iter()
            .filter_map(ChildResult::dead)
            .map(|dead| order.lines[dead.index as usize].0.clone())
            .collect();
        let _ = self.0.send(format!(
            "order {}: {} lines priced, total {}.{:02}{}",
            order.order,
            priced.len() - missing.len(),
            total / 100,
            total % 100,
            if missing.is_empty() {
                String::new()
            } else {
                format!(" (not priced: {})", missing.join(", "))
            }
        ));
        Ok(())
    }
}

struct Lines;

#[async_trait]
impl CommandProcessor<PriceLine> for Lines {
    async fn process(&self, line: PriceLine, ctx: &Context) -> Result<(), ProcessError> {
        let Some(unit) = unit_price(&line.sku) else {
            return Err(ProcessError::dead_letter(format!(
                "no such product: {}",
                line.sku
            )));
        };
        // The line's result, which its order reads when it continues.
        ctx.set_result(&(unit * u64::from(line.quantity)))?;
        Ok(())
    }
}

struct Priced(mpsc::UnboundedSender<String>);

#[async_trait]
impl CommandProcessor<OrdersPriced> for Priced {
    async fn process(&self, done: OrdersPriced, _: &Context) -> Result<(), ProcessError> {
        let _ = self.0.send(format!("all {} orders priced", done.orders));
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prefix = format!("order-fan-out-{}", std::process::id());
    let backend = samples::choose_backend(&prefix).await?;
    println!("running on {}", backend.description);
    let workflows = match &backend.redis {
        Some(redis) => Workflows::new(RedisWorkflowStore::for_transport(redis)),
        None => Workflows::new(MemoryWorkflowStore::new()),
    };
    let (said, mut heard) = mpsc::unbounded_channel();
    let host = Host::builder()
        .workflows(&workflows, Arc::clone(&backend.transport))
        .command::<PriceOrder, _>(Orders(said.clone()))
        .command::<PriceLine, _>(Lines)
        .command::<OrdersPriced, _>(Priced(said))
        .build()?
        .start()
        .await?;
    let bus = host.bus();

    let orders = vec![
        PriceOrder {
            order: 1,
            lines: vec![("tea".into(), 4), ("mug".into(), 2)],
        },
        PriceOrder {
            order: 2,
            lines: vec![("kettle".into(), 1), ("spoon".into(), 6), ("tea".into(), 1)],
        },
        PriceOrder {
            order: 3,
            lines: vec![("mug".into(), 1), ("teapot".into(), 1)],
        },
    ];
    // The orders are a batch: its callback comes once every order continued and finished.
    let batch = workflows
        .batch(&bus)
        .on_success(&OrdersPriced {
            orders: orders.len(),
        })?
        .open()
        .await?;
    batch.send_all(&orders).await?;
    batch.close().await?;

    let mut finished = false;
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(30), heard.recv()).await {
        println!("{line}");
        if line.starts_with("all ") {
            finished = true;
            break;
        }
    }
    host.shutdown().await?;
    backend.close().await;
    if !finished {
        return Err("the orders were not all priced within 30 s".into());
    }
    Ok(())
}
