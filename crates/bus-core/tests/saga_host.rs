//! Sagas in a host, end to end on the in-memory transport and store (SPEC §5.1).

use bus_test_redis::{eventually, eventually_async};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{DeadLetterReason, Source};
use bus_core::{
    Backoff, Bus, Context, ContinueSaga, Error, Host, MemorySagaStore, MemoryTransport,
    ProcessError, ProcessingSettings, RedisCommand, Saga, SagaData, SagaStore, StartSaga,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "order-started")]
struct StartOrder {
    order: String,
    /// Fail (or panic) on the first delivery.
    fail_first: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "order-item-added")]
struct AddItem {
    order: String,
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "order-looked-at")]
struct LookAt {
    order: String,
}

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct OrderState {
    started: bool,
    items: u32,
    /// What the failed first attempt of a start wrote; must never be stored.
    scribble: u32,
}

/// The number of items after which an order saga completes.
const ITEMS: u32 = 10;

#[derive(Default)]
struct OrderSaga {
    start_attempts: AtomicUsize,
    starts: AtomicUsize,
    duplicates: AtomicUsize,
    item_runs: AtomicUsize,
    looks: AtomicUsize,
    completed_with: Mutex<Option<u32>>,
}

fn settings() -> ProcessingSettings {
    ProcessingSettings::default()
        .max_concurrent_calls(4)
        .dead_letter_delivery_limit(200)
        .retry(Backoff::fixed(Duration::from_millis(5)))
}

impl Saga for OrderSaga {
    type State = OrderState;
    const PARTITION_KEY: &'static str = "order";
}

#[async_trait]
impl StartSaga<StartOrder> for OrderSaga {
    fn saga_id(&self, message: &StartOrder) -> String {
        message.order.clone()
    }
    async fn start(
        &self,
        message: StartOrder,
        saga: &mut SagaData<OrderState>,
        ctx: &Context,
    ) -> Result<(), ProcessError> {
        self.start_attempts.fetch_add(1, Ordering::SeqCst);
        assert_eq!(
            saga.state(),
            &OrderState::default(),
            "a start must see the default state"
        );
        if ctx.delivery_count() == 1 {
            match message.fail_first.as_deref() {
                Some("error") => {
                    saga.state_mut().scribble = 99;
                    return Err("the first attempt fails".into());
                }
                Some("panic") => {
                    saga.state_mut().scribble = 99;
                    panic!("the first attempt panics");
                }
                _ => {}
            }
        }
        saga.state_mut().started = true;
        self.starts.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    async fn on_duplicate_start(&self, _: StartOrder, _: &Context) -> Result<(), ProcessError> {
        self.duplicates.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings().retry(Backoff::fixed(Duration::from_millis(300)))
    }
}

#[async_trait]
impl ContinueSaga<AddItem> for OrderSaga {
    fn saga_id(&self, message: &AddItem) -> String {
        message.order.clone()
    }
    async fn handle(
        &self,
        _: AddItem,
        saga: &mut SagaData<OrderState>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        self.item_runs.fetch_add(1, Ordering::SeqCst);
        if !saga.state().started {
            // Created, but the start handler has not written yet: try again later.
            return Err("the order is still starting".into());
        }
        // Let concurrent handlers of the same saga interleave (and conflict).
        tokio::task::yield_now().await;
        let state = saga.state_mut();
        state.items += 1;
        if state.items == ITEMS {
            *self.completed_with.lock().unwrap() = Some(state.items);
            saga.complete();
        }
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings().retry(Backoff::fixed(Duration::from_millis(20)))
    }
}

#[async_trait]
impl ContinueSaga<LookAt> for OrderSaga {
    fn saga_id(&self, message: &LookAt) -> String {
        message.order.clone()
    }
    async fn handle(
        &self,
        _: LookAt,
        saga: &mut SagaData<OrderState>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        assert!(saga.state().started);
        self.looks.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings().dead_letter_delivery_limit(2)
    }
}

/// The saga's state, if it exists and its start handler wrote it (until then the store
/// holds it empty, marked as starting).
async fn state(store: &MemorySagaStore, id: &str) -> Option<OrderState> {
    let (data, _) = store.get("order", id).await.ok()?;
    if data.is_empty() {
        return None;
    }
    Some(serde_json::from_slice(&data).unwrap())
}

/// Waits until the saga exists and has started.
async fn started(store: &MemorySagaStore, id: &str) -> OrderState {
    let has_started = eventually_async(Duration::from_secs(10), || async {
        state(store, id).await.is_some_and(|s| s.started)
    });
    assert!(has_started.await, "saga {id} never started");
    state(store, id).await.unwrap()
}

/// Waits until the saga exists (`true`) or is gone (`false`).
async fn saga_is(store: &MemorySagaStore, id: &str, present: bool) -> bool {
    eventually_async(Duration::from_secs(10), || async {
        store.get("order", id).await.is_ok() == present
    })
    .await
}

struct Running {
    bus: Bus,
    transport: MemoryTransport,
    store: MemorySagaStore,
    saga: Arc<OrderSaga>,
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<bus_core::Result<()>>,
}

impl Running {
    fn start() -> Running {
        let transport = MemoryTransport::new();
        let store = MemorySagaStore::new();
        let saga = Arc::new(OrderSaga::default());
        let host = Host::builder()
            .transport(transport.clone())
            .saga_store(store.clone())
            .saga_start::<StartOrder, _>(Arc::clone(&saga))
            .saga_continue::<AddItem, _>(Arc::clone(&saga))
            .saga_continue::<LookAt, _>(Arc::clone(&saga))
            .build()
            .unwrap();
        let bus = host.bus();
        let stop = CancellationToken::new();
        let signal = stop.clone();
        let handle = tokio::spawn(host.run(async move { signal.cancelled().await }));
        Running {
            bus,
            transport,
            store,
            saga,
            stop,
            handle,
        }
    }

    /// Waits until every queue is empty, then stops the host.
    async fn finish(self) -> (MemoryTransport, Arc<OrderSaga>) {
        let queues = ["order-started", "order-item-added", "order-looked-at"];
        let idle = eventually(Duration::from_secs(10), || {
            queues.iter().all(|q| {
                let stats = self.transport.stats(&Source::queue(*q).unwrap());
                (stats.ready, stats.in_flight, stats.delayed) == (0, 0, 0)
            })
        })
        .await;
        self.stop.cancel();
        self.handle.await.unwrap().unwrap();
        assert!(idle, "queues did not drain");
        (self.transport, self.saga)
    }
}

fn dead_letters(transport: &MemoryTransport, queue: &str) -> u64 {
    transport.stats(&Source::queue(queue).unwrap()).dead_letters
}

fn start_order(order: &str) -> StartOrder {
    StartOrder {
        order: order.into(),
        fail_first: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_then_ten_items_update_the_saga_and_the_last_completes_it() {
    let run = Running::start();
    run.bus.send(&start_order("o-1")).await.unwrap();
    let state = started(&run.store, "o-1").await;
    assert_eq!(
        state,
        OrderState {
            started: true,
            items: 0,
            scribble: 0
        }
    );

    // Ten items at once, four handlers at a time: they conflict and retry.
    let items: Vec<AddItem> = (0..ITEMS)
        .map(|_| AddItem {
            order: "o-1".into(),
        })
        .collect();
    run.bus.send_batch(&items).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || run
            .saga
            .completed_with
            .lock()
            .unwrap()
            .is_some())
        .await,
        "the saga never reached {ITEMS} items: an update was lost"
    );
    assert!(
        saga_is(&run.store, "o-1", false).await,
        "a completed saga is still stored"
    );
    assert!(run.store.is_empty());
    let (transport, saga) = run.finish().await;
    assert_eq!(*saga.completed_with.lock().unwrap(), Some(ITEMS));
    assert!(saga.item_runs.load(Ordering::SeqCst) >= ITEMS as usize);
    assert_eq!(dead_letters(&transport, "order-item-added"), 0);
    assert_eq!(saga.starts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_duplicate_start_calls_the_hook_and_is_acknowledged() {
    let run = Running::start();
    run.bus.send(&start_order("o-2")).await.unwrap();
    started(&run.store, "o-2").await;
    let (_, stamp) = run.store.get("order", "o-2").await.unwrap();
    run.bus.send(&start_order("o-2")).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || run
            .saga
            .duplicates
            .load(Ordering::SeqCst)
            == 1)
        .await
    );
    // The duplicate neither ran the start nor touched the saga.
    let (_, after) = run.store.get("order", "o-2").await.unwrap();
    assert_eq!(after, stamp);
    let (transport, saga) = run.finish().await;
    assert_eq!(saga.starts.load(Ordering::SeqCst), 1);
    assert_eq!(saga.start_attempts.load(Ordering::SeqCst), 1);
    assert_eq!(dead_letters(&transport, "order-started"), 0);
}

async fn failed_start_is_deleted_and_retried(how: &str) {
    let run = Running::start();
    let id = format!("o-{how}");
    let message = StartOrder {
        order: id.clone(),
        fail_first: Some(how.into()),
    };
    run.bus.send(&message).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || run
            .saga
            .start_attempts
            .load(Ordering::SeqCst)
            >= 1)
        .await
    );
    // Between the failed attempt and its retry (300 ms later) the saga is gone.
    assert!(
        saga_is(&run.store, &id, false).await,
        "the failed start left its saga behind"
    );
    assert_eq!(
        run.saga.start_attempts.load(Ordering::SeqCst),
        1,
        "retried too early to check"
    );
    let state = started(&run.store, &id).await;
    assert_eq!(
        state,
        OrderState {
            started: true,
            items: 0,
            scribble: 0
        }
    );
    let (transport, saga) = run.finish().await;
    assert_eq!(saga.start_attempts.load(Ordering::SeqCst), 2);
    assert_eq!(
        saga.duplicates.load(Ordering::SeqCst),
        0,
        "the retry was taken for a duplicate"
    );
    assert_eq!(dead_letters(&transport, "order-started"), 0);
}

#[tokio::test]
async fn a_failing_start_deletes_the_saga_and_the_retry_starts_it_again() {
    failed_start_is_deleted_and_retried("error").await;
}

#[tokio::test]
async fn a_panicking_start_deletes_the_saga_and_the_retry_starts_it_again() {
    failed_start_is_deleted_and_retried("panic").await;
}

#[tokio::test]
async fn a_handler_that_only_reads_writes_nothing() {
    let run = Running::start();
    run.bus.send(&start_order("o-3")).await.unwrap();
    started(&run.store, "o-3").await;
    let (_, stamp) = run.store.get("order", "o-3").await.unwrap();
    run.bus
        .send(&LookAt {
            order: "o-3".into(),
        })
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || run
            .saga
            .looks
            .load(Ordering::SeqCst)
            == 1)
        .await
    );
    let (_, after) = run.store.get("order", "o-3").await.unwrap();
    assert_eq!(after, stamp, "a read-only handler rewrote the saga");
    run.finish().await;
}

#[tokio::test]
async fn a_message_of_an_unknown_saga_is_retried_then_dead_lettered() {
    let run = Running::start();
    run.bus
        .send(&LookAt {
            order: "never-started".into(),
        })
        .await
        .unwrap();
    let transport = run.transport.clone();
    assert!(
        eventually(Duration::from_secs(10), || dead_letters(
            &transport,
            "order-looked-at"
        ) == 1)
        .await
    );
    let (transport, saga) = run.finish().await;
    assert_eq!(saga.looks.load(Ordering::SeqCst), 0);
    let dead = transport.dead_letters(&Source::queue("order-looked-at").unwrap());
    assert_eq!(
        dead[0].known_reason(),
        Some(DeadLetterReason::DeliveryLimit)
    );
    assert_eq!(dead[0].delivery_count, 2);
    let error = &dead[0].errors.last().unwrap().message;
    assert!(
        error.contains("sagas:order:never-started") && error.contains("not found"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_sent_before_their_start_wait_for_it() {
    let run = Running::start();
    let items: Vec<AddItem> = (0..ITEMS)
        .map(|_| AddItem {
            order: "o-4".into(),
        })
        .collect();
    run.bus.send_batch(&items).await.unwrap();
    // Give the items a few failed rounds before the start arrives.
    assert!(
        eventually(Duration::from_secs(5), || {
            run.transport
                .stats(&Source::queue("order-item-added").unwrap())
                .delayed
                > 0
        })
        .await
    );
    run.bus.send(&start_order("o-4")).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || run
            .saga
            .completed_with
            .lock()
            .unwrap()
            .is_some())
        .await
    );
    assert!(saga_is(&run.store, "o-4", false).await);
    let (transport, _) = run.finish().await;
    assert_eq!(dead_letters(&transport, "order-item-added"), 0);
}

/// A saga whose late messages are simply dropped.
struct Lenient {
    dropped: AtomicBool,
}

impl Saga for Lenient {
    type State = ();
    const PARTITION_KEY: &'static str = "lenient";
}

#[async_trait]
impl ContinueSaga<AddItem> for Lenient {
    fn saga_id(&self, message: &AddItem) -> String {
        message.order.clone()
    }
    async fn handle(
        &self,
        _: AddItem,
        _: &mut SagaData<()>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        unreachable!("no lenient saga is ever started")
    }
    async fn on_not_found(
        &self,
        _: AddItem,
        error: Error,
        _: &Context,
    ) -> Result<(), ProcessError> {
        assert!(matches!(error, Error::SagaNotFound { .. }), "{error:?}");
        self.dropped.store(true, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn on_not_found_can_acknowledge_late_messages() {
    let transport = MemoryTransport::new();
    let saga = Arc::new(Lenient {
        dropped: AtomicBool::new(false),
    });
    let host = Host::builder()
        .transport(transport.clone())
        .saga_store(MemorySagaStore::new())
        .saga_continue::<AddItem, _>(Arc::clone(&saga))
        .build()
        .unwrap();
    let bus = host.bus();
    let stop = CancellationToken::new();
    let signal = stop.clone();
    let handle = tokio::spawn(host.run(async move { signal.cancelled().await }));
    bus.send(&AddItem {
        order: "gone".into(),
    })
    .await
    .unwrap();
    let queue = Source::queue("order-item-added").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            saga.dropped.load(Ordering::SeqCst) && transport.stats(&queue).is_empty()
        })
        .await
    );
    stop.cancel();
    handle.await.unwrap().unwrap();
}

#[test]
fn sagas_without_a_store_or_with_a_bad_partition_key_are_refused() {
    let saga = Arc::new(OrderSaga::default());
    let error = Host::builder()
        .transport(MemoryTransport::new())
        .saga_start::<StartOrder, _>(saga)
        .build()
        .unwrap_err();
    assert!(
        matches!(&error, Error::Config(text) if text.contains("saga_store")),
        "{error}"
    );

    struct Bad;
    impl Saga for Bad {
        type State = ();
        const PARTITION_KEY: &'static str = "has:colon";
    }
    #[async_trait]
    impl ContinueSaga<AddItem> for Bad {
        fn saga_id(&self, m: &AddItem) -> String {
            m.order.clone()
        }
        async fn handle(
            &self,
            _: AddItem,
            _: &mut SagaData<()>,
            _: &Context,
        ) -> Result<(), ProcessError> {
            Ok(())
        }
    }
    let error = Host::builder()
        .transport(MemoryTransport::new())
        .saga_store(MemorySagaStore::new())
        .saga_continue::<AddItem, _>(Arc::new(Bad))
        .build()
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidName { name, .. } if name == "has:colon"),
        "{error}"
    );

    // The same command cannot both start and continue.
    let saga = Arc::new(OrderSaga::default());
    struct Twice;
    impl Saga for Twice {
        type State = ();
        const PARTITION_KEY: &'static str = "twice";
    }
    #[async_trait]
    impl ContinueSaga<StartOrder> for Twice {
        fn saga_id(&self, m: &StartOrder) -> String {
            m.order.clone()
        }
        async fn handle(
            &self,
            _: StartOrder,
            _: &mut SagaData<()>,
            _: &Context,
        ) -> Result<(), ProcessError> {
            Ok(())
        }
    }
    let error = Host::builder()
        .transport(MemoryTransport::new())
        .saga_store(MemorySagaStore::new())
        .saga_start::<StartOrder, _>(saga)
        .saga_continue::<StartOrder, _>(Arc::new(Twice))
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("two processors"), "{error}");
}

/// Saga timeouts on the in-memory transport and store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_timeouts_fire_only_for_the_state_that_asked() {
    bus_conformance::saga_timeouts_fire_only_for_the_state_that_asked(
        Arc::new(MemoryTransport::new()),
        Arc::new(MemorySagaStore::new()),
    )
    .await;
}
