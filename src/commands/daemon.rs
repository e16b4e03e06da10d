//! `jobwarden daemon`: the foreground daemon. Turns SIGTERM/SIGINT into the
//! shutdown token that `daemon::run` takes, and each SIGHUP into a reload
//! request.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::cli::GlobalArgs;
use jobwarden_daemon::control::Reloads;
use jobwarden_model::config::{ConfigSource, Env};

pub fn run(global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_pruning(global)?;
    if config.source == ConfigSource::BuiltIn {
        tracing::warn!(
            "no config file: running on built-in defaults, whose demo profile only echoes prompts; \
             write [profiles.default] in a config file to run a real agent"
        );
    }
    stop_on_panic();
    jobwarden_sys::memory::share_heaps();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        spawn_signal_listener(shutdown.clone())?;
        let reloads = Reloads {
            chosen: super::choices(global),
            env: Env::from_process(),
            requests: spawn_reload_listener()?,
        };
        let notifier = jobwarden_daemon::notify::Notifier::from_env();
        jobwarden_daemon::run(Arc::new(config), layout, shutdown, notifier, reloads).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// DESIGN §10: a task that panics takes the whole daemon down at once, with
/// a message and exit status 70 (EX_SOFTWARE), so that the service manager
/// restarts it; it never lives on with a dead task. Running jobs continue
/// under their monitors and are re-adopted by the next start.
fn stop_on_panic() {
    jobwarden_sys::logging::exit_on_panic(
        "a daemon task",
        "stopping so that the service manager restarts the daemon; running jobs continue under their monitors",
    );
}

fn spawn_signal_listener(shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!("{name} received: stopping (running jobs keep running)");
        shutdown.cancel();
    });
    Ok(())
}

/// Each SIGHUP becomes a reload request. Installed before the daemon takes
/// its lock, so that a daemon `jobwarden reload` can find never dies of the
/// signal's default action.
fn spawn_reload_listener() -> anyhow::Result<UnboundedReceiver<()>> {
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP received: reloading the config");
            if tx.send(()).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}
