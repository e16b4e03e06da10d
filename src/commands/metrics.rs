//! `jobwarden metrics [--output FILE]`: the Prometheus text exposition
//! ([`jobwarden_engine::metrics`]) on stdout, or written atomically to FILE (for
//! node_exporter's textfile collector, run from a timer). Works while the
//! config is broken, and on a root with no daemon (it then says so:
//! `jobwarden_daemon_up 0`).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{GlobalArgs, MetricsArgs};

pub fn run(global: &GlobalArgs, args: &MetricsArgs) -> anyhow::Result<ExitCode> {
    let (_, layout) = super::load_existing(global)?;
    let ledger = super::open_ledger(&layout)?;
    let running = super::queue_view::daemon_alive(&layout, None);
    let text = jobwarden_engine::metrics::render(&layout, ledger.as_ref(), running);
    match &args.output {
        None => std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .context("writing to stdout")?,
        Some(path) => {
            let path = std::path::absolute(path)
                .with_context(|| format!("resolving {}", path.display()))?;
            let dir = path.parent().unwrap_or(std::path::Path::new("/"));
            jobwarden_sys::fsio::write_atomic(dir, &path, text.as_bytes())
                .with_context(|| format!("writing the metrics to {}", path.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
