use async_trait::async_trait;
use bus_core::{processor, CommandProcessor, Context, ProcessError, RedisCommand};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders")]
struct Order;

// Neither `Default` nor `new = ...`: the registry cannot make it.
struct Orders(u32);

#[processor]
#[async_trait]
impl CommandProcessor<Order> for Orders {
    async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
        let _ = self.0;
        Ok(())
    }
}

fn main() {}
