//! `jobwarden history record <project> <name> <outcome> [--exit-code N]
//! [--attempt N]`: record a run jobwarden did not supervise. `<project>`
//! is an inbox project or an absolute path kept as its own key (see
//! `check.rs`). An unknown outcome exits 2 naming the valid ones. A root
//! that does not exist yet is made, with its ledger, as the daemon's first
//! start makes them.

use std::process::ExitCode;

use crate::cli::{GlobalArgs, HistoryRecordArgs};
use jobwarden_ledger::{Execution, Outcome, Source};
use jobwarden_model::job::JobId;
use jobwarden_model::layout;
use jobwarden_sys::clock::Timestamp;

pub fn run(global: &GlobalArgs, args: &HistoryRecordArgs) -> anyhow::Result<ExitCode> {
    let outcome: Outcome = args.outcome.parse().map_err(anyhow::Error::msg)?;
    layout::validate_history_project(&args.project)
        .map_err(|e| anyhow::anyhow!("project {:?}: {e}", args.project))?;
    layout::validate_segment(&args.name)
        .map_err(|e| anyhow::anyhow!("name {:?} {e}", args.name))?;
    anyhow::ensure!(args.attempt >= 1, "--attempt must be at least 1");
    let (_, _, mut ledger) = super::open_creating(global)?;
    let mut exec = Execution::new(
        JobId::generate().to_string(),
        &args.project,
        &args.name,
        outcome,
        Timestamp::now().epoch_ms(),
        &jobwarden_sys::host::hostname(),
        Source::External,
    );
    exec.attempt = args.attempt;
    exec.exit_code = args.exit_code;
    ledger.record(&exec, &[], &[])?;
    Ok(ExitCode::SUCCESS)
}
