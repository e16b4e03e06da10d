//! `jobwarden history repair`: backfill ledger rows missing for finished
//! jobs, from their `job.json`, and rebuild the job index from `runs/`
//! (idempotent; the daemon does it at start).

use std::process::ExitCode;

use crate::cli::{GlobalArgs, RepairArgs};
use crate::commands::output::{print_json, print_line};
use crate::ledger::backfill;

pub fn run(global: &GlobalArgs, args: &RepairArgs) -> anyhow::Result<ExitCode> {
    let (_, layout, mut ledger) = super::open(global)?;
    let report = backfill::run(&layout, &mut ledger);
    if args.json {
        print_json(&report)?;
    } else {
        print_line(format_args!(
            "{} finished jobs checked, {} rows backfilled, {} failed; {} jobs indexed, {} stale index rows dropped",
            report.checked, report.inserted, report.failed, report.indexed, report.unindexed
        ))?;
    }
    Ok(ExitCode::from(if report.failed > 0 { 2 } else { 0 }))
}
