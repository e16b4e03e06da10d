//! `jobwarden history repair`: a damaged ledger is moved aside (never
//! deleted) and rebuilt; in every case, ledger rows missing for finished
//! jobs are backfilled from their `job.json` and the job index is rebuilt
//! from `runs/` (idempotent; the daemon backfills at start too). See
//! [`jobwarden_ledger::repair`].

use std::process::ExitCode;

use crate::cli::{GlobalArgs, RepairArgs};
use crate::commands::output::{print_json, print_line};
use jobwarden_ledger::repair;

pub fn run(global: &GlobalArgs, args: &RepairArgs) -> anyhow::Result<ExitCode> {
    let layout = super::existing_root(global)?;
    let done = repair::repair(&layout, &|rec| {
        jobwarden_engine::recover::being_finished(&layout, rec)
    })?;
    if args.json {
        print_json(&done)?;
    } else {
        print_human(&done)?;
    }
    Ok(ExitCode::from(if done.backfill.failed > 0 { 2 } else { 0 }))
}

fn print_human(done: &repair::Repaired) -> anyhow::Result<()> {
    if let Some(damage) = &done.damage {
        print_line(damage)?;
        for path in &done.moved_aside {
            print_line(format_args!("moved aside: {}", path.display()))?;
        }
        print_line("created a new ledger; rebuilding it from the run folders")?;
    }
    let report = &done.backfill;
    print_line(format_args!(
        "{} finished jobs checked, {} rows backfilled, {} failed; {} jobs indexed, {} stale index rows dropped",
        report.checked, report.inserted, report.failed, report.indexed, report.unindexed
    ))
}
