use async_trait::async_trait;
use bus_core::{processor, CommandProcessor, Context, ProcessError, RedisCommand};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders")]
struct Order;

#[processor]
#[derive(Default)]
struct OnAStruct;

#[derive(Default)]
struct Inherent;

#[processor]
impl Inherent {
    fn new() -> Self {
        Inherent
    }
}

#[derive(Default)]
struct OtherTrait;

#[processor]
impl Clone for OtherTrait {
    fn clone(&self) -> Self {
        OtherTrait
    }
}

#[derive(Default)]
struct UnknownKey;

#[processor(name = "orders")]
#[async_trait]
impl CommandProcessor<Order> for UnknownKey {
    async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
        Ok(())
    }
}

#[derive(Default)]
struct Generic<T>(T);

#[processor]
#[async_trait]
impl<T: Default + Send + Sync + 'static> CommandProcessor<Order> for Generic<T> {
    async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
        Ok(())
    }
}

fn main() {}
