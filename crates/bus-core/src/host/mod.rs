//! The host: registration at start-up, then `run` until a shutdown signal.

pub(crate) mod after_ack;
pub(crate) mod breaker;
mod dispatch;
mod handle;
mod handler_runtime;
mod heartbeat;
mod held;
mod lifecycle;
pub mod metrics;
mod outcome;
mod registration;
pub(crate) mod registry;
mod routes;
mod singleton;
mod worker;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use breaker::{BreakerScope, BreakerState, CircuitBreaker};
pub(crate) use lifecycle::deadline_header;
pub use lifecycle::{DeadLettering, OnExpiry};
pub(crate) use registration::{invoke, Registration};
pub use registry::ProcessorEntry;
pub use routes::{FailedMessage, UnknownMessage};
use routes::{Hooks, Routes};
pub(crate) use worker::SETTLE_BOUND;

use crate::context::Scope;
use crate::saga::PendingSaga;
use crate::transport::ConsumerOptions;
use crate::IntoShared;
use crate::{
    Bus, BusConfig, Command, CommandProcessor, ContinueSaga, Error, EventProcessor, Format,
    MessageDescriptor, Middleware, Result, SagaStore, StartSaga, Subscription, Transport,
};

/// Builds a [`Host`]: the transport, the processors, the middleware.
///
/// ```no_run
/// # use bus_core::{Host, MemoryTransport};
/// # async fn demo() -> bus_core::Result<()> {
/// let host = Host::builder()
///     .transport(MemoryTransport::new())
///     // .command::<ThumbnailRequested, _>(ThumbnailProcessor)
///     // .event::<CacheSubscription, _>(CacheProcessor)
///     .build()?;
/// let bus = host.bus();
/// host.run(async { tokio::signal::ctrl_c().await.ok(); }).await
/// # }
/// ```
#[derive(Debug)]
#[must_use]
pub struct HostBuilder {
    transport: Option<Arc<dyn Transport>>,
    bus_config: BusConfig,
    registrations: Vec<Registration>,
    saga_store: Option<Arc<dyn SagaStore>>,
    sagas: Vec<PendingSaga>,
    middleware: Vec<Arc<dyn Middleware>>,
    shutdown_grace: Duration,
    recovery_interval: Duration,
    handler_threads: usize,
    hooks: Hooks,
    errors: Vec<Error>,
    heartbeat_interval: Option<Duration>,
    schedules: Vec<crate::Recurring>,
    schedule_clock: crate::recurring::Clock,
    timing_interval: Option<Duration>,
}

impl Default for HostBuilder {
    fn default() -> Self {
        HostBuilder {
            transport: None,
            bus_config: BusConfig::default(),
            registrations: Vec::new(),
            saga_store: None,
            sagas: Vec::new(),
            middleware: Vec::new(),
            shutdown_grace: Duration::from_secs(30),
            recovery_interval: Duration::from_secs(1),
            handler_threads: handler_runtime::default_threads(),
            hooks: Hooks::default(),
            errors: Vec::new(),
            heartbeat_interval: Some(crate::heartbeat::DEFAULT_HEARTBEAT_INTERVAL),
            schedules: Vec::new(),
            schedule_clock: crate::recurring::Clock::default(),
            timing_interval: Some(crate::timing::DEFAULT_TIMING_INTERVAL),
        }
    }
}

impl HostBuilder {
    /// The transport (Redis, or [`MemoryTransport`](crate::MemoryTransport)), or a shared
    /// one (`Arc<dyn Transport>`).
    pub fn transport(mut self, transport: impl IntoShared<dyn Transport>) -> Self {
        self.transport = Some(transport.into_shared());
        self
    }

    /// The format of messages that do not declare one (JSON by default).
    pub fn format(mut self, format: Format) -> Self {
        self.bus_config = self.bus_config.format(format);
        self
    }

    /// The largest encoded message accepted at send (1 MiB by default).
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.bus_config = self.bus_config.max_message_size(bytes);
        self
    }

    /// Adds a layer that runs on every send and publish of this host's bus, the
    /// handlers' included ([`SendMiddleware`](crate::SendMiddleware)).
    pub fn send_middleware(mut self, middleware: impl crate::SendMiddleware) -> Self {
        self.bus_config = self.bus_config.send_middleware(middleware);
        self
    }

    /// Sends and consumes message type `M` on `name` instead of its declared queue (a
    /// command) or topic (an event): the host's consumers and its bus use the same name
    /// (docs/concepts.md, "Queue names at run time").
    pub fn queue_for<M: crate::Message>(mut self, name: impl Into<String>) -> Self {
        self.bus_config = self.bus_config.queue_for::<M>(name);
        self
    }

    /// Names every queue and topic not named by [`HostBuilder::queue_for`] by
    /// `convention` applied to its declared name, on send and on consume alike:
    /// `.queue_names(|name| format!("staging-{name}"))`.
    pub fn queue_names(
        mut self,
        convention: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        self.bus_config = self.bus_config.queue_names(convention);
        self
    }

    /// Registers a command processor for `C` on `C`'s queue.
    pub fn command<C: Command, P: CommandProcessor<C>>(self, processor: P) -> Self {
        self.register(Registration::command::<C, P>(processor))
    }

    /// Registers an event processor for subscription `S`.
    pub fn event<S: Subscription, P: EventProcessor<S>>(self, processor: P) -> Self {
        self.register(Registration::event::<S, P>(processor))
    }

    /// Registers every processor of the binary marked `#[processor]` (bus-derive), with
    /// its settings, as KnightBus's `RegisterProcessors()` does for an assembly: those of
    /// this crate and of every crate linked in. Mixes with explicit registration: a
    /// processor registered both ways is registered once, the explicit one winning (its
    /// value and settings); two different processors of one message type are an error
    /// at [`HostBuilder::build`] naming both (docs/concepts.md, "Registering processors").
    pub fn register_processors(self) -> Self {
        ProcessorEntry::all()
            .into_iter()
            .fold(self, |builder, entry| entry.register(builder))
    }

    /// [`HostBuilder::register_processors`] for the processors declared in module
    /// `prefix` and the modules under it: a crate's (`"sample_contracts"`) or one of its
    /// modules' (`"my_service::orders"`), as KnightBus's `RegisterProcessors(assembly)`.
    pub fn register_processors_in(self, prefix: &str) -> Self {
        ProcessorEntry::all()
            .into_iter()
            .filter(|entry| entry.is_in(prefix))
            .fold(self, |builder, entry| entry.register(builder))
    }

    /// What `#[processor]` registers for a command processor; not for hand use.
    #[doc(hidden)]
    pub fn __registered_command<C: Command, P: CommandProcessor<C>>(self, processor: P) -> Self {
        self.register(
            Registration::command::<C, P>(processor).map(Registration::registered_by_attribute),
        )
    }

    /// What `#[processor]` registers for an event processor; not for hand use.
    #[doc(hidden)]
    pub fn __registered_event<S: Subscription, P: EventProcessor<S>>(self, processor: P) -> Self {
        self.register(
            Registration::event::<S, P>(processor).map(Registration::registered_by_attribute),
        )
    }

    /// Where sagas keep their state: `bus_redis_saga::RedisSagaStore`, or
    /// [`MemorySagaStore`](crate::MemorySagaStore) for tests. Required when a saga is
    /// registered; there is no implicit default, so that a production host never keeps
    /// its sagas in memory by accident.
    /// A shared one (`Arc<dyn SagaStore>`) is taken as it is.
    pub fn saga_store(mut self, store: impl IntoShared<dyn SagaStore>) -> Self {
        self.saga_store = Some(store.into_shared());
        self
    }

    /// Registers `C` as the message that starts saga `S`, on `C`'s queue. One saga value
    /// is usually shared by its start and continue registrations, hence the `Arc`.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use bus_core::{Host, MemorySagaStore, MemoryTransport};
    /// # fn demo<S, A, B>(saga: S) -> bus_core::Result<()>
    /// # where A: bus_core::Command, B: bus_core::Command,
    /// #       S: bus_core::StartSaga<A> + bus_core::ContinueSaga<B> {
    /// let saga = Arc::new(saga);
    /// let host = Host::builder()
    ///     .transport(MemoryTransport::new())
    ///     .saga_store(MemorySagaStore::new())
    ///     .saga_start::<A, _>(Arc::clone(&saga))
    ///     .saga_continue::<B, _>(saga)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn saga_start<C: Command, S: StartSaga<C>>(mut self, saga: Arc<S>) -> Self {
        match PendingSaga::start::<C, S>(saga) {
            Ok(pending) => self.sagas.push(pending),
            Err(e) => self.errors.push(e),
        }
        self
    }

    /// Registers `C` as a message of the running saga `S`, on `C`'s queue.
    pub fn saga_continue<C: Command, S: ContinueSaga<C>>(mut self, saga: Arc<S>) -> Self {
        match PendingSaga::continuation::<C, S>(saga) {
            Ok(pending) => self.sagas.push(pending),
            Err(e) => self.errors.push(e),
        }
        self
    }

    pub(crate) fn register(mut self, registration: Result<Registration>) -> Self {
        match registration {
            Ok(r) => self.registrations.push(r),
            Err(e) => self.errors.push(e),
        }
        self
    }

    /// Adds a middleware; the first added runs outermost.
    pub fn middleware(mut self, middleware: impl Middleware) -> Self {
        self.middleware.push(Arc::new(middleware));
        self
    }

    /// How long shutdown waits for running handlers (30 s by default). Their context's
    /// cancellation token fires when shutdown starts; handlers still running when the
    /// grace period ends are abandoned, and their messages go back to the queue as a
    /// failed delivery.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// How many threads run handlers (one per CPU by default). Handlers run on threads
    /// of their own, apart from the application's runtime where the host renews locks
    /// and acks: a handler that blocks its thread delays other handlers, never the
    /// renewal of its lock. Blocking work is still best run with
    /// `tokio::task::spawn_blocking`, which does not take a handler thread.
    pub fn handler_threads(mut self, threads: usize) -> Self {
        self.handler_threads = threads.max(1);
        self
    }

    /// How often each consumer looks for messages whose lock expired (1 s by default).
    pub fn recovery_interval(mut self, interval: Duration) -> Self {
        self.recovery_interval = interval.max(Duration::from_millis(10));
        self
    }

    /// How often the host reports its heartbeat through the transport's
    /// [`HostReporter`](crate::heartbeat::HostReporter) (5 s by default; at least 100 ms),
    /// or `None` for no heartbeat. A transport without a reporter sends none either way.
    pub fn heartbeat_interval(mut self, interval: Option<Duration>) -> Self {
        self.heartbeat_interval = interval.map(|i| i.max(Duration::from_millis(100)));
        self
    }

    /// How often the host flushes its per-type timing (handled, failed, a duration
    /// histogram per message type and minute) through the transport's
    /// [`TimingReporter`](crate::timing::TimingReporter): 10 s by default, between 1 s
    /// and 60 s (pick a divisor of a minute, so no flush spans two); `None` for none. A
    /// transport without a reporter keeps none either way.
    pub fn timing_interval(mut self, interval: Option<Duration>) -> Self {
        self.timing_interval =
            interval.map(|i| i.clamp(Duration::from_secs(1), Duration::from_secs(60)));
        self
    }

    /// Called for a delivery whose type no processor of its queue handles; the message
    /// is then acknowledged. Without this hook such a message is dead-lettered
    /// (`unknown_type`).
    pub fn on_unknown_type(
        mut self,
        hook: impl Fn(UnknownMessage<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.hooks.unknown_type = Some(Arc::new(hook));
        self
    }

    /// Called for every failed delivery (retried or dead-lettered), with the error, the
    /// message's type and id when it decoded, and the raw element: for alerting or
    /// logging beyond the host's own.
    pub fn on_error(mut self, hook: impl Fn(FailedMessage<'_>) + Send + Sync + 'static) -> Self {
        self.hooks.on_error = Some(Arc::new(hook));
        self
    }

    /// Sends `make()`'s command on every tick of `cron` (seconds first:
    /// `"0 */5 * * * *"` is every five minutes), in UTC, the schedule named after the
    /// command's queue: [`HostBuilder::schedule`] with a [`Recurring`](crate::Recurring)
    /// for a name, a time zone or a policy for missed ticks. Every host that declares it
    /// presents each tick; the transport stores each tick once (docs/concepts.md,
    /// "Recurring messages").
    pub fn recurring<C: Command>(
        self,
        cron: &str,
        make: impl Fn() -> C + Send + Sync + 'static,
    ) -> Self {
        self.schedule(crate::Recurring::new(cron, make))
    }

    /// Adds a recurring message ([`Recurring`](crate::Recurring)).
    pub fn schedule(mut self, schedule: crate::Recurring) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// Shifts the clock this host's schedules read by `offset_ms`: for tests that
    /// simulate hosts with skewed clocks. Not for production use.
    #[doc(hidden)]
    pub fn schedule_clock_offset(mut self, offset_ms: i64) -> Self {
        self.schedule_clock = crate::recurring::Clock::shifted(offset_ms);
        self
    }

    /// Checks the registrations and builds the host. No I/O happens here.
    pub fn build(mut self) -> Result<Host> {
        let schedules = recurring_schedules(std::mem::take(&mut self.schedules), &mut self.errors);
        // Every invalid registration is reported at once, not only the first.
        if self.errors.len() == 1 {
            return Err(self.errors.remove(0));
        }
        if !self.errors.is_empty() {
            let each: Vec<String> = self
                .errors
                .iter()
                .map(|e| crate::ErrorChain(e).to_string())
                .collect();
            return Err(Error::Config(format!(
                "{} registrations are invalid: {}",
                each.len(),
                each.join("; ")
            )));
        }
        if !self.sagas.is_empty() {
            let store = self.saga_store.take().ok_or_else(|| {
                Error::Config(
                    "sagas are registered but no saga store: call HostBuilder::saga_store".into(),
                )
            })?;
            let cache = Arc::default();
            for pending in self.sagas.drain(..) {
                self.registrations
                    .push(pending.bind(Arc::clone(&store), Arc::clone(&cache)));
            }
        }
        let transport = self
            .transport
            .take()
            .ok_or_else(|| Error::Config("no transport: call HostBuilder::transport".into()))?;
        let routes = routes::group(
            self.registrations,
            self.bus_config.names(),
            &*transport,
            &self.hooks,
        )?;
        let singletons = singleton::leases(&routes, &*transport)?;
        let heartbeat = self
            .heartbeat_interval
            .and_then(|interval| Some((transport.extras().host_reporter?, interval)))
            .map(|(reporter, interval)| heartbeat_of(reporter, &routes, interval));
        let timing = self
            .timing_interval
            .and_then(|interval| Some((transport.extras().timing_reporter?, interval)))
            .map(|(reporter, interval)| {
                let types = routes
                    .iter()
                    .flat_map(|r| r.registrations.iter().map(|r| r.message.message_type()));
                crate::timing::Timing::new(reporter, types, interval)
            });
        let middleware: Arc<[Arc<dyn Middleware>]> = self.middleware.into();
        Ok(Host {
            heartbeat,
            timing,
            bus: Bus::new(transport, self.bus_config),
            routes,
            singletons,
            middleware,
            shutdown_grace: self.shutdown_grace,
            recovery_interval: self.recovery_interval,
            handler_threads: self.handler_threads,
            schedules,
            schedule_clock: self.schedule_clock,
        })
    }
}

/// The schedules checked: an invalid one, or a name used twice, is an error.
fn recurring_schedules(
    schedules: Vec<crate::Recurring>,
    errors: &mut Vec<Error>,
) -> Vec<crate::recurring::Checked> {
    let mut checked: Vec<crate::recurring::Checked> = Vec::new();
    for schedule in schedules {
        match schedule.checked() {
            Ok(s) if checked.iter().any(|c| c.name() == s.name()) => {
                errors.push(Error::Config(format!(
                    "two schedules are named {}: name one with Recurring::name",
                    s.name()
                )))
            }
            Ok(s) => checked.push(s),
            Err(e) => errors.push(e),
        }
    }
    checked
}

/// A started host: its processors run in the background.
///
/// Dropping it without [`RunningHost::shutdown`] stops fetching but does not wait.
#[derive(Debug)]
pub struct RunningHost {
    bus: Bus,
    stop: CancellationToken,
    workers: Vec<tokio::task::JoinHandle<()>>,
    /// The per-type timing's flusher, stopped after the workers so that it records the
    /// runs they finish during shutdown.
    timing: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

impl RunningHost {
    /// A client over the host's transport.
    pub fn bus(&self) -> Bus {
        self.bus.clone()
    }

    /// Shuts down gracefully (see [`Host::run`]) and returns when all is idle.
    pub async fn shutdown(mut self) -> Result<()> {
        tracing::info!("bus host shutting down");
        self.stop_workers().await;
        tracing::info!("bus host stopped");
        Ok(())
    }

    async fn stop_workers(&mut self) {
        self.stop.cancel();
        for worker in self.workers.drain(..) {
            if let Err(e) = worker.await {
                tracing::error!(error = %e, "a worker task failed");
            }
        }
        if let Some((stop, flusher)) = self.timing.take() {
            stop.cancel();
            if let Err(e) = flusher.await {
                tracing::error!(error = %e, "the per-type timing task failed");
            }
        }
    }
}

impl Drop for RunningHost {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some((stop, _)) = &self.timing {
            stop.cancel();
        }
    }
}

/// Runs the registered processors until shutdown.
#[derive(Debug)]
pub struct Host {
    bus: Bus,
    routes: Vec<Routes>,
    /// Per group of routes, in order: its lease if it is a singleton.
    singletons: Vec<Option<singleton::Singleton>>,
    middleware: Arc<[Arc<dyn Middleware>]>,
    shutdown_grace: Duration,
    recovery_interval: Duration,
    handler_threads: usize,
    heartbeat: Option<heartbeat::Heartbeat>,
    schedules: Vec<crate::recurring::Checked>,
    schedule_clock: crate::recurring::Clock,
    timing: Option<crate::timing::Timing>,
}

/// The heartbeat of a host consuming `routes`.
fn heartbeat_of(
    reporter: Arc<dyn crate::heartbeat::HostReporter>,
    routes: &[Routes],
    interval: Duration,
) -> heartbeat::Heartbeat {
    let queues = routes
        .iter()
        .map(|r| source_name(&r.registrations[0].source))
        .collect();
    let concurrency = routes
        .iter()
        .map(|r| r.registrations[0].settings.max_concurrent_calls)
        .sum();
    heartbeat::Heartbeat::new(reporter, queues, concurrency, interval)
}

impl Host {
    /// Starts building a host.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    /// A client for sending messages over this host's transport.
    pub fn bus(&self) -> Bus {
        self.bus.clone()
    }

    /// The message types this host has processors for.
    pub fn messages(&self) -> Vec<MessageDescriptor> {
        self.routes
            .iter()
            .flat_map(|g| g.registrations.iter().map(|r| r.message))
            .collect()
    }

    /// Opens every consumer (registering subscriptions, so that events published from
    /// now on reach them) and processes messages in the background until
    /// [`RunningHost::shutdown`]. Fails, with nothing left running, if a consumer cannot
    /// be opened.
    pub async fn start(self) -> Result<RunningHost> {
        let mut running = RunningHost {
            bus: self.bus.clone(),
            stop: CancellationToken::new(),
            workers: Vec::with_capacity(self.routes.len()),
            timing: None,
        };
        let handler_runtime = Arc::new(handler_runtime::HandlerRuntime::start(
            self.handler_threads,
        )?);
        let mut breakers = Vec::new();
        let mut handler_slots = Vec::new();
        for (routes, singleton) in self.routes.into_iter().zip(self.singletons) {
            let registration = routes.registrations[0].clone();
            let options = ConsumerOptions::new(
                registration.settings.message_lock_timeout,
                registration.settings.dead_letter_delivery_limit,
            )
            .recovery_interval(self.recovery_interval);
            let consumer = match self
                .bus
                .transport()
                .consumer(&registration.source, options)
                .await
            {
                Ok(consumer) => consumer,
                Err(e) => {
                    running.stop_workers().await;
                    return Err(e);
                }
            };
            let wire = self.bus.transport().wire_format(&registration.source);
            // The features a processor asks for are layers around the transport's consumer.
            let mut consumer: Arc<dyn crate::transport::Consumer> = match singleton {
                Some(singleton) => singleton.gate(consumer),
                None => consumer.into(),
            };
            let starts = worker::Starts::default();
            let settings = registration.settings.circuit_breaker;
            let metrics = metrics::WorkerMetrics::new(&routes, settings.is_some());
            if let Some(settings) = settings {
                let breaker = Arc::new(breaker::Breaker::new(
                    registration.source.clone(),
                    settings,
                    Some(metrics.clone()),
                ));
                breakers.push((source_name(&registration.source), Arc::clone(&breaker)));
                consumer = Arc::new(breaker::Guarded::new(consumer, breaker, starts.clone()));
            }
            let slots = worker::HandlerSlots::new(registration.settings.max_concurrent_calls);
            handler_slots.push(slots.clone());
            let worker = worker::Worker {
                slots,
                metrics,
                dispatch: dispatch::Dispatch {
                    settings: registration.settings.clone(),
                    timing: self
                        .timing
                        .as_ref()
                        .map_or_else(Vec::new, |timing| timing.counters_of(&routes.registrations)),
                    routes,
                    middleware: Arc::clone(&self.middleware),
                    wire,
                    consumer: Arc::clone(&consumer),
                    scope: Scope::new(self.bus.clone(), registration.source.clone()),
                },
                registration,
                consumer,
                starts,
                recovery_interval: self.recovery_interval,
                shutdown_grace: self.shutdown_grace,
                handler_runtime: Arc::clone(&handler_runtime),
            };
            running
                .workers
                .push(tokio::spawn(worker.run(running.stop.clone())));
        }
        tracing::info!(processors = running.workers.len(), "bus host running");
        for schedule in self.schedules {
            running.workers.push(tokio::spawn(crate::recurring::run(
                schedule,
                self.bus.clone(),
                self.schedule_clock,
                running.stop.clone(),
            )));
        }
        if let Some(mut heartbeat) = self.heartbeat {
            heartbeat.breakers(breakers);
            heartbeat.handler_slots(handler_slots);
            running
                .workers
                .push(tokio::spawn(heartbeat.run(running.stop.clone())));
        }
        if let Some(timing) = self.timing {
            let stop = CancellationToken::new();
            running.timing = Some((stop.clone(), tokio::spawn(timing.run(stop))));
        }
        Ok(running)
    }

    /// [`Host::start`], then [`RunningHost::shutdown`] when `shutdown` completes:
    /// stops fetching, returns prefetched messages that never started, lets running
    /// handlers finish within the grace period, and returns as soon as all is idle.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let running = self.start().await?;
        shutdown.await;
        running.shutdown().await
    }

    /// [`Host::run`] until SIGINT (Ctrl-C) or SIGTERM (what docker, Kubernetes and
    /// systemd send to stop a service): see [`shutdown_signal`].
    pub async fn run_until_signal(self) -> Result<()> {
        self.run(shutdown_signal()).await
    }

    /// The same as [`Host::run_until_signal`]: it shuts down gracefully on SIGTERM as
    /// well as on Ctrl-C (SIGINT).
    pub async fn run_until_ctrl_c(self) -> Result<()> {
        self.run_until_signal().await
    }
}

/// Completes when the process receives SIGINT (Ctrl-C) or, on Unix, SIGTERM. If the
/// signals cannot be listened for, it logs an error and never completes.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = terminate => tracing::info!("SIGTERM received: shutting down"),
        () = interrupt => tracing::info!("SIGINT received: shutting down"),
    }
}

/// A source as operators name it: `queue`, `topic/subscription`.
fn source_name(source: &crate::transport::Source) -> String {
    match source {
        crate::transport::Source::Queue(queue) => queue.clone(),
        crate::transport::Source::Subscription { topic, name } => format!("{topic}/{name}"),
    }
}
