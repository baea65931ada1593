//! A tour of the bus: a command, a batch of commands, an event with three subscriptions,
//! a saga, and a custom performance-logging middleware.
//!
//! Runs on `REDIS_URL`, a local Redis, a private redis-server, or in memory (it says which).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_core::{
    CommandProcessor, Context, ContinueSaga, EventProcessor, Host, MemorySagaStore, Middleware,
    Next, ProcessError, Saga, SagaData, SagaStore, StartSaga,
};
use bus_redis_saga::RedisSagaStore;
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

    let done = Done::default();
    let orders = Arc::new(OrderSaga(done.clone()));
    let host = Host::builder()
        .transport(Arc::clone(&backend.transport))
        .saga_store(saga_store)
        .middleware(PerformanceLogger)
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

    // 4 thumbnails + 3 cache copies + 1 completed order.
    let deadline = Instant::now() + Duration::from_secs(30);
    while done.0.load(Ordering::SeqCst) < 8 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.shutdown().await?;
    backend.close().await;
    let finished = done.0.load(Ordering::SeqCst);
    println!("tour finished: {finished} of 8 steps done");
    if finished < 8 {
        return Err("the tour did not finish in 30 s".into());
    }
    Ok(())
}
