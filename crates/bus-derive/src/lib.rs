//! Derive macros for bus message contracts.
//!
//! Used through bus-core (its default `derive` feature re-exports them):
//!
//! ```
//! use bus_core::{Message, RedisCommand};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, RedisCommand)]
//! #[bus(queue = "thumbnail-requested")]
//! struct ThumbnailRequested {
//!     image_id: String,
//! }
//!
//! assert_eq!(ThumbnailRequested::NAME, "thumbnail-requested");
//! ```
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
//! `#[processor]` on an `impl CommandProcessor<C> for P` or `impl EventProcessor<S> for P`
//! block puts the processor into the link-time registry that
//! `HostBuilder::register_processors` reads (made with `Default`, or
//! `#[processor(new = path::to::constructor)]`).
//!
//! Names (queue, topic, subscription) are checked at compile time: 1 to 200 bytes of ASCII
//! letters, digits, `.`, `_` and `-`, since they become parts of Redis keys. Every mistake
//! in a `#[bus(...)]` attribute is a compile error at the offending token.

#![warn(missing_docs)]
mod attr;
mod ctxt;
mod expand;
mod processor;

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

/// Registers a processor for `HostBuilder::register_processors`: put it on an
/// `impl CommandProcessor<C> for P` or `impl EventProcessor<S> for P` block. The processor
/// is made with `Default`, or with `#[processor(new = path::to::constructor)]` (a
/// `fn() -> P`); `crate = "path::to::bus_core"` as on the derives.
#[proc_macro_attribute]
pub fn processor(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    // On a mistake the item is kept, so that the error is the only one.
    processor::expand(args.into(), item.clone())
        .unwrap_or_else(|e| {
            let mut out = e.into_compile_error();
            out.extend(item);
            out
        })
        .into()
}

fn run(input: TokenStream, derive: Derive) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input, derive)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
