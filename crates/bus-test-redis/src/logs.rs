//! [`Logs`]: captures what `tracing` logs while it is alive, as text lines, so a test
//! can check what an operator would read.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use tracing_subscriber::fmt::MakeWriter;

/// The captured log lines (fmt layer, with span fields, no colours), from `capture()`
/// until the value is dropped. Captures the events of the current thread's default
/// subscriber: use it in a `current_thread` test or with spawned tasks on that runtime.
#[derive(Debug)]
pub struct Logs {
    buffer: Buffer,
    _guard: tracing::subscriber::DefaultGuard,
}

#[derive(Debug, Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffer {
    type Writer = Buffer;
    fn make_writer(&'a self) -> Buffer {
        self.clone()
    }
}

impl Logs {
    /// Starts capturing events at `level` and above (`"info"`, `"debug"`, ...).
    pub fn capture(level: &str) -> Logs {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(level))
            .with_writer(buffer.clone())
            .with_ansi(false)
            .finish();
        Logs {
            buffer,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        let bytes = self.buffer.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The lines that contain `text`.
    pub fn matching(&self, text: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.contains(text))
            .collect()
    }
}
