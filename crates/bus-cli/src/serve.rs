//! `bus dashboard` and `bus metrics`: bus-dashboard's servers, on the address given. Each
//! prints where it listens (the real port when asked for port 0) and stops on Ctrl-C or
//! SIGTERM.

use std::net::SocketAddr;

use bus_dashboard::{Dashboard, DashboardOptions, QueueMetrics};
use bus_management::Fleet;
use tokio::net::TcpListener;

use crate::cli::DashboardArgs;
use crate::failure::Failure;
use crate::output::out;

pub async fn dashboard(fleet: Fleet, args: DashboardArgs) -> Result<(), Failure> {
    let mut options = DashboardOptions::default()
        .sample_interval(args.sample_interval)
        .read_only(args.read_only);
    if let Some(prefix) = args.saga_prefix {
        options = options.saga_prefix(prefix);
    }
    match args.token {
        Some(token) => options = options.token(token),
        // The dashboard refuses this too, but only once listening: never open the port.
        None if !args.listen.ip().is_loopback() => {
            return Err(bus_dashboard::Error::TokenRequired { addr: args.listen }.into())
        }
        None => {}
    }
    let listener = bind(args.listen).await?;
    out!(
        "dashboard on http://{}/{}",
        local(&listener),
        if args.read_only { " (read-only)" } else { "" }
    )?;
    Dashboard::for_fleet(fleet, options)
        .serve_with_shutdown(listener, shutdown())
        .await?;
    Ok(())
}

pub async fn metrics(fleet: Fleet, listen: SocketAddr) -> Result<(), Failure> {
    let listener = bind(listen).await?;
    out!("metrics on http://{}/metrics", local(&listener))?;
    QueueMetrics::for_fleet(fleet)
        .serve_with_shutdown(listener, shutdown())
        .await?;
    Ok(())
}

/// Completes on Ctrl-C or (on Unix) SIGTERM, as a service manager stops a program.
pub async fn shutdown() {
    let ctrl_c = async {
        // Without a signal handler there is nothing to wait for: run until killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    () = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, Failure> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Failure::Listen { addr, source })
}

fn local(listener: &TcpListener) -> String {
    listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string())
}
