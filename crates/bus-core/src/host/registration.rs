//! Type erasure: a processor becomes a function from an encoded body to a handler future.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::{
    BoxError, Command, CommandProcessor, Context, DeadLettering, EventProcessor, Format, Message,
    MessageDescriptor, ProcessError, ProcessingSettings, Result, Subscription,
};

use crate::transport::Source;

/// The future of one handler call, borrowing the message's context (the host keeps the
/// context for the whole call: no copy per message).
pub(crate) type Handling<'a> = BoxFuture<'a, Result<(), ProcessError>>;

/// The future of a processor's `before_dead_letter` hook.
pub(crate) type HookCall<'a> = BoxFuture<'a, Result<(), BoxError>>;

/// Decodes a body and returns the processor's future; a body that does not decode is an
/// error here, before any middleware runs.
pub(crate) trait InvokeFn: Send + Sync {
    fn call<'a>(&'a self, body: &Bytes, format: Format, ctx: &'a Context) -> Result<Handling<'a>>;

    /// Decodes a body and returns the processor's hook before a dead letter; `None` when
    /// the processor has none (sagas).
    fn before_dead_letter<'a>(
        &'a self,
        body: Bytes,
        format: Format,
        ctx: &'a Context,
        dead_letter: &'a DeadLettering<'a>,
    ) -> Result<Option<HookCall<'a>>> {
        let _ = (body, format, ctx, dead_letter);
        Ok(None)
    }
}

impl<F> InvokeFn for F
where
    F: for<'a> Fn(&Bytes, Format, &'a Context) -> Result<Handling<'a>> + Send + Sync,
{
    fn call<'a>(&'a self, body: &Bytes, format: Format, ctx: &'a Context) -> Result<Handling<'a>> {
        self(body, format, ctx)
    }
}

pub(crate) type Invoke = Arc<dyn InvokeFn>;

/// An [`Invoke`] from a closure (which states the borrow the type alias cannot infer).
pub(crate) fn invoke<F>(f: F) -> Invoke
where
    F: for<'a> Fn(&Bytes, Format, &'a Context) -> Result<Handling<'a>> + Send + Sync + 'static,
{
    Arc::new(f)
}

/// A command processor's handler: the future borrows the processor, so a call costs no
/// reference count.
struct CommandHandler<C, P> {
    processor: P,
    _command: PhantomData<fn(C)>,
}

impl<C: Command, P: CommandProcessor<C>> InvokeFn for CommandHandler<C, P> {
    fn call<'a>(&'a self, body: &Bytes, format: Format, ctx: &'a Context) -> Result<Handling<'a>> {
        let command: C = format.decode_body(C::NAME, body)?;
        Ok(self.processor.process(command, ctx))
    }

    fn before_dead_letter<'a>(
        &'a self,
        body: Bytes,
        format: Format,
        ctx: &'a Context,
        dead_letter: &'a DeadLettering<'a>,
    ) -> Result<Option<HookCall<'a>>> {
        let command: C = format.decode_body(C::NAME, &body)?;
        Ok(Some(self.processor.before_dead_letter(
            command,
            dead_letter,
            ctx,
        )))
    }
}

/// An event processor's handler, as [`CommandHandler`].
struct EventHandler<S, P> {
    processor: P,
    _subscription: PhantomData<fn(S)>,
}

impl<S: Subscription, P: EventProcessor<S>> InvokeFn for EventHandler<S, P> {
    fn call<'a>(&'a self, body: &Bytes, format: Format, ctx: &'a Context) -> Result<Handling<'a>> {
        let event: S::Event = format.decode_body(<S::Event as Message>::NAME, body)?;
        Ok(self.processor.process(event, ctx))
    }

    fn before_dead_letter<'a>(
        &'a self,
        body: Bytes,
        format: Format,
        ctx: &'a Context,
        dead_letter: &'a DeadLettering<'a>,
    ) -> Result<Option<HookCall<'a>>> {
        let event: S::Event = format.decode_body(<S::Event as Message>::NAME, &body)?;
        Ok(Some(self.processor.before_dead_letter(
            event,
            dead_letter,
            ctx,
        )))
    }
}

/// How a processor came to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A builder call: `command`, `event`, a saga.
    Explicit,
    /// `#[processor]`, through `register_processors`.
    Registry,
}

/// One processor bound to the source it consumes.
#[derive(Clone)]
pub(crate) struct Registration {
    pub(crate) source: Source,
    pub(crate) message: MessageDescriptor,
    pub(crate) settings: ProcessingSettings,
    pub(crate) invoke: Invoke,
    /// The processor's type, for errors that name it.
    pub(crate) processor: &'static str,
    pub(crate) origin: Origin,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("source", &self.source)
            .field("message", &self.message)
            .field("settings", &self.settings)
            .field("processor", &self.processor)
            .field("origin", &self.origin)
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
            settings: settings.in_range(),
            invoke,
            processor: "a saga",
            origin: Origin::Explicit,
        }
    }

    /// The same registration, marked as coming from the registry.
    pub(crate) fn registered_by_attribute(mut self) -> Self {
        self.origin = Origin::Registry;
        self
    }

    pub(crate) fn command<C: Command, P: CommandProcessor<C>>(processor: P) -> Result<Self> {
        let source = Source::queue(C::NAME)?;
        let settings = processor.settings();
        let invoke: Invoke = Arc::new(CommandHandler::<C, P> {
            processor,
            _command: PhantomData,
        });
        Ok(Registration {
            processor: std::any::type_name::<P>(),
            ..Registration::from_parts(source, C::descriptor(), settings, invoke)
        })
    }

    pub(crate) fn event<S: Subscription, P: EventProcessor<S>>(processor: P) -> Result<Self> {
        let source = Source::subscription(<S::Event as Message>::NAME, S::NAME)?;
        let settings = processor.settings();
        let invoke: Invoke = Arc::new(EventHandler::<S, P> {
            processor,
            _subscription: PhantomData,
        });
        Ok(Registration {
            processor: std::any::type_name::<P>(),
            ..Registration::from_parts(source, S::Event::descriptor(), settings, invoke)
        })
    }
}
