#![deny(warnings, unused_qualifications, rust_2018_idioms)]

use std::marker::PhantomData;

use bus_core::{
    Command, Event, EventSubscription, Message, RedisCommand, RedisEvent, Subscription,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

// The derive adds no bounds: what `Message` needs is stated on the type itself.
#[derive(Serialize, Deserialize, RedisCommand)]
#[serde(bound = "T: Serialize + DeserializeOwned")]
#[bus(queue = "wrapped")]
struct Wrapped<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    inner: T,
}

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "changed")]
struct Changed<T: Send + Sync + 'static, const N: usize> {
    #[serde(skip)]
    marker: PhantomData<T>,
}

#[derive(EventSubscription)]
#[bus(event = Changed<T, 3>, name = "changes")]
struct ChangeSubscription<T: Send + Sync + 'static>(PhantomData<T>);

fn assert_command<T: Command>() {}
fn assert_event<T: Event>() {}

fn main() {
    assert_command::<Wrapped<u32>>();
    assert_command::<Wrapped<String>>();
    assert_event::<Changed<u8, 3>>();
    assert_eq!(<Wrapped<u32> as Message>::NAME, "wrapped");
    assert_eq!(<Changed<(), 1> as Message>::NAME, "changed");
    assert_eq!(<ChangeSubscription<u8> as Subscription>::NAME, "changes");
    let _ = Wrapped { inner: 1u32 }.inner;
    let _ = Changed::<u8, 3> {
        marker: PhantomData,
    }
    .marker;
    let _ = ChangeSubscription::<u8>(PhantomData).0;
}
