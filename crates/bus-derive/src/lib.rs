//! Derive macros for bus message contracts.
//!
//! Use them through `bus_core` (its `derive` feature, on by default), which re-exports
//! them beside the traits they implement:
//!
//! - `#[derive(RedisCommand)]` with `#[bus(queue = "thumbnail-requested")]` implements
//!   `Message` and `Command`;
//! - `#[derive(RedisEvent)]` with `#[bus(topic = "cache-invalidated")]` implements
//!   `Message` and `Event`;
//! - `#[derive(EventSubscription)]` with `#[bus(event = CacheInvalidated, name = "cache")]`
//!   implements `Subscription` for a (usually unit) struct.
//!
//! Optional keys: `format = "json"` or `format = "msgpack"` on commands and events (absent:
//! the bus's default format), and `crate = "path::to::bus_core"` on all three when
//! `bus_core` is reached under another name.
//!
//! Names (queue, topic, subscription) are checked at compile time: 1 to 200 bytes of ASCII
//! letters, digits, `.`, `_` and `-`, since they become parts of Redis keys. Every mistake
//! in a `#[bus(...)]` attribute is a compile error at the offending token.

mod attr;
mod ctxt;
mod expand;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

use crate::attr::Derive;

/// Implements `Message` and `Command`; see the crate docs.
#[proc_macro_derive(RedisCommand, attributes(bus))]
pub fn derive_redis_command(input: TokenStream) -> TokenStream {
    run(input, Derive::Command)
}

/// Implements `Message` and `Event`; see the crate docs.
#[proc_macro_derive(RedisEvent, attributes(bus))]
pub fn derive_redis_event(input: TokenStream) -> TokenStream {
    run(input, Derive::Event)
}

/// Implements `Subscription`; see the crate docs.
#[proc_macro_derive(EventSubscription, attributes(bus))]
pub fn derive_event_subscription(input: TokenStream) -> TokenStream {
    run(input, Derive::Subscription)
}

fn run(input: TokenStream, derive: Derive) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input, derive)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
