//! `bus-dashboard`: the dashboard and the queue metrics as a standalone program, until
//! the `bus` tool serves them as `bus dashboard` and `bus metrics`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use bus_dashboard::{Dashboard, DashboardOptions, QueueMetrics};
use bus_redis::{RedisConfig, RedisTransport};
use clap::{Parser, Subcommand};

/// The bus's web dashboard and Prometheus queue metrics, read from Redis.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// Redis connection string: redis://user:password@host:port/db.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    url: String,
    /// Key prefix (namespace) of the bus's keys.
    #[arg(long, default_value = bus_redis::keys::DEFAULT_PREFIX)]
    prefix: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the web dashboard.
    Dashboard {
        /// Address to listen on; anything but loopback needs --token.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Access token every request must carry (letters, digits, -._~).
        #[arg(long, env = "BUS_DASHBOARD_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Seconds between the samples of the plots.
        #[arg(long, default_value_t = 10)]
        sample_seconds: u64,
        /// Key prefix of the saga store (none by default).
        #[arg(long, default_value = "")]
        saga_prefix: String,
    },
    /// Serve GET /metrics (Prometheus text format) of every queue's counts.
    Metrics {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: SocketAddr,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bus-dashboard: error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let config = RedisConfig::from_url(&cli.url)
        .map_err(|e| e.to_string())?
        .prefix(cli.prefix);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match cli.command {
        Command::Dashboard {
            listen,
            token,
            sample_seconds,
            saga_prefix,
        } => {
            let mut options = DashboardOptions::default()
                .sample_interval(Duration::from_secs(sample_seconds.max(1)))
                .saga_prefix(saga_prefix);
            if let Some(token) = token {
                options = options.token(token);
            }
            // Refused before Redis is dialled or the port opened.
            options.check_address(listen).map_err(|e| e.to_string())?;
            let listener = bind(listen).await?;
            println!("dashboard on http://{}", local(&listener));
            Dashboard::new(connect(&config).await?, options)
                .serve_with_shutdown(listener, shutdown)
                .await
                .map_err(|e| e.to_string())
        }
        Command::Metrics { listen } => {
            let listener = bind(listen).await?;
            println!("metrics on http://{}/metrics", local(&listener));
            QueueMetrics::new(connect(&config).await?)
                .serve_with_shutdown(listener, shutdown)
                .await
                .map_err(|e| e.to_string())
        }
    }
}

async fn connect(config: &RedisConfig) -> Result<RedisTransport, String> {
    RedisTransport::connect(config)
        .await
        // The config's Debug output masks the password; the URL itself is not printed.
        .map_err(|e| format!("cannot connect to Redis ({config:?}): {e}"))
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))
}

fn local(listener: &tokio::net::TcpListener) -> String {
    listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string())
}
