//! Every key name of both layouts. BabelQueue uses bare queue names: no hash tag and no
//! namespace of ours (a queue named `{orders}` keeps all its keys in one cluster slot).

/// Which of BabelQueue's Redis layouts a queue uses.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// BabelQueue's default: `Q`, `Q:processing`, `Q:processing:deadlines`, `Q.dlq`.
    Legacy,
    /// Laravel's queue layout (`laravel_compat`): `<prefix>Q`, `:reserved`, `:delayed`,
    /// `:notify`, DLQ `<prefix>Q.dlq`. The prefix is `queues:` unless configured.
    Laravel {
        /// The key prefix of every list and set (`queues:`).
        prefix: String,
    },
}

impl Layout {
    /// The Laravel layout with Laravel's default prefix `queues:`.
    pub fn laravel() -> Self {
        Layout::Laravel {
            prefix: "queues:".to_owned(),
        }
    }

    /// `legacy` or `laravel`.
    pub fn name(&self) -> &'static str {
        match self {
            Layout::Legacy => "legacy",
            Layout::Laravel { .. } => "laravel",
        }
    }
}

/// The keys of one queue (and of its dead-letter queue).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueKeys {
    /// The bare queue name (`meta.queue`, `dead_letter.original_queue`).
    pub queue: String,
    /// The ready list.
    pub ready: String,
    /// Legacy: the in-flight list. Laravel: the reserved sorted set.
    pub in_flight: String,
    /// Legacy: the deadline sorted set. Laravel: the delayed sorted set.
    pub timers: String,
    /// Laravel: the wake-up list (legacy has none; this is then empty).
    pub notify: String,
    /// The dead-letter list.
    pub dlq: String,
    /// Laravel: the dead-letter list's wake-up list (empty for legacy).
    pub dlq_notify: String,
    /// Legacy: ours, not BabelQueue's (SDKs never read it): a hash counting each
    /// element's crash recoveries, field = the SHA-1 of the element, so that a message
    /// that kills every consumer still reaches the delivery limit. Empty for Laravel,
    /// whose recovery counts in `attempts`.
    pub recoveries: String,
    /// Laravel: ours, not BabelQueue's: a hash of the reserved members that were run with
    /// their stored `attempts` already at the limit (field: SHA-1 of the member), so that
    /// one such run that crashes is not run again after its recovery
    /// ([`OverLimit::RunOnce`](crate::OverLimit::RunOnce)). Empty for legacy, whose
    /// recoveries are counted in `recoveries`.
    pub over_limit: String,
}

impl QueueKeys {
    /// The keys of `queue` in `layout`.
    pub fn new(layout: &Layout, queue: &str) -> Self {
        match layout {
            Layout::Legacy => QueueKeys {
                queue: queue.to_owned(),
                ready: queue.to_owned(),
                in_flight: format!("{queue}:processing"),
                timers: format!("{queue}:processing:deadlines"),
                notify: String::new(),
                dlq: format!("{queue}.dlq"),
                dlq_notify: String::new(),
                recoveries: format!("{queue}:processing:recoveries"),
                over_limit: String::new(),
            },
            Layout::Laravel { prefix } => {
                let ready = format!("{prefix}{queue}");
                QueueKeys {
                    queue: queue.to_owned(),
                    in_flight: format!("{ready}:reserved"),
                    timers: format!("{ready}:delayed"),
                    notify: format!("{ready}:notify"),
                    dlq: format!("{ready}.dlq"),
                    dlq_notify: format!("{ready}.dlq:notify"),
                    recoveries: String::new(),
                    over_limit: format!("{ready}:reserved:over-limit"),
                    ready,
                }
            }
        }
    }
}

/// Checks a queue name: non-empty, at most 200 bytes, no whitespace or control characters.
pub fn validate_queue(queue: &str) -> crate::Result<()> {
    if queue.is_empty()
        || queue.len() > 200
        || queue.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(crate::Error::Config(format!(
            "invalid queue name {queue:?}: use 1-200 bytes without whitespace or control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_keys() {
        let k = QueueKeys::new(&Layout::Legacy, "orders");
        assert_eq!(
            [
                &*k.ready,
                &*k.in_flight,
                &*k.timers,
                &*k.dlq,
                &*k.recoveries
            ],
            [
                "orders",
                "orders:processing",
                "orders:processing:deadlines",
                "orders.dlq",
                "orders:processing:recoveries"
            ]
        );
    }

    #[test]
    fn laravel_keys() {
        let k = QueueKeys::new(&Layout::laravel(), "orders");
        assert_eq!(
            [
                &*k.ready,
                &*k.in_flight,
                &*k.timers,
                &*k.notify,
                &*k.dlq,
                &*k.dlq_notify
            ],
            [
                "queues:orders",
                "queues:orders:reserved",
                "queues:orders:delayed",
                "queues:orders:notify",
                "queues:orders.dlq",
                "queues:orders.dlq:notify"
            ]
        );
        assert!(validate_queue("").is_err());
        assert!(validate_queue("a b").is_err());
    }
}
