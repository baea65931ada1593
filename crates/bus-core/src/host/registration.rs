//! Type erasure: a processor becomes a function from an encoded body to a handler future.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::{
    Command, CommandProcessor, Context, EventProcessor, Format, Message, MessageDescriptor,
    ProcessError, ProcessingSettings, Result, Source, Subscription,
};

/// Decodes a body and returns the processor's future; a body that does not decode is an
/// error here, before any middleware runs.
pub(crate) type Invoke = Arc<
    dyn Fn(Bytes, Format, Context) -> Result<BoxFuture<'static, Result<(), ProcessError>>>
        + Send
        + Sync,
>;

/// One processor bound to the source it consumes.
#[derive(Clone)]
pub(crate) struct Registration {
    pub(crate) source: Source,
    pub(crate) message: MessageDescriptor,
    pub(crate) settings: ProcessingSettings,
    pub(crate) invoke: Invoke,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("source", &self.source)
            .field("message", &self.message)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// A registration from its parts (sagas build their own invoke function).
    pub(crate) fn from_parts(
        source: Source,
        message: MessageDescriptor,
        settings: ProcessingSettings,
        invoke: Invoke,
    ) -> Self {
        Registration {
            source,
            message,
            settings,
            invoke,
        }
    }

    pub(crate) fn command<C: Command, P: CommandProcessor<C>>(processor: P) -> Result<Self> {
        let source = Source::queue(C::NAME)?;
        let settings = processor.settings();
        let processor = Arc::new(processor);
        let invoke: Invoke = Arc::new(move |body, format, ctx| {
            let command: C = format.decode_body(C::NAME, &body)?;
            let processor = Arc::clone(&processor);
            Ok(Box::pin(
                async move { processor.process(command, &ctx).await },
            ))
        });
        Ok(Registration {
            source,
            message: C::descriptor(),
            settings,
            invoke,
        })
    }

    pub(crate) fn event<S: Subscription, P: EventProcessor<S>>(processor: P) -> Result<Self> {
        let source = Source::subscription(<S::Event as Message>::NAME, S::NAME)?;
        let settings = processor.settings();
        let processor = Arc::new(processor);
        let invoke: Invoke = Arc::new(move |body, format, ctx| {
            let event: S::Event = format.decode_body(<S::Event as Message>::NAME, &body)?;
            let processor = Arc::clone(&processor);
            Ok(Box::pin(
                async move { processor.process(event, &ctx).await },
            ))
        });
        Ok(Registration {
            source,
            message: S::Event::descriptor(),
            settings,
            invoke,
        })
    }
}
