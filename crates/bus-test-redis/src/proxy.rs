//! [`Proxy`]: a TCP proxy on loopback that a test controls, to make connections
//! misbehave without closing them:
//! - after [`Proxy::blackhole`], the connections that exist stop forwarding in both
//!   directions for good (their sockets stay open and silent, like a dead NAT entry),
//!   while new connections forward normally;
//! - between [`Proxy::stall`] and [`Proxy::resume`], every connection, old or new,
//!   forwards nothing and holds what it read (a congested link, a paused VM); on resume
//!   the held bytes go through, late.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

/// A proxy from a free 127.0.0.1 port to `127.0.0.1:target`; stops on drop.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Connections of a generation below this one forward nothing.
    live_from: AtomicU64,
    generation: AtomicU64,
    stopped: AtomicBool,
    stalled: AtomicBool,
    sockets: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    /// Starts forwarding to `127.0.0.1:target`.
    pub fn start(target: u16) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let accept = Arc::clone(&shared);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accept.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let generation = accept.generation.load(Ordering::SeqCst);
                accept.track(&client);
                accept.track(&server);
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let shared = Arc::clone(&accept);
                    thread::spawn(move || shared.pump(from, to, generation));
                }
            }
        });
        Ok(Proxy { port, shared })
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` through the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Every connection open now stops forwarding, for good; new ones forward.
    pub fn blackhole(&self) {
        let next = self.shared.generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.shared.live_from.store(next, Ordering::SeqCst);
    }

    /// Every connection, open now or opened later, stops forwarding until
    /// [`Proxy::resume`]; nothing is closed and nothing read is dropped.
    pub fn stall(&self) {
        self.shared.stalled.store(true, Ordering::SeqCst);
    }

    /// Ends a [`Proxy::stall`]: what was held goes through, then forwarding goes on.
    pub fn resume(&self) {
        self.shared.stalled.store(false, Ordering::SeqCst);
    }
}

impl Shared {
    fn track(&self, socket: &TcpStream) {
        if let Ok(clone) = socket.try_clone() {
            self.sockets
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(clone);
        }
    }

    fn pump(&self, mut from: TcpStream, mut to: TcpStream, generation: u64) {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // A black-holed connection swallows everything and answers nothing.
            if generation < self.live_from.load(Ordering::SeqCst) {
                continue;
            }
            // A stalled link holds the bytes (and, by not reading, the sender's) until it
            // resumes. The proxy's own thread polls; no test waits on this.
            while self.stalled.load(Ordering::SeqCst) && !self.stopped.load(Ordering::SeqCst) {
                thread::sleep(std::time::Duration::from_millis(5));
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        if generation >= self.live_from.load(Ordering::SeqCst) {
            let _ = to.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for socket in self
            .shared
            .sockets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}
