//! Run-time values of derived impls: a wrong expansion that still compiles (swapped kind,
//! lost format, wrong name) fails here.

use std::marker::PhantomData;

use bus_core::{
    Command, Event, EventSubscription, Format, Message, MessageKind, RedisCommand, RedisEvent,
    Subscription,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "thumbnail-requested")]
struct ThumbnailRequested {
    image_id: String,
}

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "resize.v2", format = "msgpack")]
struct Resize;

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "cache-invalidated")]
struct CacheInvalidated {
    key: String,
}

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "image_stored", format = "json")]
struct ImageStored;

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "packed", format = "messagepack")]
struct Packed;

#[derive(EventSubscription)]
#[bus(event = CacheInvalidated, name = "cache")]
struct CacheSubscription;

#[derive(EventSubscription)]
#[bus(name = "audit", event = CacheInvalidated)]
struct AuditSubscription;

#[derive(Serialize, Deserialize, RedisCommand)]
#[serde(bound = "T: Serialize + DeserializeOwned")]
#[bus(queue = "generic")]
struct Generic<T: Serialize + DeserializeOwned + Send + Sync + 'static> {
    value: T,
}

#[derive(EventSubscription)]
#[bus(event = CacheInvalidated, name = "generic-sub")]
struct GenericSubscription<T: Send + Sync + 'static>(PhantomData<T>);

mod renamed {
    pub use bus_core as runtime;
}

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "via-path", crate = "renamed::runtime", format = "json")]
struct ViaPath;

fn is_command<T: Command>() {}
fn is_event<T: Event>() {}
fn event_of<S: Subscription<Event = E>, E: Event>() {}

#[test]
fn command_impls_message_and_command() {
    is_command::<ThumbnailRequested>();
    assert_eq!(<ThumbnailRequested as Message>::NAME, "thumbnail-requested");
    assert!(matches!(
        <ThumbnailRequested as Message>::KIND,
        MessageKind::Command
    ));
    assert!(<ThumbnailRequested as Message>::FORMAT.is_none());
    let _ = ThumbnailRequested {
        image_id: String::new(),
    }
    .image_id;
}

#[test]
fn event_impls_message_and_event() {
    is_event::<CacheInvalidated>();
    assert_eq!(<CacheInvalidated as Message>::NAME, "cache-invalidated");
    assert!(matches!(
        <CacheInvalidated as Message>::KIND,
        MessageKind::Event
    ));
    assert!(<CacheInvalidated as Message>::FORMAT.is_none());
    let _ = CacheInvalidated { key: String::new() }.key;
}

#[test]
fn format_overrides_the_default() {
    assert!(matches!(
        <Resize as Message>::FORMAT,
        Some(Format::MessagePack)
    ));
    assert!(matches!(
        <ImageStored as Message>::FORMAT,
        Some(Format::Json)
    ));
    assert!(matches!(
        <Packed as Message>::FORMAT,
        Some(Format::MessagePack)
    ));
    assert!(matches!(<Resize as Message>::KIND, MessageKind::Command));
    assert!(matches!(<Packed as Message>::KIND, MessageKind::Event));
    assert_eq!(<Resize as Message>::NAME, "resize.v2");
    assert_eq!(<ImageStored as Message>::NAME, "image_stored");
}

#[test]
fn subscription_names_its_event() {
    event_of::<CacheSubscription, CacheInvalidated>();
    event_of::<AuditSubscription, CacheInvalidated>();
    assert_eq!(<CacheSubscription as Subscription>::NAME, "cache");
    assert_eq!(<AuditSubscription as Subscription>::NAME, "audit");
}

#[test]
fn generics_keep_their_parameters() {
    is_command::<Generic<u64>>();
    assert_eq!(<Generic<u64> as Message>::NAME, "generic");
    assert_eq!(<Generic<String> as Message>::NAME, "generic");
    event_of::<GenericSubscription<u8>, CacheInvalidated>();
    assert_eq!(
        <GenericSubscription<u8> as Subscription>::NAME,
        "generic-sub"
    );
    let _ = Generic { value: 1u64 }.value;
    let _ = GenericSubscription::<u8>(PhantomData).0;
}

#[test]
fn crate_override_reaches_the_same_traits() {
    is_event::<ViaPath>();
    assert_eq!(<ViaPath as Message>::NAME, "via-path");
    assert!(matches!(<ViaPath as Message>::FORMAT, Some(Format::Json)));
}
