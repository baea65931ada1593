//! What a handler's run keeps beside its message: step marks (`once.rs`, `ctx.once`) and
//! singleton processors' leases (`singleton.rs`).

pub(crate) mod once;
pub(crate) mod singleton;
