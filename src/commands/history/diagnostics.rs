//! `jobwarden history diagnostics [--code CODE | --files | --job JOB]
//! [--since WHEN] [--limit N] [--json]`: the compiler and linter
//! diagnostics the ledger keeps of each execution (see
//! `jobwarden_sys::diagnostics`). `--code`: the executions whose output held it,
//! newest first, each with the first later run of the same prompt, working
//! folder or repository whose output no longer did; `--files`: the files named most; `--job`: one
//! execution's, in the order printed; none of these: the codes and files
//! seen most. Exit 1 when nothing matched.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::list::{ExecutionJson, Window, found, print_json, prompt_label};
use crate::cli::{GlobalArgs, HistoryDiagnosticsArgs};
use jobwarden_ledger::{CodeCount, CodeHit, FileCount, StoredDiagnostic, short_id};

pub fn run(global: &GlobalArgs, args: &HistoryDiagnosticsArgs) -> anyhow::Result<ExitCode> {
    let since = Window::parse(args.since.as_deref(), None)?.since_ms;
    let (_, layout, ledger) = super::open(global)?;
    if let Some(job) = &args.job {
        let id = crate::commands::lookup_answer(jobwarden_engine::lookup::resolve_execution(
            &layout, &ledger, job,
        ))?;
        let found_ = ledger.diagnostics_of(id.as_str())?;
        if args.json {
            print_json(&found_)?;
        } else {
            print_diagnostics(&found_).context("writing to stdout")?;
        }
        return Ok(found(!found_.is_empty()));
    }
    if let Some(code) = &args.code {
        let mut hits = ledger.executions_with_code(code, args.limit)?;
        hits.retain(|h| since.is_none_or(|s| h.execution.finished_at >= s));
        if args.json {
            print_json(&hits.iter().map(HitJson::from).collect::<Vec<_>>())?;
        } else {
            print_hits(code, &hits).context("writing to stdout")?;
        }
        return Ok(found(!hits.is_empty()));
    }
    let files = ledger.diagnosed_files(since, args.limit)?;
    if args.files {
        if args.json {
            print_json(&files)?;
        } else {
            print_files(&files).context("writing to stdout")?;
        }
        return Ok(found(!files.is_empty()));
    }
    let codes = ledger.diagnostic_codes(since, args.limit)?;
    if args.json {
        print_json(&Overview {
            codes: &codes,
            files: &files,
        })?;
    } else {
        print_overview(&codes, &files).context("writing to stdout")?;
    }
    Ok(found(!codes.is_empty() || !files.is_empty()))
}

/// `history diagnostics --json` without `--code`, `--files` or `--job`.
#[derive(Serialize)]
struct Overview<'a> {
    codes: &'a [CodeCount],
    files: &'a [FileCount],
}

/// One entry of `history diagnostics --code C --json`.
#[derive(Serialize)]
struct HitJson<'a> {
    #[serde(flatten)]
    execution: ExecutionJson<'a>,
    /// How often the code appeared in its output.
    count: u32,
    /// The first later execution of the same prompt, working folder or
    /// repository without it, if any.
    resolved_by: Option<ExecutionJson<'a>>,
}

impl<'a> From<&'a CodeHit> for HitJson<'a> {
    fn from(h: &'a CodeHit) -> Self {
        HitJson {
            execution: ExecutionJson::from(&h.execution),
            count: h.count,
            resolved_by: h.resolved_by.as_ref().map(ExecutionJson::from),
        }
    }
}

fn print_diagnostics(found: &[StoredDiagnostic]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    for d in found {
        let place = match (&d.file, d.line) {
            (Some(f), Some(l)) => format!("{f}:{l}: "),
            (Some(f), None) => format!("{f}: "),
            _ => String::new(),
        };
        let code = d
            .code
            .as_deref()
            .map(|c| format!("[{c}]"))
            .unwrap_or_default();
        // The job's output is untrusted: no control character reaches the terminal.
        let line = format!("{place}{}{code}: {}", d.severity, d.message);
        let shown: String = line
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        writeln!(out, "{shown}")?;
    }
    Ok(())
}

fn print_hits(code: &str, hits: &[CodeHit]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if hits.is_empty() {
        return writeln!(out, "no recorded execution's output held {code}");
    }
    for h in hits {
        let e = &h.execution;
        let resolved = match &h.resolved_by {
            Some(r) => format!("gone in {} ({})", short_id(&r.id), r.outcome),
            None => "not gone yet".to_owned(),
        };
        writeln!(
            out,
            "{}  {:<28} {:<12} {code} ×{}  {resolved}",
            short_id(&e.id),
            prompt_label(&e.project, &e.name),
            e.outcome.as_str(),
            h.count
        )?;
    }
    Ok(())
}

fn print_files(files: &[FileCount]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if files.is_empty() {
        return writeln!(out, "no recorded diagnostic names a file");
    }
    writeln!(out, "{:>6} {:>6} {:>5}  FILE", "DIAGS", "ERRORS", "RUNS")?;
    for f in files {
        writeln!(
            out,
            "{:>6} {:>6} {:>5}  {}",
            f.diagnostics, f.errors, f.executions, f.path
        )?;
    }
    Ok(())
}

fn print_overview(codes: &[CodeCount], files: &[FileCount]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if codes.is_empty() && files.is_empty() {
        return writeln!(out, "no recorded execution's output held a diagnostic");
    }
    writeln!(out, "{:<16} {:>6} {:>5}", "CODE", "DIAGS", "RUNS")?;
    for c in codes {
        writeln!(
            out,
            "{:<16} {:>6} {:>5}",
            c.code, c.diagnostics, c.executions
        )?;
    }
    writeln!(out)?;
    print_files(files)
}
