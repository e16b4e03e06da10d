//! `jobwarden gc [--dry-run] [--json]`: one retention pass ([`jobwarden_engine::gc`])
//! over the selected root, reported as a short summary (with `--dry-run`,
//! every path that would go) or as the JSON report. Exits 0 even when some
//! items failed: those are logged on stderr and counted in `errors`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use super::output::print_json;
use crate::cli::{GcArgs, GlobalArgs};
use jobwarden_engine::gc::{self, GcReport};
use jobwarden_ledger::Ledger;

pub fn run(global: &GlobalArgs, args: &GcArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_pruning(global)?;
    // A gc must not create a root, and a mistyped one is said.
    super::root_must_exist(&layout)?;
    let mut ledger = Ledger::open(&layout.ledger())?;
    let report = gc::collect(&layout, &config, &mut ledger, args.dry_run);
    if args.json {
        print_json(&report)?;
    } else {
        print_human(&report).context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_human(r: &GcReport) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if r.dry_run {
        for dir in &r.run_dirs {
            writeln!(out, "would remove run folder {}", dir.display())?;
        }
        for prompt in &r.archived_prompts {
            writeln!(out, "would remove archived prompt {}", prompt.display())?;
        }
    }
    let verb = if r.dry_run { "would remove" } else { "removed" };
    writeln!(
        out,
        "{verb} {} run folder(s), {} archived prompt(s), {} artifact row(s)",
        r.runs_removed, r.prompts_removed, r.artifacts_removed
    )?;
    writeln!(
        out,
        "kept {} finished job(s); left alone {} unfinished and {} unreadable",
        r.runs_kept, r.runs_active, r.runs_skipped
    )?;
    if r.errors > 0 {
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: gc: {} item(s) failed (see the log above)",
            r.errors
        ));
    }
    Ok(())
}
