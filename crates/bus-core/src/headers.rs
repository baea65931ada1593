//! The header names the bus writes and reads in an envelope, and the message type of a
//! reply: part of the wire format other clients speak (docs/wire-format.md).

/// The header of a saga timeout: `<saga key> <stamp>`, the saga (`sagas:<partition>:<id>`)
/// and the stamp of the write that asked for it.
pub const SAGA_TIMEOUT: &str = "bus-saga-timeout";

/// The header naming the schedule that sent a message.
pub const SCHEDULE: &str = "bus-schedule";

/// The header holding the tick a message was sent for (ms since the Unix epoch).
pub const TICK: &str = "bus-schedule-tick";

/// The header that carries a trace id across hops and fleets: BabelQueue's `trace_id`
/// (bus-babelqueue writes it into the BabelQueue envelope), kept as a header on the native
/// envelope.
pub const TRACE_ID: &str = "bq-trace-id";

/// The header that carries a message's deadline: milliseconds since the Unix epoch, in
/// decimal. A host that receives the message after it does not run it (see
/// [`OnExpiry`](crate::OnExpiry)). Set it with [`SendOptions::expires_in`](crate::SendOptions::expires_in)
/// or, for every message of a type, [`BusConfig::time_to_live`](crate::BusConfig::time_to_live).
pub const EXPIRES_AT: &str = "bus-expires-at";

/// Header of a request: the name of the inbox to answer to.
pub const REPLY_TO: &str = "bus-reply-to";

/// Header of a request and of its reply: which request a reply answers.
pub const CORRELATION_ID: &str = "bus-correlation-id";

/// The message type of a reply's envelope.
pub const REPLY_TYPE: &str = "bus.reply";
