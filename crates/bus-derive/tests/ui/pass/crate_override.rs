#![deny(warnings, unused_qualifications, rust_2018_idioms)]

// The runtime crate reached under other names: a renamed extern crate, and a re-export
// inside a facade module. No `bus_core` path may appear in the expansion.
extern crate bus_core as renamed;

use renamed::{EventSubscription, Message, RedisCommand, RedisEvent, Subscription};
use serde::{Deserialize, Serialize};

mod facade {
    pub use bus_core as core;
}

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(crate = "renamed", queue = "renamed-queue")]
struct ViaRename;

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "facade-topic", crate = "crate::facade::core", format = "json")]
struct ViaFacade;

#[derive(EventSubscription)]
#[bus(event = ViaFacade, name = "facade-sub", crate = "self::facade::core")]
struct FacadeSubscription;

fn main() {
    assert_eq!(<ViaRename as Message>::NAME, "renamed-queue");
    assert_eq!(<ViaFacade as Message>::NAME, "facade-topic");
    assert_eq!(<FacadeSubscription as Subscription>::NAME, "facade-sub");
    shim_main();
}

// The override is really used: a stand-in runtime with traits of its own (and none of
// bus_core's supertraits) receives the impls.
mod shim {
    pub enum Format {
        Json,
    }
    pub enum MessageKind {
        Command,
    }
    pub trait Message {
        const NAME: &'static str;
        const KIND: MessageKind;
        const FORMAT: Option<Format> = None;
    }
    pub trait Command: Message {}
}

#[derive(RedisCommand)]
#[bus(queue = "shimmed", crate = "shim", format = "json")]
struct Shimmed;

fn shim_main() {
    assert_eq!(<Shimmed as shim::Message>::NAME, "shimmed");
    assert!(matches!(
        <Shimmed as shim::Message>::KIND,
        shim::MessageKind::Command
    ));
    assert!(matches!(
        <Shimmed as shim::Message>::FORMAT,
        Some(shim::Format::Json)
    ));
}
