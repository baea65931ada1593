//! The handlers' own runtime.
//!
//! Handlers run on threads of their own, apart from the application's runtime, where the
//! host renews locks, flushes acks, fetches and recovers, and where the transport's
//! connections live. A handler that blocks its thread (`std::thread::sleep`, synchronous
//! I/O, a long computation) then delays other handlers, never the renewals that keep its
//! lock: without this, a few blocking handlers on a two-thread runtime starved the
//! renewals, the locks expired, and messages ran twice.

use tokio::runtime::{Builder, Handle, Runtime};

/// A multi-thread runtime that is shut down in the background when dropped (a runtime
/// may not be dropped, blocking, inside an async context; its last user is a worker
/// task).
#[derive(Debug)]
pub(super) struct HandlerRuntime {
    runtime: Option<Runtime>,
    handle: Handle,
}

impl HandlerRuntime {
    /// Starts `threads` handler threads, named `bus-handler`.
    pub(super) fn start(threads: usize) -> crate::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("bus-handler")
            .enable_all()
            .build()
            .map_err(|e| crate::Error::Config(format!("cannot start the handler threads: {e}")))?;
        Ok(HandlerRuntime {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// Where handler tasks are spawned.
    pub(super) fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for HandlerRuntime {
    fn drop(&mut self) {
        // Handlers have finished or been abandoned by now; one that still blocks its
        // thread ends on its own.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// One handler thread per CPU, the size of tokio's default runtime.
pub(super) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}
