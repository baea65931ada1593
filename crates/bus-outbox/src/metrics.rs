//! The relay's metrics (feature `metrics`), through the `metrics` facade as bus-core
//! records the host's: the application installs the recorder. Without the feature every
//! function here is empty.

#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use crate::outbox::Lag;
use crate::relay::{Claimed, Fate};

/// Committed rows waiting to be relayed (gauge).
pub const ROWS_WAITING: &str = "bus.outbox.rows.waiting";
/// Age of the oldest waiting row (gauge, seconds).
pub const LAG: &str = "bus.outbox.lag";
/// Rows moved to `bus_outbox_dead` so far (gauge, read from the table).
pub const ROWS_DEAD: &str = "bus.outbox.rows.dead";
/// Rows relayed, by `bus.outbox.outcome`: `sent`, `dead`, `kept` (counter).
pub const RELAYED_ROWS: &str = "bus.outbox.relayed.rows";
/// Time from a row's write to its claim by the relay that sent it (histogram, seconds).
pub const RELAY_DELAY: &str = "bus.outbox.relay.delay";

/// Whether metrics are recorded (the lag is read only then).
pub(crate) const ENABLED: bool = cfg!(feature = "metrics");

pub(crate) fn lag(lag: &Lag) {
    #[cfg(feature = "metrics")]
    {
        metrics::gauge!(ROWS_WAITING).set(lag.waiting as f64);
        metrics::gauge!(LAG).set(lag.oldest.as_secs_f64());
        metrics::gauge!(ROWS_DEAD).set(lag.dead as f64);
    }
}

pub(crate) fn relayed(rows: &[Claimed], fates: &[Fate]) {
    #[cfg(feature = "metrics")]
    {
        let (mut sent, mut dead, mut kept) = (0u64, 0u64, 0u64);
        let delay = metrics::histogram!(RELAY_DELAY);
        for (row, fate) in rows.iter().zip(fates) {
            match fate {
                Fate::Sent => {
                    sent += 1;
                    delay.record(row.age.as_secs_f64());
                }
                Fate::Dead(_) => dead += 1,
                Fate::Kept { .. } => kept += 1,
            }
        }
        for (outcome, n) in [("sent", sent), ("dead", dead), ("kept", kept)] {
            if n > 0 {
                metrics::counter!(RELAYED_ROWS, "bus.outbox.outcome" => outcome).increment(n);
            }
        }
    }
}
