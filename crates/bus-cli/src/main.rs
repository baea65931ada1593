//! `bus`: the command-line tool over [`bus_management`] (SPEC §6).

mod act;
mod babel;
mod batches;
mod cli;
mod failure;
mod ops;
mod output;
mod read;
mod search;
mod serve;
mod watch;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use bus_babelqueue::Layout;
use bus_management::{Action, Fleet, Management};
use bus_redis::{RedisConfig, RedisTransport};
use clap::Parser;

use act::Asked;
use cli::{Cli, Command};
use failure::{fail, redact, Failure};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&Failure::Stdin(e)),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Where Redis is when neither --url nor REDIS_URL says.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

async fn run(cli: Cli) -> Result<(), Failure> {
    let url = match &cli.url {
        Some(url) => url.clone(),
        None => std::env::var("REDIS_URL")
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_URL.to_owned()),
    };
    let mut config = RedisConfig::from_url(&url)?.prefix(cli.prefix.as_str());
    if let Some(ca) = &cli.tls_ca {
        config = with_tls_ca(config, ca)?;
    }
    if let Command::Doctor = cli.command {
        return ops::doctor(&config, &url, cli.tls_ca.is_some(), cli.json).await;
    }
    let saga_prefix = match &cli.command {
        Command::Sagas(args) => args.saga_prefix.clone(),
        _ => None,
    };
    let transport = match RedisTransport::connect(&config).await {
        Ok(transport) => transport,
        // Connected, but Redis speaks another protocol: its own words say what to do.
        Err(source @ bus_redis::Error::ProtocolMismatch { .. }) => return Err(source.into()),
        Err(source) => {
            return Err(Failure::Connect {
                url: redact(&url),
                reason: failure::connect_reason(&source.into(), &url, cli.tls_ca.is_some()),
            })
        }
    };
    let mut management = Management::from_transport(transport.clone());
    if let Some(prefix) = saga_prefix {
        management = management.saga_prefix(prefix);
    }
    let fleet = fleet(&management, &transport, &cli.laravel_prefix);
    let command = match cli.command {
        // `bus babel stats|peek|dead Q` are the table's commands on `babel:Q`.
        Command::Babel(args) => match babel::alias(args) {
            Ok(command) => command,
            Err(args) => {
                let result = babel::run(&fleet, &cli.laravel_prefix, args, cli.json).await;
                let _ = management.close().await;
                return result;
            }
        },
        command => command,
    };
    let result = match command {
        Command::Dashboard(args) => serve::dashboard(fleet.clone(), args).await,
        Command::Metrics { listen } => serve::metrics(fleet.clone(), listen).await,
        Command::Batches(args) => batches::list(&transport, args, cli.json).await,
        Command::Batch(args) => batches::show(&transport, args, cli.json).await,
        Command::Stats(args) if args.watch => {
            let only = match &args.queue {
                Some(queue) => Some(existing(&fleet, queue).await?),
                None => None,
            };
            watch::watch(&fleet, only.as_deref(), args.interval, cli.json).await
        }
        command => execute(&fleet, command, cli.json).await,
    };
    // Best effort: the process ends anyway.
    let _ = management.close().await;
    result
}

/// The bus's own queues and BabelQueue's (both layouts) in this Redis, behind one
/// operator surface: `queue`, `topic/subscription`, `babel:<queue>`, `laravel:<queue>`.
fn fleet(management: &Management, transport: &RedisTransport, laravel_prefix: &str) -> Fleet {
    let babel = bus_babelqueue::Admin::new(transport.client().clone());
    Fleet::new(management.clone())
        .with(Arc::new(babel.layout(Layout::Legacy)))
        .with(Arc::new(babel.layout(Layout::Laravel {
            prefix: laravel_prefix.to_owned(),
        })))
}

/// Runs a command of the table: a change is parsed into an action and applied
/// (`act`); a read prints its records (`read`).
async fn execute(fleet: &Fleet, command: Command, json: bool) -> Result<(), Failure> {
    match command {
        // A dry run and a confirmation first; its action is applied there.
        Command::Search(args) => search::run(fleet, args, json).await,
        Command::Purge { queue, yes: false } => {
            existing(fleet, &queue).await?;
            confirm_purge(fleet, &queue).await?;
            act::apply(fleet, Action::Purge { queue }, json).await
        }
        command => match act::asked(command) {
            Asked::Change(action) => act::apply(fleet, action, json).await,
            Asked::Read(command) => read::show(fleet, command, json).await,
        },
    }
}

/// Trusts the CA in `file` for rediss://.
#[cfg(feature = "tls")]
fn with_tls_ca(config: RedisConfig, file: &std::path::Path) -> Result<RedisConfig, Failure> {
    Ok(config.tls_ca_file(file))
}

#[cfg(not(feature = "tls"))]
fn with_tls_ca(_: RedisConfig, _: &std::path::Path) -> Result<RedisConfig, Failure> {
    Err(Failure::Refused(
        "--tls-ca needs TLS, and this bus was built without its `tls` feature \
         (build it with `--features tls`)"
            .to_owned(),
    ))
}

/// A queue (of any kind) or subscription that exists, by its address (a typo is an
/// error that says what does exist).
async fn existing(fleet: &Fleet, name: &str) -> Result<String, Failure> {
    fleet.ensure_exists(name).await?;
    Ok(name.to_owned())
}

/// One of the bus's own queues or subscriptions that exists, for the commands only they
/// have (`scheduled`): another kind's queue is refused, saying so.
async fn existing_native(
    fleet: &Fleet,
    name: &str,
    command: &str,
) -> Result<bus_core::transport::Source, Failure> {
    let Some(source) = fleet.native_source(name)? else {
        return Err(Failure::Refused(format!(
            "`bus {command}` is for the bus's own queues; {name} is a queue of another kind"
        )));
    };
    fleet.management().ensure_exists(&source).await?;
    Ok(source)
}

/// Asks the operator to type the queue's name; refuses without a terminal to ask on.
async fn confirm_purge(fleet: &Fleet, name: &str) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::Refused(format!(
            "not purging {name}: confirmation is needed and standard input is not a terminal \
             (pass --yes to purge without asking)"
        )));
    }
    let stats = fleet.stats(name).await?;
    eprint!(
        "This deletes {} ready and {} delayed message(s) of {name}; in-flight messages and \
         dead letters stay.\nType the queue name to confirm: ",
        stats.ready, stats.delayed
    );
    std::io::stderr().flush()?;
    let mut answer = String::new();
    let read = stdin.lock().read_line(&mut answer)?;
    if read == 0 || answer.trim() != name {
        return Err(Failure::Refused(format!(
            "not purging {name}: not confirmed"
        )));
    }
    Ok(())
}
