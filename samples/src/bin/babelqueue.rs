//! A Rust worker in a BabelQueue fleet (docs/babelqueue.md): it consumes the `orders`
//! queue by URN, as PHP, Python or Go workers of the fleet would, and publishes to the
//! `invoices` queue in BabelQueue's envelope for whichever SDK works that one.
//!
//! Runs against `REDIS_URL` (else a private `redis-server`), in BabelQueue's default
//! layout, or Laravel's with `BABELQUEUE_LAYOUT=laravel`. To have something to do, it
//! first publishes a few orders the way another SDK would.
//!
//! The queues are named on the command line, as a BabelQueue worker names its queue when
//! it starts: `babelqueue [ORDERS_QUEUE] [INVOICES_QUEUE]` (`orders` and `invoices` by
//! default). The host maps the contracts' declared queues to them
//! (`HostBuilder::queue_for`), on consume and on send alike.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_babelqueue::{BabelTransport, Headers, Options};
use bus_core::{CommandProcessor, Context, Host, ProcessError, RedisCommand};
use bus_redis::RedisConfig;
use bus_test_redis::RedisServer;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders", urn = "urn:babel:orders:created")]
struct OrderCreated {
    order_id: u64,
    total_cents: u64,
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders", urn = "urn:babel:orders:cancelled")]
struct OrderCancelled {
    order_id: u64,
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "invoices", urn = "urn:babel:invoices:issue")]
struct IssueInvoice {
    order_id: u64,
    total_cents: u64,
}

#[derive(Default)]
struct Orders {
    handled: AtomicU32,
}

#[async_trait]
impl CommandProcessor<OrderCreated> for Arc<Orders> {
    async fn process(&self, order: OrderCreated, ctx: &Context) -> Result<(), ProcessError> {
        println!(
            "order {} created ({} cents): issuing its invoice",
            order.order_id, order.total_cents
        );
        ctx.bus()
            .send(&IssueInvoice {
                order_id: order.order_id,
                total_cents: order.total_cents,
            })
            .await?;
        self.handled.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[async_trait]
impl CommandProcessor<OrderCancelled> for Arc<Orders> {
    async fn process(&self, order: OrderCancelled, _: &Context) -> Result<(), ProcessError> {
        println!("order {} cancelled", order.order_id);
        self.handled.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _private) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = RedisServer::start()?;
            (server.url(), Some(server))
        }
    };
    let options = match std::env::var("BABELQUEUE_LAYOUT").as_deref() {
        Ok("laravel") => Options::laravel(),
        _ => Options::legacy(),
    };
    let mut args = std::env::args().skip(1);
    let orders_queue = args.next().unwrap_or_else(|| "orders".to_owned());
    let invoices_queue = args.next().unwrap_or_else(|| "invoices".to_owned());
    let layout = options.layout.name();
    let transport = BabelTransport::connect(&RedisConfig::from_url(&url)?, options).await?;
    println!("a BabelQueue worker on {layout} layout queues: {orders_queue} -> {invoices_queue}");

    // What a PHP or Python producer of the fleet would publish.
    let producer = transport.babel_queue();
    let none = Headers::new();
    for order_id in 1..=3 {
        let order = serde_json::json!({ "order_id": order_id, "total_cents": 1250 * order_id });
        producer
            .publish(&orders_queue, "urn:babel:orders:created", &order, &none)
            .await?;
    }
    let cancelled = serde_json::json!({ "order_id": 2 });
    producer
        .publish(
            &orders_queue,
            "urn:babel:orders:cancelled",
            &cancelled,
            &none,
        )
        .await?;

    let orders = Arc::new(Orders::default());
    let running = Host::builder()
        .transport(transport.clone())
        .queue_for::<OrderCreated>(&orders_queue)
        .queue_for::<OrderCancelled>(&orders_queue)
        .queue_for::<IssueInvoice>(&invoices_queue)
        .command::<OrderCreated, _>(Arc::clone(&orders))
        .command::<OrderCancelled, _>(Arc::clone(&orders))
        .build()?
        .start()
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while orders.handled.load(Ordering::SeqCst) < 4 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.shutdown().await?;
    let handled = orders.handled.load(Ordering::SeqCst);
    let invoices = producer.keys(&invoices_queue).ready;
    let waiting: i64 = fred::prelude::ListInterface::llen(producer.client(), &invoices).await?;
    println!("handled {handled} orders; {waiting} invoices wait on `{invoices}` for the invoicing workers");
    if handled < 4 {
        return Err("not every order was handled in 30 s".into());
    }
    Ok(())
}
