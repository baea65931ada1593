#![deny(warnings, unused_qualifications, rust_2018_idioms)]

use bus_core::{EventSubscription, RedisEvent, Subscription};
use serde::{Deserialize, Serialize};

mod contracts {
    pub mod cache {
        use super::super::*;

        #[derive(Serialize, Deserialize, RedisEvent)]
        #[bus(topic = "cache-invalidated")]
        pub struct CacheInvalidated {
            pub key: String,
        }
    }
}

// The event is any type path; keys may come in either order and in several attributes.
#[derive(EventSubscription)]
#[bus(event = contracts::cache::CacheInvalidated, name = "cache")]
struct CacheSubscription;

#[derive(EventSubscription)]
#[bus(name = "audit.log_v2")]
#[bus(event = crate::contracts::cache::CacheInvalidated)]
struct AuditSubscription {
    _unused: (),
}

fn same_event<S: Subscription<Event = contracts::cache::CacheInvalidated>>() {}

fn main() {
    same_event::<CacheSubscription>();
    same_event::<AuditSubscription>();
    assert_eq!(<CacheSubscription as Subscription>::NAME, "cache");
    assert_eq!(<AuditSubscription as Subscription>::NAME, "audit.log_v2");
    let _ = contracts::cache::CacheInvalidated { key: String::new() }.key;
}
