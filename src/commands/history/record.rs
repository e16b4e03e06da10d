//! `jobwarden history record <project> <name> <outcome> [--exit-code N]
//! [--attempt N] [--started-at WHEN] [--finished-at WHEN]`: record a run
//! jobwarden did not supervise. `<project>`
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
    let (started, finished) = times(args)?;
    let (_, _, mut ledger) = super::open_creating(global)?;
    let mut exec = Execution::new(
        JobId::generate().to_string(),
        &args.project,
        &args.name,
        outcome,
        finished,
        &jobwarden_sys::host::hostname(),
        Source::External,
    );
    exec.attempt = args.attempt;
    exec.exit_code = args.exit_code;
    exec.started_at = started;
    exec.duration_ms = started.map(|s| finished - s);
    ledger.record(&exec, &[], &[])?;
    Ok(ExitCode::SUCCESS)
}

/// `--started-at` and `--finished-at` (default now) in epoch ms; a start
/// after the finish is refused, naming both.
fn times(args: &HistoryRecordArgs) -> anyhow::Result<(Option<u64>, u64)> {
    let now = Timestamp::now().epoch_ms();
    let when = |flag: &str, v: &str| {
        jobwarden_sys::clock::parse_when(v, now)
            .map_err(|why| anyhow::anyhow!("{flag} {v:?}: {why}"))
    };
    let finished = match &args.finished_at {
        Some(v) => when("--finished-at", v)?,
        None => now,
    };
    let started = args
        .started_at
        .as_deref()
        .map(|v| when("--started-at", v))
        .transpose()?;
    if let Some(s) = started {
        anyhow::ensure!(
            s <= finished,
            "--started-at {} is after --finished-at {}: a run finishes after it starts",
            Timestamp::from_epoch_ms(s),
            Timestamp::from_epoch_ms(finished)
        );
    }
    Ok((started, finished))
}
