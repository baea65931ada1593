#![deny(warnings, unused_qualifications, rust_2018_idioms)]

use bus_core::{Event, Message, MessageKind, RedisEvent};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "cache-invalidated")]
struct CacheInvalidated {
    key: String,
}

fn assert_event<T: Event>() {}

fn main() {
    assert_event::<CacheInvalidated>();
    assert_eq!(<CacheInvalidated as Message>::NAME, "cache-invalidated");
    assert!(matches!(
        <CacheInvalidated as Message>::KIND,
        MessageKind::Event
    ));
    assert!(<CacheInvalidated as Message>::FORMAT.is_none());
    let _ = CacheInvalidated { key: String::new() }.key;
}
