//! The pipeline around every handler: logging, timing, throttling, saga loading...
//!
//! A middleware gets the message's [`Context`] and the rest of the pipeline as [`Next`];
//! it runs code before and after `next.run(ctx)`, or returns without calling it.
//!
//! ```
//! use std::time::Instant;
//! use async_trait::async_trait;
//! use bus_core::{Context, Middleware, Next, ProcessError};
//!
//! #[derive(Debug)]
//! struct PerformanceLogger;
//!
//! #[async_trait]
//! impl Middleware for PerformanceLogger {
//!     async fn handle(&self, ctx: &Context, next: Next<'_>) -> Result<(), ProcessError> {
//!         let started = Instant::now();
//!         let result = next.run(ctx).await;
//!         println!("{} took {:?}", ctx.message_type(), started.elapsed());
//!         result
//!     }
//! }
//! ```

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;

use crate::{Context, ProcessError};

/// One stage of the handler pipeline.
#[async_trait]
pub trait Middleware: Send + Sync + 'static {
    /// Handles a message; call `next.run(ctx)` to continue the pipeline.
    async fn handle(&self, ctx: &Context, next: Next<'_>) -> Result<(), ProcessError>;
}

impl fmt::Debug for dyn Middleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Middleware")
    }
}

/// The rest of the pipeline: the remaining middleware, then the handler.
pub struct Next<'a> {
    rest: &'a [Arc<dyn Middleware>],
    handler: BoxFuture<'a, Result<(), ProcessError>>,
}

impl<'a> Next<'a> {
    pub(crate) fn new(
        pipeline: &'a [Arc<dyn Middleware>],
        handler: BoxFuture<'a, Result<(), ProcessError>>,
    ) -> Self {
        Next {
            rest: pipeline,
            handler,
        }
    }

    /// Runs the rest of the pipeline.
    pub async fn run(self, ctx: &Context) -> Result<(), ProcessError> {
        match self.rest.split_first() {
            Some((first, rest)) => {
                first
                    .handle(
                        ctx,
                        Next {
                            rest,
                            handler: self.handler,
                        },
                    )
                    .await
            }
            None => self.handler.await,
        }
    }
}

impl fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Next")
            .field("remaining_middleware", &self.rest.len())
            .finish_non_exhaustive()
    }
}
