//! What a handler of a BabelQueue queue can read of the element beyond the bus's own
//! context: the envelope's stored `attempts`, carried by a header the wire format sets on
//! decode, so bus-core's [`Context`] needs no BabelQueue concept.

use bus_core::Context;

use crate::format::ATTEMPTS_HEADER;

/// BabelQueue's view of a handler's [`Context`].
///
/// ```no_run
/// # use bus_core::Context;
/// use bus_babelqueue::ContextExt;
///
/// fn log(ctx: &Context) {
///     // `attempts` as BabelQueue's SDK handlers see it in the envelope; the bus's
///     // `delivery_count` also counts this delivery (and, on the legacy layout, the
///     // adapter's crash recoveries).
///     println!("attempts {:?}, delivery {}", ctx.stored_attempts(), ctx.delivery_count());
/// }
/// ```
pub trait ContextExt {
    /// The envelope's `attempts` as stored when this delivery was reserved (absent or
    /// null reads as 0): the failed deliveries BabelQueue counted before this one; on the
    /// Laravel layout its crash recoveries too, as there they count in `attempts`. What an
    /// SDK handler finds in the envelope. `None` when the message did not come from a
    /// BabelQueue queue.
    fn stored_attempts(&self) -> Option<i64>;
}

impl ContextExt for Context {
    fn stored_attempts(&self) -> Option<i64> {
        self.headers().get(ATTEMPTS_HEADER)?.parse().ok()
    }
}
