#![deny(warnings, unused_qualifications, rust_2018_idioms)]

use bus_core::{Command, Message, MessageKind, RedisCommand};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "thumbnail-requested")]
struct ThumbnailRequested {
    image_id: String,
}

// Every allowed character, and the longest allowed name (200 bytes).
#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "Az09._-")]
struct AllCharacters;

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(
    queue = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
)]
struct LongestName;

// Enums are messages too.
#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "resize")]
enum Resize {
    Width(u32),
    Height(u32),
}

fn assert_command<T: Command>() {}

fn main() {
    assert_command::<ThumbnailRequested>();
    assert_command::<AllCharacters>();
    assert_command::<LongestName>();
    assert_command::<Resize>();
    assert_eq!(<ThumbnailRequested as Message>::NAME, "thumbnail-requested");
    assert_eq!(<LongestName as Message>::NAME.len(), 200);
    assert!(matches!(<Resize as Message>::KIND, MessageKind::Command));
    let _ = (
        ThumbnailRequested {
            image_id: String::new(),
        }
        .image_id,
        Resize::Width(1),
        Resize::Height(1),
    );
}
