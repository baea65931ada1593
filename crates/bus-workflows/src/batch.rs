//! Opening a batch, adding members, closing it: [`BatchBuilder`] and [`Batch`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bus_core::{Bus, Command, Context, Envelope, Headers, SendOptions};
use futures::{StreamExt, TryStreamExt};

use crate::ids::{BatchId, CallbackKind, ChildPolicy, MemberRef, BATCH_HEADER, CALLBACK_HEADER};
use crate::relay::Relay;
use crate::store::{BatchSpec, BatchStatus, Callback};
use crate::{Error, Result, Workflows};

/// Members registered per add (one store call), and sent at once.
const CHUNK: usize = 1000;
const SENDS_IN_FLIGHT: usize = 256;

/// Headers a callback inherits from the handler that opened its batch: its trace.
const INHERITED: [&str; 2] = ["traceparent", "tracestate"];

/// Encodes a callback once the batch's id is known (its header names the batch).
type Stage = Box<dyn FnOnce(&BatchId, &Headers) -> Result<Callback> + Send>;

/// A batch being declared: its callbacks, then [`BatchBuilder::open`]. From a handler
/// ([`WorkflowContext::batch`](crate::WorkflowContext::batch)) its id is the same on every
/// delivery of the handler's message, and inside a batch member it is nested: the member
/// counts as settled in its own batch only once this one's callbacks were sent.
#[must_use]
pub struct BatchBuilder {
    workflows: Workflows,
    bus: Bus,
    id: Option<BatchId>,
    /// The handler's context and the durable step that names the batch.
    ctx: Option<(Context, u32)>,
    parent: Option<MemberRef>,
    callbacks: Vec<(CallbackKind, Stage)>,
    policy: Option<ChildPolicy>,
    keep_open: bool,
}

impl std::fmt::Debug for BatchBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchBuilder")
            .field("id", &self.id)
            .field("parent", &self.parent)
            .field(
                "callbacks",
                &self.callbacks.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            )
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl BatchBuilder {
    pub(crate) fn new(workflows: Workflows, bus: Bus) -> Self {
        BatchBuilder {
            workflows,
            bus,
            id: None,
            ctx: None,
            parent: None,
            callbacks: Vec::new(),
            policy: None,
            keep_open: false,
        }
    }

    pub(crate) fn in_handler(
        mut self,
        ctx: &Context,
        step: u32,
        parent: Option<MemberRef>,
    ) -> Self {
        self.ctx = Some((ctx.clone(), step));
        self.parent = parent;
        self
    }

    pub(crate) fn policy(mut self, policy: ChildPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Its id (a new ULID by default). Opening an id that exists opens nothing: the
    /// batch it names is used as it is.
    pub fn id(mut self, id: BatchId) -> Self {
        self.id = Some(id);
        self
    }

    /// Sent once every member was acknowledged.
    pub fn on_success<C: Command>(self, callback: &C) -> Result<Self> {
        self.callback(CallbackKind::Success, callback, None)
    }

    /// Sent once every member settled, when some were dead-lettered.
    pub fn on_complete<C: Command>(self, callback: &C) -> Result<Self> {
        self.callback(CallbackKind::Complete, callback, None)
    }

    /// Sent at the first member that is dead-lettered.
    pub fn on_death<C: Command>(self, callback: &C) -> Result<Self> {
        self.callback(CallbackKind::Death, callback, None)
    }

    /// A callback of `kind`, to `queue` rather than its type's queue (a queue renamed at
    /// run time, say).
    pub fn callback_to<C: Command>(
        self,
        kind: CallbackKind,
        callback: &C,
        queue: impl Into<String>,
    ) -> Result<Self> {
        self.callback(kind, callback, Some(queue.into()))
    }

    /// Opened from a handler: leave the batch open when the handler ends (it is closed
    /// then by default). Close it later with [`Workflows::batch`]'s handle or
    /// [`Batch::close`].
    pub fn keep_open(mut self) -> Self {
        self.keep_open = true;
        self
    }

    fn callback<C: Command>(
        mut self,
        kind: CallbackKind,
        callback: &C,
        queue: Option<String>,
    ) -> Result<Self> {
        let format = C::FORMAT.unwrap_or_default();
        let body = format.encode(C::TYPE, callback)?;
        let queue = queue.unwrap_or_else(|| C::NAME.to_owned());
        let stage: Stage = Box::new(move |batch, inherited| {
            let mut envelope = Envelope::new(C::TYPE, format, body);
            envelope.headers.clone_from(inherited);
            envelope
                .headers
                .insert(CALLBACK_HEADER.to_owned(), format!("{batch}:{kind}"));
            let id = envelope.id.clone();
            Ok(Callback::new(kind, queue, id, envelope.encode()?.into()))
        });
        self.callbacks.retain(|(k, _)| *k != kind);
        self.callbacks.push((kind, stage));
        Ok(self)
    }

    pub(crate) fn stage(mut self, callback: Callback) -> Self {
        let kind = callback.kind;
        self.callbacks.retain(|(k, _)| *k != kind);
        self.callbacks
            .push((kind, Box::new(move |_, _| Ok(callback))));
        self
    }

    /// Opens the batch (nothing if its id exists) and returns its handle.
    pub async fn open(self) -> Result<Batch> {
        let id = match (&self.id, &self.ctx) {
            (Some(id), _) => id.clone(),
            (None, Some((ctx, step))) => {
                let name = format!("bus.wf.{step}");
                ctx.once(&name, || async { Ok::<_, Error>(BatchId::generate()) })
                    .await
                    .map_err(|e| Error::invalid("batch id", e.to_string()))?
            }
            (None, None) => BatchId::generate(),
        };
        let inherited: Headers = match &self.ctx {
            Some((ctx, _)) => INHERITED
                .iter()
                .filter_map(|h| Some(((*h).to_owned(), ctx.headers().get(*h)?.clone())))
                .collect(),
            None => Headers::new(),
        };
        let mut spec = BatchSpec::new(id.clone())
            .parent(self.parent.clone())
            .policy(self.policy);
        for (_, stage) in self.callbacks {
            spec = spec.callback(stage(&id, &inherited)?);
        }
        let store = &self.workflows.inner.store;
        if let Some(member) = &self.parent {
            // Before the batch exists: its member must not settle without it.
            store.defer(member, &id).await?;
        }
        store.open(&spec).await?;
        let tokens = match &self.ctx {
            Some((ctx, step)) => Tokens::Derived(format!("{id}.{}.{step}", ctx.message_id())),
            None => Tokens::Random,
        };
        let batch = Batch {
            inner: Arc::new(BatchInner {
                workflows: self.workflows.clone(),
                bus: self.bus,
                id,
                tokens,
                counter: AtomicU64::new(0),
                adder: None,
            }),
        };
        if self.ctx.is_some() && !self.keep_open {
            close_at_end(&batch);
        }
        Ok(batch)
    }
}

tokio::task_local! {
    // The batches a handler's run opened, closed by the layer when the run succeeds.
    static OPENED: Mutex<Vec<Batch>>;
}

/// Runs `run` (a handler's run, inside the workflow layer) and returns what it returned
/// with the batches it opened, in order.
pub(crate) async fn opened_in<T>(run: impl std::future::Future<Output = T>) -> (T, Vec<Batch>) {
    OPENED
        .scope(Mutex::new(Vec::new()), async {
            let out = run.await;
            let opened = OPENED.with(|opened| {
                std::mem::take(&mut *opened.lock().unwrap_or_else(PoisonError::into_inner))
            });
            (out, opened)
        })
        .await
}

/// Registers a batch opened in this run, to close when the run succeeds.
fn close_at_end(batch: &Batch) {
    let _ = OPENED.try_with(|opened| {
        let mut opened = opened.lock().unwrap_or_else(PoisonError::into_inner);
        if !opened.iter().any(|b| b.id() == batch.id()) {
            opened.push(batch.clone());
        }
    });
}

/// How a batch's adds are named: at random (a producer), or after the handler's message
/// and step, so that a redelivered handler's adds take the same members again.
#[derive(Debug)]
enum Tokens {
    Random,
    Derived(String),
}

/// An open batch: add members, close it. A cheap-to-clone handle.
#[derive(Debug, Clone)]
pub struct Batch {
    inner: Arc<BatchInner>,
}

#[derive(Debug)]
struct BatchInner {
    workflows: Workflows,
    bus: Bus,
    id: BatchId,
    tokens: Tokens,
    counter: AtomicU64,
    /// The member of this batch that adds (from its handler): it may add after close.
    adder: Option<u64>,
}

impl Batch {
    /// A handle on the existing batch `id`, sending through `bus`; `adder`: the member of
    /// it that adds (its handler runs), which may add after the batch was closed.
    pub(crate) fn existing(
        workflows: Workflows,
        bus: Bus,
        id: BatchId,
        adder: Option<(u64, String)>,
    ) -> Self {
        let (adder, tokens) = match adder {
            Some((index, prefix)) => (Some(index), Tokens::Derived(prefix)),
            None => (None, Tokens::Random),
        };
        Batch {
            inner: Arc::new(BatchInner {
                workflows,
                bus,
                id,
                tokens,
                counter: AtomicU64::new(0),
                adder,
            }),
        }
    }

    /// Its id.
    pub fn id(&self) -> &BatchId {
        &self.inner.id
    }

    fn token(&self) -> String {
        match &self.inner.tokens {
            Tokens::Random => ulid::Ulid::new().to_string(),
            Tokens::Derived(prefix) => {
                let n = self.inner.counter.fetch_add(1, Ordering::Relaxed);
                format!("{prefix}.{n}")
            }
        }
    }

    /// Adds a member: `command`, sent with its batch header. Refused with
    /// [`Error::Closed`] once the batch is closed.
    pub async fn send<C: Command>(&self, command: &C) -> Result<MemberRef> {
        let mut members = self.send_all(std::slice::from_ref(command)).await?;
        members
            .pop()
            .ok_or_else(|| Error::invalid("batch add", "no member"))
    }

    /// Adds members: each registered in the batch, then sent (up to 256 sends in flight).
    pub async fn send_all<C: Command>(&self, commands: &[C]) -> Result<Vec<MemberRef>> {
        let store = &self.inner.workflows.inner.store;
        let mut members = Vec::with_capacity(commands.len());
        for chunk in commands.chunks(CHUNK) {
            let token = self.token();
            let first = store
                .add(&self.inner.id, &token, chunk.len() as u64, self.inner.adder)
                .await?;
            // The sends are made first, so that no closure over the chunk's borrows is
            // held across an await (the future stays `Send` for any caller).
            let sends: Vec<_> = chunk
                .iter()
                .zip(first..)
                .map(|(command, index)| self.send_member(command, index))
                .collect();
            let sent: Vec<MemberRef> = futures::stream::iter(sends)
                .buffered(SENDS_IN_FLIGHT)
                .try_collect()
                .await?;
            members.extend(sent);
        }
        Ok(members)
    }

    async fn send_member<C: Command>(&self, command: &C, index: u64) -> Result<MemberRef> {
        let member = MemberRef {
            batch: self.inner.id.clone(),
            index,
        };
        let options = SendOptions::new().header(BATCH_HEADER, member.to_string());
        self.inner.bus.send_with(command, &options).await?;
        Ok(member)
    }

    /// Closes the batch: no more members (but from its own members still running). If
    /// every member settled already, its callbacks are sent now.
    pub async fn close(&self) -> Result<()> {
        let fired = self
            .inner
            .workflows
            .inner
            .store
            .close(&self.inner.id)
            .await?;
        let transport = Arc::clone(self.inner.bus.transport());
        Relay::new(self.inner.workflows.clone(), transport)
            .deliver(&self.inner.id, fired)
            .await
    }

    /// Its status, with up to 100 dead members.
    pub async fn status(&self) -> Result<BatchStatus> {
        self.inner
            .workflows
            .status(&self.inner.id)
            .await?
            .ok_or_else(|| Error::NotFound {
                batch: self.inner.id.clone(),
            })
    }
}
