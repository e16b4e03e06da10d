//! `jobwarden history export [--format json|night-watch]`.
//!
//! `json`: every execution, oldest first, in the shape of `history list
//! --json`, streamed row by row (a million rows never sit in memory).
//! `night-watch`: the shape the tool jobwarden replaces reads,
//! `{project: {name: {"records": [...]}}}` with the newest
//! [`NIGHT_WATCH_KEEP`] executions of each prompt, oldest to newest.
//! Both exit 0, even for an empty ledger (`[]`, `{}`): an export is a dump,
//! not a search.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::list::ExecutionJson;
use crate::cli::{GlobalArgs, HistoryExportArgs};
use jobwarden_ledger::Ledger;
use jobwarden_ledger::history::PromptRun;

/// Records per prompt in the night-watch export, as that tool kept them.
const NIGHT_WATCH_KEEP: u32 = 10;

enum Format {
    Json,
    NightWatch,
}

impl Format {
    fn parse(value: &str) -> anyhow::Result<Self> {
        match value {
            "json" => Ok(Format::Json),
            "night-watch" => Ok(Format::NightWatch),
            other => {
                anyhow::bail!("--format {other:?} is unknown; valid formats: json, night-watch")
            }
        }
    }
}

pub fn run(global: &GlobalArgs, args: &HistoryExportArgs) -> anyhow::Result<ExitCode> {
    let format = Format::parse(&args.format)?;
    let (_, _, ledger) = super::open(global)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    match format {
        Format::Json => export_json(&ledger, &mut out)?,
        Format::NightWatch => export_night_watch(&ledger, &mut out)?,
    }
    out.flush().context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// `[` row `,` row … `]`, one row per line, written as rows are read.
fn export_json(ledger: &Ledger, out: &mut impl Write) -> anyhow::Result<()> {
    let mut first = true;
    out.write_all(b"[").context("writing to stdout")?;
    ledger.each_execution(|e| -> anyhow::Result<()> {
        out.write_all(if first { b"\n" } else { b",\n" })?;
        first = false;
        serde_json::to_writer(&mut *out, &ExecutionJson::from(&e))?;
        Ok(())
    })?;
    let end: &[u8] = if first { b"]\n" } else { b"\n]\n" };
    out.write_all(end).context("writing to stdout")
}

/// One night-watch record.
#[derive(Serialize)]
struct Record {
    /// Epoch seconds of the end of the run.
    timestamp: u64,
    outcome: String,
    #[serde(rename = "exitCode")]
    exit_code: Option<i32>,
    attempt: u32,
}

#[derive(Default, Serialize)]
struct Prompt {
    records: Vec<Record>,
}

fn export_night_watch(ledger: &Ledger, out: &mut impl Write) -> anyhow::Result<()> {
    let mut tree: BTreeMap<String, BTreeMap<String, Prompt>> = BTreeMap::new();
    for run in ledger.newest_per_prompt(NIGHT_WATCH_KEEP)? {
        let PromptRun { project, name, .. } = &run;
        let prompt = tree
            .entry(project.clone())
            .or_default()
            .entry(name.clone())
            .or_default();
        prompt.records.push(record(&run));
    }
    serde_json::to_writer_pretty(&mut *out, &tree).context("writing JSON to stdout")?;
    writeln!(out).context("writing to stdout")
}

fn record(run: &PromptRun) -> Record {
    Record {
        timestamp: run.finished_at / 1000,
        outcome: run.outcome.clone(),
        exit_code: run.exit_code,
        attempt: run.attempt,
    }
}
