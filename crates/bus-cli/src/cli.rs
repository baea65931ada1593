//! The command line, as clap reads it.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};

/// Manage the bus's queues, dead letters and sagas in Redis, and BabelQueue's queues beside
/// them.
///
/// Queues are named `queue`, subscriptions `topic/subscription`; a BabelQueue queue
/// `babel:<queue>` (legacy layout) or `laravel:<queue>` (Laravel layout). Prints tables,
/// or JSON with --json. Exits 0 on success, 1 on an error (message on stderr), 2 on a usage error.
#[derive(Debug, Parser)]
#[command(name = "bus", version)]
pub struct Cli {
    /// Redis connection string: redis://user:password@host:port/db (all but the host
    /// optional), rediss://... for TLS, or the redis-cluster:// and redis-sentinel://
    /// forms. Defaults to $REDIS_URL, else redis://127.0.0.1:6379. Prefer REDIS_URL for
    /// passwords: arguments are visible to other users of the machine.
    // REDIS_URL is read by hand, not with clap's `env`: clap counts a value from the
    // environment as given on the command line and then shows `--url` as required in
    // every usage error.
    #[arg(long, value_name = "URL", global = true)]
    pub url: Option<String>,

    /// PEM file of the CA that signed the server's certificate, for rediss:// with a
    /// private CA (else the system's roots are trusted).
    #[arg(long, value_name = "FILE", global = true)]
    pub tls_ca: Option<std::path::PathBuf>,

    /// Key prefix (namespace) of the bus's keys.
    #[arg(long, default_value = bus_redis::keys::DEFAULT_PREFIX, global = true)]
    pub prefix: String,

    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,

    /// Key prefix of BabelQueue's Laravel-layout queues (`laravel:<queue>` is the list
    /// `<prefix><queue>`).
    #[arg(long, value_name = "PREFIX", default_value = "queues:", global = true)]
    pub laravel_prefix: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the queues: the bus's command queues and subscriptions, then the BabelQueue
    /// queues found (`babel:<queue>`, `laravel:<queue>`).
    Queues,
    /// List the topics and their subscriptions.
    Topics,
    /// Counts of ready, in-flight, delayed and dead messages, and the age of the next one.
    Stats(StatsArgs),
    /// Show the next ready messages, in processing order, without taking them.
    Peek {
        /// `queue` or `topic/subscription`.
        queue: String,
        /// How many.
        #[arg(short = 'n', long = "count", default_value_t = 10)]
        count: u64,
    },
    /// Show the dead letters, oldest first, with reason, errors and delivery count. The
    /// table fits 100 columns (long texts shortened, the last error only); --wide shows
    /// every column and the full texts.
    Dead {
        /// `queue` or `topic/subscription`.
        queue: String,
        /// How many.
        #[arg(short = 'n', long = "count", default_value_t = 10)]
        count: u64,
        /// Every column, every error kept and the full texts, however wide.
        #[arg(long)]
        wide: bool,
    },
    /// Requeue dead letters (some or all) to their queue or to another one. Exits 1 if an
    /// --id was not a dead letter of the queue (the others are still requeued).
    Requeue(RequeueArgs),
    /// Find ready, delayed and dead messages by id, type, header, error text or body text
    /// (every criterion given must hold; text ignores case), read in bounded pages with
    /// progress on stderr. With --requeue, --delete or --move-to: a dry run counts the
    /// matches, asks to confirm (unless --yes), then acts on each still where it was found.
    Search(SearchArgs),
    /// Delete one dead letter (exits 1 if it is not one).
    DeleteDead {
        /// `queue` or `topic/subscription`.
        queue: String,
        /// Its storage id, as `bus dead` shows it.
        id: String,
    },
    /// Delete a queue's ready and delayed messages (in-flight ones and dead letters stay).
    /// Asks to type the queue name unless --yes; refuses when stdin is not a terminal.
    Purge {
        /// `queue` or `topic/subscription`.
        queue: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Pause a queue: consumers stop taking its messages within a second (running
    /// handlers finish), sends still enqueue; the state is kept in Redis until resumed.
    Pause {
        /// `queue` or `topic/subscription`.
        queue: String,
    },
    /// Resume a paused queue.
    Resume {
        /// `queue` or `topic/subscription`.
        queue: String,
    },
    /// Close a queue's tripped fleet circuit breaker (`bus stats` shows it open): every
    /// consumer takes its messages again at once, with no probe. For when its downstream
    /// is known to be back; a host-scope breaker is not affected.
    CloseBreaker {
        /// `queue` or `topic/subscription`.
        queue: String,
    },
    /// Send one message with a JSON body; prints its message id.
    Send(SendArgs),
    /// Cancel a delayed message before it becomes ready: it is removed and never
    /// delivered (exits 1 if nothing waits under the id).
    Cancel {
        /// The command queue.
        queue: String,
        /// Its id as `bus scheduled` shows it (a delayed send's message id).
        id: String,
    },
    /// Show the delayed messages (scheduled sends and retries waiting), earliest first.
    Scheduled {
        /// `queue` or `topic/subscription`.
        queue: String,
        /// How many.
        #[arg(short = 'n', long = "count", default_value_t = 10)]
        count: u64,
    },
    /// Remove a subscription of a topic and delete its queue. Refuses while its queue
    /// holds messages, unless --force. Stop its consumers first: they register it again.
    Unsubscribe {
        /// The topic.
        topic: String,
        /// The subscription.
        name: String,
        /// Remove it and delete its messages even if its queue is not empty.
        #[arg(long)]
        force: bool,
    },
    /// List or delete sagas.
    Sagas(SagasArgs),
    /// Check Redis for what silently loses or stalls messages (eviction policy,
    /// persistence, memory near maxmemory, lagging replicas, refused scripts, the
    /// protocol version under --prefix) and say what to change. Writes nothing; exits 1
    /// on a critical finding.
    Doctor,
    /// Show the audit log: every change made with `bus` or the dashboard (requeue,
    /// delete, purge, move, unsubscribe, a saga deleted), newest first, with who, when
    /// and how many.
    Audit {
        /// How many entries.
        #[arg(short = 'n', long = "count", default_value_t = 20)]
        count: u64,
    },
    /// List the hosts from their heartbeats: host name, pid, version, queues,
    /// concurrency, in flight, started, last seen; a host silent for two heartbeat
    /// intervals shows as LOST (kept 60 intervals, 5 min by default, then dropped).
    Hosts,
    /// List workflow batches (open ones oldest first, then recently done ones: progress,
    /// dead members, callbacks sent or pending, continuations waiting for children) and
    /// the runs parked by a sleep or a wait, with their signal.
    Batches(crate::batches::BatchesArgs),
    /// Show one batch: its counts, its callbacks, its dead members with their errors, the
    /// members waiting for a child batch.
    Batch(crate::batches::BatchArgs),
    /// List the recurring schedules (cron) the hosts run: name, cron, zone, target
    /// queue, policy for missed ticks, last tick stored, next run.
    Schedules,
    /// Serve the web dashboard: live counts and plots, messages, dead letters grouped by
    /// error with requeue and delete, sagas. Prints its address; runs until Ctrl-C.
    Dashboard(DashboardArgs),
    /// BabelQueue queues by layout (docs/babelqueue.md): `queues`, `stats`, `peek` and
    /// `dead` are the commands above on `babel:<queue>` / `laravel:<queue>`; `peek --area`
    /// and `redrive` (dry run, reason, max) are BabelQueue's own.
    Babel(crate::babel::BabelArgs),
    /// Serve GET /metrics (Prometheus text format) of every queue's and subscription's
    /// counts, BabelQueue's included, read from Redis on each scrape. Prints its address;
    /// runs until Ctrl-C.
    Metrics {
        /// Address to listen on (port 0: any free port).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
        listen: SocketAddr,
    },
}

#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// Address to listen on (port 0: any free port); anything but loopback needs --token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Access token every request must carry (letters, digits, -._~). Prefer the
    /// environment variable: arguments are visible to other users of the machine.
    #[arg(long, env = "BUS_DASHBOARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Time between the samples of the plots.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_interval)]
    pub sample_interval: Duration,
    /// Key prefix of the saga store (by default --prefix, as `RedisSagaStore::for_transport`
    /// writes them; "" for sagas at `sagas:<partition>:<id>`).
    #[arg(long)]
    pub saga_prefix: Option<String>,
    /// Show everything, change nothing: every requeue, delete or purge is refused (403)
    /// and the pages show no buttons for them.
    #[arg(long)]
    pub read_only: bool,
}

#[derive(Debug, Args)]
#[group(skip)]
#[command(group(ArgGroup::new("which").required(true).args(["queue", "all"])))]
pub struct StatsArgs {
    /// `queue` or `topic/subscription`.
    pub queue: Option<String>,
    /// Every registered queue and subscription.
    #[arg(long)]
    pub all: bool,
    /// Redraw every --interval, with processing and dead-letter rates, until Ctrl-C (with
    /// --json: one JSON line per sample).
    #[arg(long)]
    pub watch: bool,
    /// Time between two samples of --watch.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "2s",
        value_parser = parse_interval,
        requires = "watch"
    )]
    pub interval: Duration,
}

#[derive(Debug, Args)]
pub struct RequeueArgs {
    /// `queue` or `topic/subscription` whose dead letters to requeue.
    pub queue: String,
    /// A storage id, as `bus dead` shows it (repeat for several).
    #[arg(long = "id", value_name = "ID", required_unless_present = "all")]
    pub ids: Vec<String>,
    /// Every dead letter of the queue.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
    /// Requeue to this queue (or `topic/subscription`) instead of their own.
    #[arg(long, value_name = "QUEUE")]
    pub to: Option<String>,
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// `queue` or `topic/subscription`.
    pub queue: String,
    /// The message id (or storage id, as `bus dead` shows it).
    #[arg(long)]
    pub id: Option<String>,
    /// The message type (wire name).
    #[arg(long = "type", value_name = "TYPE")]
    pub message_type: Option<String>,
    /// A header: `name=value` (value contained) or `name` (any value).
    #[arg(long, value_name = "NAME=VALUE")]
    pub header: Option<String>,
    /// Text in the error history or the dead-letter reason.
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
    /// Text in the body (as JSON).
    #[arg(long, value_name = "TEXT")]
    pub body: Option<String>,
    /// Where to look: ready, delayed, dead (comma-separated; all by default).
    #[arg(long = "in", value_name = "PLACES", value_delimiter = ',')]
    pub places: Vec<String>,
    /// Matches listed (all are counted).
    #[arg(short = 'n', long = "count", default_value_t = 20)]
    pub count: u64,
    /// Elements read per request.
    #[arg(long, default_value_t = 2000)]
    pub page: u64,
    /// Requeue every match: dead letters to their queue, delayed messages ready now.
    #[arg(long, conflicts_with_all = ["delete", "move_to"])]
    pub requeue: bool,
    /// Delete every match.
    #[arg(long, conflicts_with = "move_to")]
    pub delete: bool,
    /// Move every match to this queue's ready list.
    #[arg(long, value_name = "QUEUE")]
    pub move_to: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// `queue` or `topic/subscription`.
    pub queue: String,
    /// The message type (wire name); defaults to the queue's name (the topic's for a
    /// subscription).
    #[arg(long = "type", value_name = "TYPE")]
    pub message_type: Option<String>,
    /// The body, as JSON.
    #[arg(long, value_name = "JSON")]
    pub body: String,
    /// A header (repeat for several).
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub struct SagasArgs {
    /// Key prefix of the saga store (by default --prefix, as `RedisSagaStore::for_transport`
    /// writes them: sagas live at `<prefix>:sagas:<partition>:<id>`; "" for sagas at
    /// `sagas:<partition>:<id>`, the default before).
    #[arg(long, global = true)]
    pub saga_prefix: Option<String>,

    #[command(subcommand)]
    pub command: SagasCommand,
}

#[derive(Debug, Subcommand)]
pub enum SagasCommand {
    /// List sagas (with SCAN, never KEYS).
    List {
        /// Only this partition (saga type).
        #[arg(long)]
        partition: Option<String>,
    },
    /// Show one saga: its state, stamp and time to live.
    Show {
        /// The saga's partition key.
        partition: String,
        /// The saga's id.
        id: String,
    },
    /// Delete one saga, whatever its state.
    Delete {
        /// The saga's partition key.
        partition: String,
        /// The saga's id.
        id: String,
    },
}

/// A duration such as `500ms`, `2s` or `1m`: at least 100 ms, at most a day.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = humantime::parse_duration(text).map_err(|e| format!("{e} (say 2s or 500ms)"))?;
    if interval < Duration::from_millis(100) || interval > Duration::from_secs(86_400) {
        return Err(format!("{text} is out of range (100ms to 24h)"));
    }
    Ok(interval)
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn requeue_needs_ids_or_all_but_not_both() {
        assert!(Cli::try_parse_from(["bus", "requeue", "q"]).is_err());
        assert!(Cli::try_parse_from(["bus", "requeue", "q", "--all", "--id", "~1"]).is_err());
        assert!(Cli::try_parse_from(["bus", "requeue", "q", "--id", "~1", "--id", "~2"]).is_ok());
        assert!(Cli::try_parse_from(["bus", "requeue", "q", "--all", "--to", "r"]).is_ok());
    }

    #[test]
    fn the_url_is_optional_everywhere() {
        let cli = Cli::try_parse_from(["bus", "queues"]).unwrap();
        assert_eq!(cli.url, None);
        let cli = Cli::try_parse_from(["bus", "queues", "--url", "redis://h"]).unwrap();
        assert_eq!(cli.url.as_deref(), Some("redis://h"));
    }

    #[test]
    fn stats_needs_a_queue_or_all() {
        assert!(Cli::try_parse_from(["bus", "stats"]).is_err());
        assert!(Cli::try_parse_from(["bus", "stats", "q", "--all"]).is_err());
        assert!(Cli::try_parse_from(["bus", "--json", "stats", "--all"]).is_ok());
    }

    #[test]
    fn watch_takes_an_interval_in_range() {
        let cli = Cli::try_parse_from(["bus", "stats", "--all", "--watch", "--interval", "500ms"])
            .unwrap();
        let Command::Stats(args) = cli.command else {
            panic!("not stats")
        };
        assert!(args.watch);
        assert_eq!(args.interval, Duration::from_millis(500));
        assert!(Cli::try_parse_from(["bus", "stats", "--all", "--interval", "1s"]).is_err());
        for bad in ["0s", "10ms", "2 days", "fast"] {
            let args = ["bus", "stats", "--all", "--watch", "--interval", bad];
            assert!(Cli::try_parse_from(args).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_servers_listen_on_loopback_by_default() {
        let cli = Cli::try_parse_from(["bus", "metrics"]).unwrap();
        let Command::Metrics { listen } = cli.command else {
            panic!("not metrics")
        };
        assert!(listen.ip().is_loopback());
        let cli = Cli::try_parse_from(["bus", "dashboard"]).unwrap();
        let Command::Dashboard(args) = cli.command else {
            panic!("not dashboard")
        };
        assert!(args.listen.ip().is_loopback());
        assert!(Cli::try_parse_from(["bus", "metrics", "--listen", "localhost"]).is_err());
    }

    #[test]
    fn doctor_audit_and_a_read_only_dashboard_parse() {
        assert!(matches!(
            Cli::try_parse_from(["bus", "doctor"]).unwrap().command,
            Command::Doctor
        ));
        let cli = Cli::try_parse_from(["bus", "hosts"]).unwrap();
        assert!(matches!(cli.command, Command::Hosts));
        let cli = Cli::try_parse_from(["bus", "schedules"]).unwrap();
        assert!(matches!(cli.command, Command::Schedules));
        let cli = Cli::try_parse_from(["bus", "audit", "-n", "5"]).unwrap();
        assert!(matches!(cli.command, Command::Audit { count: 5 }));
        let cli = Cli::try_parse_from(["bus", "dashboard", "--read-only"]).unwrap();
        let Command::Dashboard(args) = cli.command else {
            panic!("not dashboard")
        };
        assert!(args.read_only);
        let cli = Cli::try_parse_from(["bus", "dashboard"]).unwrap();
        let Command::Dashboard(args) = cli.command else {
            panic!("not dashboard")
        };
        assert!(!args.read_only, "read-only is opt-in");
    }

    #[test]
    fn headers_are_key_value() {
        assert_eq!(parse_header("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(parse_header("novalue").is_err());
        assert!(parse_header("=x").is_err());
    }
}
