//! Every Redis key of workflows, built in one place (docs/redis-layout.md, "Workflows").
//! A batch's keys share the hash tag `{wf:<batch>}`, so each batch script touches one
//! cluster slot; the keys shared by every batch and parked run share `{wf}`.

use crate::ids::BatchId;

/// The keys of one batch, in the order the scripts name them.
#[derive(Debug, Clone)]
pub(crate) struct BatchKeys {
    /// Hash: state, counters, policy, parent, staged callbacks' queues and ids.
    pub(crate) batch: String,
    /// String (bitmap): bit n set once member n settled.
    pub(crate) done: String,
    /// Hash: member → its mark (`<ms> <ok|dead> <json>`), and `<n>:r` → its result.
    pub(crate) settling: String,
    /// Hash: member → the record of its dead letter (JSON).
    pub(crate) dead: String,
    /// Hash: member → its result (JSON), for a parent's children.
    pub(crate) results: String,
    /// Hash: add token → the first member index it took.
    pub(crate) adds: String,
    /// Hash: member → the child batch it opened, and what is known of both ends.
    pub(crate) defer: String,
    /// Hash: callback kind → the staged envelope.
    pub(crate) callbacks: String,
}

impl BatchKeys {
    pub(crate) fn new(prefix: &str, batch: &BatchId) -> Self {
        let base = format!("{prefix}:{{wf:{batch}}}");
        let key = |name: &str| format!("{base}:{name}");
        BatchKeys {
            batch: key("batch"),
            done: key("done"),
            settling: key("settling"),
            dead: key("dead"),
            results: key("results"),
            adds: key("adds"),
            defer: key("defer"),
            callbacks: key("callbacks"),
        }
    }

    /// All of them, in the order `batch_sent` and `batch_done` take them.
    pub(crate) fn all(&self) -> Vec<String> {
        vec![
            self.batch.clone(),
            self.done.clone(),
            self.settling.clone(),
            self.dead.clone(),
            self.results.clone(),
            self.adds.clone(),
            self.defer.clone(),
            self.callbacks.clone(),
        ]
    }
}

/// The keys every batch and parked run shares, under `{wf}`.
#[derive(Debug, Clone)]
pub(crate) struct SharedKeys {
    /// Sorted set: open batch → when the sweeper looks at it next (ms).
    pub(crate) open: String,
    /// Sorted set: done batch → when it was done (ms), for a retention.
    pub(crate) recent: String,
    /// Sorted set: parked run token → when it is due (ms).
    pub(crate) due: String,
    /// Hash: token → the run's record (JSON: q, id, type, and w, a wait's signal).
    pub(crate) runs: String,
    /// Hash: token → the envelope to send when the run is due.
    pub(crate) envs: String,
    /// `<prefix>:{wf}:sig:` + name: a sent signal's payload (string, with a TTL).
    pub(crate) signal_prefix: String,
    /// `<prefix>:{wf}:sigw:` + name: the tokens waiting for the signal (set).
    pub(crate) waiters_prefix: String,
    /// `<prefix>:{wf}:got:` + token: how a wait ended (`s<payload>` or `t`, with a TTL).
    pub(crate) outcome_prefix: String,
}

impl SharedKeys {
    pub(crate) fn new(prefix: &str) -> Self {
        let key = |name: &str| format!("{prefix}:{{wf}}:{name}");
        SharedKeys {
            open: key("open"),
            recent: key("recent"),
            due: key("due"),
            runs: key("runs"),
            envs: key("envs"),
            signal_prefix: key("sig:"),
            waiters_prefix: key("sigw:"),
            outcome_prefix: key("got:"),
        }
    }

    pub(crate) fn signal(&self, name: &str) -> String {
        format!("{}{name}", self.signal_prefix)
    }

    pub(crate) fn waiters(&self, name: &str) -> String {
        format!("{}{name}", self.waiters_prefix)
    }

    pub(crate) fn outcome(&self, token: &str) -> String {
        format!("{}{token}", self.outcome_prefix)
    }
}
