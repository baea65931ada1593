//! Checks of effects that run once ([`Context::once`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{start_command, wait_until};
use bus_core::{
    Backoff, CommandProcessor, Context, Message, MessageKind, ProcessError, ProcessingSettings,
    Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Charge {
    order: u32,
}
command!(Charge, "conformance-charge");

/// Runs step `charge` (counted), then fails its first delivery after the step; for
/// order 1, then runs step `flaky` (counted), which fails on its first run.
#[derive(Default)]
struct Charger {
    charges: AtomicU32,
    flaky_runs: AtomicU32,
    /// What `once("flaky")` returned when it succeeded.
    flaky_result: AtomicU32,
    /// What `once("charge")` returned, per delivery.
    receipts: Mutex<Vec<(u32, String)>>,
    done: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Charge> for Arc<Charger> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .dead_letter_delivery_limit(10)
            .retry(Backoff::fixed(Duration::from_millis(5)))
    }
    async fn process(&self, charge: Charge, ctx: &Context) -> Result<(), ProcessError> {
        let receipt = ctx
            .once("charge", || async {
                let n = self.charges.fetch_add(1, Ordering::SeqCst) + 1;
                Ok::<_, ProcessError>(format!("receipt-{}-{n}", charge.order))
            })
            .await?;
        self.receipts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((ctx.delivery_count(), receipt));
        if ctx.delivery_count() == 1 {
            return Err(ProcessError::retry("failing after the step"));
        }
        if charge.order == 1 {
            let run: u32 = ctx
                .once("flaky", || async {
                    let run = self.flaky_runs.fetch_add(1, Ordering::SeqCst) + 1;
                    if run == 1 {
                        return Err(ProcessError::retry("the step fails on its first run"));
                    }
                    Ok(run)
                })
                .await?;
            self.flaky_result.store(run, Ordering::SeqCst);
        }
        self.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A step that completed is skipped by a later delivery of the same message, which gets
/// the result the step stored; a step that failed leaves no mark and runs again; another
/// message's step is its own.
pub async fn a_step_done_once_is_skipped_by_redeliveries(transport: Arc<dyn Transport>) {
    let charger = Arc::new(Charger::default());
    let running = start_command::<Charge, _>(transport, Arc::clone(&charger)).await;
    let bus = running.bus();
    bus.send(&Charge { order: 1 }).await.expect("sent");
    assert!(
        wait_until(Duration::from_secs(10), || charger
            .done
            .load(Ordering::SeqCst)
            == 1)
        .await,
        "the message was handled"
    );
    let receipts = charger
        .receipts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    // Deliveries: 1 (charge runs, then fails), 2 (charge skipped, flaky fails), 3 (both
    // skipped or run again as marked).
    assert_eq!(
        charger.charges.load(Ordering::SeqCst),
        1,
        "the step ran once over {} deliveries",
        receipts.len()
    );
    assert!(receipts.len() >= 2, "{receipts:?}");
    assert!(
        receipts.iter().all(|(_, r)| r == "receipt-1-1"),
        "a skipped step returns the stored result: {receipts:?}"
    );
    assert_eq!(
        charger.flaky_runs.load(Ordering::SeqCst),
        2,
        "a failed step leaves no mark: it runs again, and once more only"
    );
    assert_eq!(charger.flaky_result.load(Ordering::SeqCst), 2);

    bus.send(&Charge { order: 2 }).await.expect("sent");
    assert!(
        wait_until(Duration::from_secs(10), || charger
            .done
            .load(Ordering::SeqCst)
            == 2)
        .await,
        "the second message was handled"
    );
    assert_eq!(
        charger.charges.load(Ordering::SeqCst),
        2,
        "another message's step is its own"
    );
    running.shutdown().await.expect("host stops");
}
