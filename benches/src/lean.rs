//! A lean pipelined RESP writer on one TCP connection: what a single `RPUSH` costs the
//! client with nothing but the protocol (one mutex, one buffer, one `oneshot` per call),
//! to tell fred's own cost per command from the bus's (docs/performance.md, "Today's
//! figures"). It speaks only `RPUSH key value` and integer replies; a bench tool, not a
//! client.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};

/// One connection; clone it freely.
#[derive(Clone)]
pub struct LeanWriter {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the writer task when `out` has something.
    wake: Notify,
}

/// Commands not yet written, and the callers waiting for replies in the order sent.
#[derive(Default)]
struct State {
    out: Vec<u8>,
    waiting: VecDeque<oneshot::Sender<i64>>,
}

impl std::fmt::Debug for LeanWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeanWriter")
    }
}

impl LeanWriter {
    /// Connects to `url` (`redis://host:port[/db]`, no password) and starts its writer
    /// and reader tasks.
    pub async fn connect(url: &str) -> LeanWriter {
        let address = url
            .trim_start_matches("redis://")
            .split('/')
            .next()
            .expect("host:port");
        let stream = TcpStream::connect(address).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let (mut reader, mut writer) = stream.into_split();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        });
        let writing = Arc::clone(&shared);
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            loop {
                writing.wake.notified().await;
                std::mem::swap(&mut writing.state.lock().unwrap().out, &mut buffer);
                if buffer.is_empty() {
                    continue;
                }
                if writer.write_all(&buffer).await.is_err() {
                    return;
                }
                buffer.clear();
            }
        });
        let reading = Arc::clone(&shared);
        tokio::spawn(async move {
            let mut input = BytesMut::with_capacity(64 * 1024);
            let mut replies = Vec::new();
            loop {
                match reader.read_buf(&mut input).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                while let Some(reply) = integer_reply(&mut input) {
                    replies.push(reply);
                }
                let mut state = reading.state.lock().unwrap();
                for reply in replies.drain(..) {
                    let waiter = state.waiting.pop_front().expect("a caller per reply");
                    let _ = waiter.send(reply);
                }
            }
        });
        LeanWriter { shared }
    }

    /// `RPUSH key value`: the list's length after the push.
    pub async fn rpush(&self, key: &str, value: &[u8]) -> i64 {
        let (sent, reply) = oneshot::channel();
        {
            let mut state = self.shared.state.lock().unwrap();
            let out = &mut state.out;
            out.extend_from_slice(b"*3\r\n$5\r\nRPUSH\r\n");
            bulk(out, key.as_bytes());
            bulk(out, value);
            state.waiting.push_back(sent);
        }
        self.shared.wake.notify_one();
        reply.await.expect("the connection closed")
    }
}

/// Appends a RESP bulk string.
fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(bytes.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Takes one whole `:<n>\r\n` off the front of `input`, if it is there; panics on any
/// other reply (an error): the bench's pushes cannot fail.
fn integer_reply(input: &mut BytesMut) -> Option<i64> {
    let end = input.windows(2).position(|w| w == b"\r\n")?;
    assert_eq!(input[0], b':', "an integer reply, got {:?}", &input[..end]);
    let text = std::str::from_utf8(&input[1..end]).expect("ASCII");
    let reply = text.parse().expect("an integer");
    input.advance(end + 2);
    Some(reply)
}
