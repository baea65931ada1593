//! A tour of the bus: a command, a batch of commands, an event with three subscriptions,
//! a saga, a command with an attachment, and a custom performance-logging middleware.
//!
//! Runs on `REDIS_URL`, a local Redis, a private redis-server, or in memory (it says which).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_attachments::{
    send_with_attachment, AttachmentLayer, AttachmentMeta, AttachmentProvider, ContextExt,
    MemoryProvider, RedisProvider,
};
use bus_core::{
    Bus, CommandProcessor, Context, ContinueSaga, EventProcessor, Host, MemorySagaStore,
    Middleware, Next, ProcessError, RedisCommand, Saga, SagaData, SagaStore, SendOptions,
    StartSaga,
};
use bus_redis_saga::RedisSagaStore;
use futures::TryStreamExt;
use sample_contracts::{
    ApiCache, CacheInvalidated, OrderLinePacked, OrderPlaced, SearchIndex, ThumbnailRequested,
    WebCache,
};
use serde::{Deserialize, Serialize};

/// Everything the tour's handlers did, to know when the tour is over.
#[derive(Clone, Default)]
struct Done(Arc<AtomicUsize>);

impl Done {
    fn one(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Commands: makes thumbnails.
#[derive(Clone)]
struct Thumbnails(Done);

#[async_trait]
impl CommandProcessor<ThumbnailRequested> for Thumbnails {
    async fn process(&self, cmd: ThumbnailRequested, ctx: &Context) -> Result<(), ProcessError> {
        println!(
            "  thumbnail for image {} (message {})",
            cmd.image_id,
            ctx.message_id()
        );
        self.0.one();
        Ok(())
    }
}

/// A command with an attachment: the invoice's PDF travels beside the message (a claim
/// check), not in it.
#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "invoice-scan")]
struct ScanInvoice {
    invoice_id: u64,
}

/// Reads each invoice's attachment as a stream.
#[derive(Clone)]
struct InvoiceScanner(Done);

#[async_trait]
impl CommandProcessor<ScanInvoice> for InvoiceScanner {
    async fn process(&self, cmd: ScanInvoice, ctx: &Context) -> Result<(), ProcessError> {
        let attachment = ctx
            .attachment()
            .await?
            .ok_or("the invoice has no attachment")?;
        let name = attachment.reference().name.clone();
        let (mut bytes, mut body) = (0, attachment.into_stream());
        while let Some(chunk) = body.try_next().await? {
            bytes += chunk.len();
        }
        println!(
            "  invoice {}: read {name} ({bytes} bytes) from its attachment",
            cmd.invoice_id
        );
        self.0.one();
        Ok(())
    }
}

/// Events: three subscriptions of `CacheInvalidated`, each with its own copy.
#[derive(Clone)]
struct Caches(Done);

macro_rules! cache_subscriber {
    ($subscription:ty, $who:literal) => {
        #[async_trait]
        impl EventProcessor<$subscription> for Caches {
            async fn process(
                &self,
                event: CacheInvalidated,
                _: &Context,
            ) -> Result<(), ProcessError> {
                println!("  {} drops cache key {}", $who, event.key);
                self.0.one();
                Ok(())
            }
        }
    };
}
cache_subscriber!(WebCache, "web");
cache_subscriber!(ApiCache, "api");
cache_subscriber!(SearchIndex, "search");

/// A saga: an order is done when all its lines are packed.
struct OrderSaga(Done);

#[derive(Debug, Default, Serialize, Deserialize)]
struct OrderState {
    expected: u32,
    packed: u32,
}

impl Saga for OrderSaga {
    type State = OrderState;
    const PARTITION_KEY: &'static str = "order";
}

#[async_trait]
impl StartSaga<OrderPlaced> for OrderSaga {
    fn saga_id(&self, message: &OrderPlaced) -> String {
        message.order_id.clone()
    }
    async fn start(
        &self,
        message: OrderPlaced,
        saga: &mut SagaData<OrderState>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        println!(
            "  order {} placed with {} lines",
            message.order_id, message.lines
        );
        saga.state_mut().expected = message.lines;
        Ok(())
    }
}

#[async_trait]
impl ContinueSaga<OrderLinePacked> for OrderSaga {
    fn saga_id(&self, message: &OrderLinePacked) -> String {
        message.order_id.clone()
    }
    async fn handle(
        &self,
        message: OrderLinePacked,
        saga: &mut SagaData<OrderState>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        let state = saga.state_mut();
        state.packed += 1;
        println!(
            "  order {}: {}/{} lines packed",
            message.order_id, state.packed, state.expected
        );
        if state.packed == state.expected {
            println!("  order {} complete", message.order_id);
            saga.complete();
            self.0.one();
        }
        Ok(())
    }
}

/// Middleware: logs how long every handler took.
#[derive(Debug)]
struct PerformanceLogger;

#[async_trait]
impl Middleware for PerformanceLogger {
    async fn handle(&self, ctx: &Context, next: Next<'_>) -> Result<(), ProcessError> {
        let started = Instant::now();
        let result = next.run(ctx).await;
        println!(
            "    [perf] {} took {:?}",
            ctx.message_type(),
            started.elapsed()
        );
        result
    }
}

/// Sends one of each: a command, a batch, an event, a saga's messages and a command with
/// an attachment.
async fn send_the_tour(
    bus: &Bus,
    attachments: &dyn AttachmentProvider,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("1. a command");
    bus.send(&ThumbnailRequested {
        image_id: "cat.jpg".into(),
    })
    .await?;
    println!("2. a batch of commands, in one round trip");
    let batch: Vec<ThumbnailRequested> = (1..=3)
        .map(|i| ThumbnailRequested {
            image_id: format!("dog-{i}.jpg"),
        })
        .collect();
    bus.send_batch(&batch).await?;
    println!("3. an event with three subscriptions");
    bus.publish(&CacheInvalidated {
        key: "home-page".into(),
    })
    .await?;
    println!("4. a saga: an order of three lines");
    bus.send(&OrderPlaced {
        order_id: "A-1".into(),
        lines: 3,
    })
    .await?;
    let lines: Vec<OrderLinePacked> = (0..3)
        .map(|_| OrderLinePacked {
            order_id: "A-1".into(),
        })
        .collect();
    bus.send_batch(&lines).await?;
    println!("5. a command with an attachment");
    let pdf = bytes::Bytes::from_static(b"%PDF-1.7\n% an invoice, streamed in chunks\n%%EOF\n");
    let meta = AttachmentMeta::new("invoice-42.pdf", "application/pdf").length(pdf.len() as u64);
    let body = futures::stream::iter([Ok(pdf)]);
    send_with_attachment(
        bus,
        attachments,
        &ScanInvoice { invoice_id: 42 },
        meta,
        Box::pin(body),
        &SendOptions::new(),
    )
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = match samples::choose_backend("tour").await {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    println!("running on {}", backend.description);
    let saga_store: Arc<dyn SagaStore> = match &backend.redis {
        Some(redis) => Arc::new(RedisSagaStore::for_transport(redis)),
        None => Arc::new(MemorySagaStore::new()),
    };

    // Attachments next to the messages: in Redis under the queue's hash tag, or in memory.
    let attachments: Arc<dyn AttachmentProvider> = match &backend.redis {
        Some(redis) => Arc::new(RedisProvider::new(
            redis.client().clone(),
            redis.config().key_prefix(),
        )),
        None => Arc::new(MemoryProvider::new()),
    };

    let done = Done::default();
    let orders = Arc::new(OrderSaga(done.clone()));
    let host = Host::builder()
        .transport(Arc::clone(&backend.transport))
        .saga_store(saga_store)
        .middleware(PerformanceLogger)
        .middleware(AttachmentLayer::new(Arc::clone(&attachments)))
        .command::<ScanInvoice, _>(InvoiceScanner(done.clone()))
        .command::<ThumbnailRequested, _>(Thumbnails(done.clone()))
        .event::<WebCache, _>(Caches(done.clone()))
        .event::<ApiCache, _>(Caches(done.clone()))
        .event::<SearchIndex, _>(Caches(done.clone()))
        .saga_start::<OrderPlaced, _>(Arc::clone(&orders))
        .saga_continue::<OrderLinePacked, _>(orders)
        .build()?;
    println!(
        "registered messages: {:?}",
        host.messages().iter().map(|m| m.name()).collect::<Vec<_>>()
    );
    // `start` returns once every consumer is open, so the subscriptions are registered:
    // an event published from now on reaches all three (earlier ones would not).
    let running = host.start().await?;
    let bus = running.bus();

    send_the_tour(&bus, &*attachments).await?;

    // 4 thumbnails + 3 cache copies + 1 completed order + 1 invoice.
    const STEPS: usize = 9;
    let deadline = Instant::now() + Duration::from_secs(30);
    while done.0.load(Ordering::SeqCst) < STEPS && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.shutdown().await?;
    backend.close().await;
    let finished = done.0.load(Ordering::SeqCst);
    println!("tour finished: {finished} of {STEPS} steps done");
    if finished < STEPS {
        return Err("the tour did not finish in 30 s".into());
    }
    Ok(())
}
