//! Checks of saga timeouts on a transport and a saga store: a timeout is handled only
//! while the saga is as the step that asked for it left it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::wait_until;
use bus_core::{
    Context, ContinueSaga, Host, Message, MessageKind, Middleware, Next, ProcessError, Saga,
    SagaData, SagaStore, StartSaga, Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Open {
    order: String,
}
command!(Open, "conformance-order-opened");

#[derive(Debug, Serialize, Deserialize)]
struct Pay {
    order: String,
    complete: bool,
}
command!(Pay, "conformance-order-paid");

#[derive(Debug, Serialize, Deserialize)]
struct Expire {
    order: String,
}
command!(Expire, "conformance-order-expired");

#[derive(Debug, Default, Serialize, Deserialize)]
struct Order {
    step: String,
}

/// What each order's timeout found when it was handled.
#[derive(Default)]
struct Orders {
    expired: Mutex<Vec<(String, String)>>,
}

impl Saga for Orders {
    type State = Order;
    const PARTITION_KEY: &'static str = "conformance-order";
}

/// How long the timeouts wait: long enough for a payment sent once its order is open to
/// be handled first on a loaded machine.
const DELAY: Duration = Duration::from_secs(2);

#[async_trait]
impl StartSaga<Open> for Orders {
    fn saga_id(&self, message: &Open) -> String {
        message.order.clone()
    }
    async fn start(
        &self,
        message: Open,
        saga: &mut SagaData<Order>,
        ctx: &Context,
    ) -> Result<(), ProcessError> {
        saga.state_mut().step = "opened".into();
        ctx.request_timeout(
            DELAY,
            Expire {
                order: message.order,
            },
        )
        .map_err(ProcessError::dead_letter)
    }
}

#[async_trait]
impl ContinueSaga<Pay> for Orders {
    fn saga_id(&self, message: &Pay) -> String {
        message.order.clone()
    }
    async fn handle(
        &self,
        message: Pay,
        saga: &mut SagaData<Order>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        if message.complete {
            saga.complete();
        } else {
            saga.state_mut().step = "paid".into();
        }
        Ok(())
    }
}

#[async_trait]
impl ContinueSaga<Expire> for Orders {
    fn saga_id(&self, message: &Expire) -> String {
        message.order.clone()
    }
    async fn handle(
        &self,
        message: Expire,
        saga: &mut SagaData<Order>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        self.expired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((message.order, saga.state().step.clone()));
        saga.state_mut().step = "expired".into();
        Ok(())
    }
}

/// Counts the deliveries of timeouts that completed (handled or dropped).
#[derive(Clone, Default)]
struct Arrivals(Arc<AtomicU32>);

#[async_trait]
impl Middleware for Arrivals {
    async fn handle(&self, ctx: &Context, next: Next<'_>) -> Result<(), ProcessError> {
        let timeout = ctx.message_type() == Expire::TYPE;
        let outcome = next.run(ctx).await;
        if timeout && outcome.is_ok() {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        outcome
    }
}

/// Three orders each ask for a timeout when opened: the one left alone is handled on the
/// state its step left; the one paid since (moved on) and the one completed since have
/// theirs dropped, acknowledged without running the handler (nor retried, nor
/// dead-lettered).
pub async fn saga_timeouts_fire_only_for_the_state_that_asked(
    transport: Arc<dyn Transport>,
    store: Arc<dyn SagaStore>,
) {
    let orders = Arc::new(Orders::default());
    let arrivals = Arrivals::default();
    let running = Host::builder()
        .transport(transport)
        .saga_store(Arc::clone(&store))
        .middleware(arrivals.clone())
        .saga_start::<Open, _>(Arc::clone(&orders))
        .saga_continue::<Pay, _>(Arc::clone(&orders))
        .saga_continue::<Expire, _>(Arc::clone(&orders))
        .build()
        .expect("host builds")
        .start()
        .await
        .expect("host starts");
    let bus = running.bus();
    for order in ["left", "paid", "done"] {
        let open = Open {
            order: order.into(),
        };
        bus.send(&open).await.expect("sent");
    }
    // Paid once open, well before the timeouts are due.
    for order in ["paid", "done"] {
        let mut open = false;
        for _ in 0..400 {
            open = store
                .get(Orders::PARTITION_KEY, order)
                .await
                .is_ok_and(|(state, _)| !state.is_empty());
            if open {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(open, "order {order} was not opened");
    }
    for (order, complete) in [("paid", false), ("done", true)] {
        let pay = Pay {
            order: order.into(),
            complete,
        };
        bus.send(&pay).await.expect("sent");
    }
    let all = wait_until(Duration::from_secs(20), || {
        arrivals.0.load(Ordering::SeqCst) >= 3
    })
    .await;
    let expired = orders
        .expired
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert!(
        all,
        "{} of 3 timeouts arrived; handled: {expired:?}",
        arrivals.0.load(Ordering::SeqCst)
    );
    assert_eq!(
        expired,
        vec![("left".to_owned(), "opened".to_owned())],
        "only the timeout of the saga left as its step left it is handled"
    );
    running.shutdown().await.expect("stops");
}
