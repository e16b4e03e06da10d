//! `jobwarden history …`: the ledger from the command line. Scripts use
//! `check` and `record` (exit codes, nothing on stdout); people and tools
//! use the queries (`--json` on all).

mod check;
mod diagnostics;
mod export;
pub(super) mod list;
mod record;
mod repair;
mod show;
mod stats;
mod who_touched;

use std::process::ExitCode;

use crate::cli::{GlobalArgs, HistoryCommand};
use jobwarden_ledger::Ledger;
use jobwarden_model::config::Config;
use jobwarden_model::layout::Layout;

pub fn run(global: &GlobalArgs, cmd: &HistoryCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        HistoryCommand::List(args) => list::run(global, args),
        HistoryCommand::Show(args) => show::run(global, args),
        HistoryCommand::Stats(args) => stats::run(global, args),
        HistoryCommand::Check(args) => check::run(global, args),
        HistoryCommand::Record(args) => record::run(global, args),
        HistoryCommand::Export(args) => export::run(global, args),
        HistoryCommand::WhoTouched(args) => who_touched::run(global, args),
        HistoryCommand::Diagnostics(args) => diagnostics::run(global, args),
        HistoryCommand::Repair(args) => repair::run(global, args),
    }
}

/// The config, the layout and the open ledger of the selected root.
pub(super) fn open(global: &GlobalArgs) -> anyhow::Result<(Config, Layout, Ledger)> {
    let (config, layout) = super::load(global)?;
    ensure_root(&layout)?;
    let ledger = Ledger::open(&layout.ledger())?;
    Ok((config, layout, ledger))
}

/// [`open`], making the root first if it does not exist yet (`history
/// record`: a script's first run on a fresh machine records it, as the
/// daemon's first start would make the root and its ledger, with the
/// daemon's permissions).
pub(super) fn open_creating(global: &GlobalArgs) -> anyhow::Result<(Config, Layout, Ledger)> {
    let (config, layout) = super::load(global)?;
    // Only where nothing is: a dangling link or a file there is said below.
    if std::fs::symlink_metadata(layout.root()).is_err() {
        jobwarden_sys::fsio::create_root(layout.root())?;
        tracing::info!(root = %layout.root().display(), "created the root");
    }
    ensure_root(&layout)?;
    let ledger = Ledger::open(&layout.ledger())?;
    Ok((config, layout, ledger))
}

/// The layout of the selected root, which must exist.
pub(super) fn existing_root(global: &GlobalArgs) -> anyhow::Result<Layout> {
    let (_, layout) = super::load(global)?;
    ensure_root(&layout)?;
    Ok(layout)
}

/// A mistyped root must not read as "no history, eligible": only a root
/// that exists gets a ledger (created empty if it has none yet).
fn ensure_root(layout: &Layout) -> anyhow::Result<()> {
    super::root_must_exist(layout)
}
