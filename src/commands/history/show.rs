//! `jobwarden history show <job> [--prompt] [--json]`: one execution, with
//! its artifacts (output tails) and paths, or (`--prompt`) the text of the
//! prompt it ran, as the ledger keeps it. `<job>` reads as everywhere (an id,
//! a unique prefix of an id or short id, `project/name` or a name: see
//! `jobwarden_engine::lookup::resolve_execution`), matched against the ledger's
//! executions. A malformed or ambiguous one is an error (exit 2, the
//! candidates listed); one the ledger does not have exits 1, naming it.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::list::{ExecutionJson, fmt_ago, fmt_duration, print_json, prompt_label, timestamp};
use crate::cli::{GlobalArgs, HistoryShowArgs};
use crate::commands::EXIT_NO;
use crate::commands::output::neutralise_str;
use jobwarden_ledger::history::{StoredArtifact, StoredPath};
use jobwarden_ledger::{Execution, Outcome, PromptText, PublishedRow, Source};
use jobwarden_sys::clock::Timestamp;

pub fn run(global: &GlobalArgs, args: &HistoryShowArgs) -> anyhow::Result<ExitCode> {
    let (_, layout, ledger) = super::open(global)?;
    let id = crate::commands::lookup_answer(jobwarden_engine::lookup::resolve_execution(
        &layout, &ledger, &args.job,
    ))?;
    let Some(execution) = ledger.execution(id.as_str())? else {
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: no execution {id} in the ledger {}",
            layout.ledger().display()
        ));
        return Ok(ExitCode::from(EXIT_NO));
    };
    let prompt = ledger.prompt_text(id.as_str())?;
    if args.prompt {
        return print_prompt(&execution, prompt.as_ref());
    }
    let shown = Shown {
        prompt,
        published: ledger.published(id.as_str())?,
        slurm: ledger.slurm_run(id.as_str())?,
        artifacts: ledger.artifacts(id.as_str())?,
        paths: ledger.paths(id.as_str())?,
        execution: &execution,
    };
    if args.json {
        print_json(&shown.json())?;
    } else {
        print_human(&shown)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// An execution with everything stored about it.
struct Shown<'a> {
    execution: &'a Execution,
    /// The prompt text the ledger keeps; `None` for a row from before it
    /// kept them, an external row, or an unreadable prompt copy.
    prompt: Option<PromptText>,
    published: Option<PublishedRow>,
    slurm: Option<jobwarden_ledger::SlurmRun>,
    artifacts: Vec<StoredArtifact>,
    paths: Vec<StoredPath>,
}

/// `history show --json`: the list shape plus the columns a listing leaves
/// out, the artifacts and the paths (docs/history-json.md).
#[derive(Serialize)]
struct ShowJson<'a> {
    #[serde(flatten)]
    execution: ExecutionJson<'a>,
    command: Option<&'a [String]>,
    workdir: Option<&'a str>,
    prompt_sha256: Option<&'a str>,
    /// The prompt's text as kept (`text`, `truncated`: only the first
    /// 64 KiB kept); null when the ledger has none for this row.
    prompt: Option<&'a PromptText>,
    /// Its published branch and how it was settled (merged, deleted);
    /// null when it published no branch.
    published: Option<&'a PublishedRow>,
    /// Its Slurm job (id, node, Slurm's last word, time pending and
    /// running); null when it ran here.
    slurm: Option<&'a jobwarden_ledger::SlurmRun>,
    artifacts: &'a [StoredArtifact],
    paths: &'a [StoredPath],
}

impl Shown<'_> {
    fn json(&self) -> ShowJson<'_> {
        let e = self.execution;
        ShowJson {
            execution: ExecutionJson::from(e),
            command: e.command.as_deref(),
            workdir: e.workdir.as_deref(),
            prompt_sha256: e.prompt_sha256.as_deref(),
            prompt: self.prompt.as_ref(),
            published: self.published.as_ref(),
            slurm: self.slurm.as_ref(),
            artifacts: &self.artifacts,
            paths: &self.paths,
        }
    }
}

fn print_human(s: &Shown<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let lines = fields(s.execution)
        .into_iter()
        .chain(std::iter::once((
            "prompt text",
            Some(prompt_kept(s.execution, s.prompt.as_ref())),
        )))
        .chain(published(s))
        .chain(slurm(s));
    for (label, value) in lines {
        if let Some(value) = value {
            // What jobs wrote: no escape reaches the terminal (`--json`
            // is the raw form).
            let value = neutralise_str(&value);
            writeln!(out, "{label:<12} {value}").context("writing to stdout")?;
        }
    }
    print_paths(&mut out, &s.paths).context("writing to stdout")?;
    print_artifacts(&mut out, &s.artifacts).context("writing to stdout")
}

/// Labelled lines of an execution; `None` values are not printed.
fn fields(e: &Execution) -> Vec<(&'static str, Option<String>)> {
    let now = Timestamp::now().epoch_ms();
    let finished = format!(
        "{} ({})",
        timestamp(e.finished_at),
        fmt_ago(e.finished_at, now)
    );
    vec![
        ("execution", Some(e.id.clone())),
        ("prompt", Some(prompt_label(&e.project, &e.name))),
        ("outcome", Some(outcome_line(e))),
        ("attempt", Some(attempt_line(e))),
        ("profile", e.profile.clone()),
        ("started", e.started_at.map(|ms| timestamp(ms).to_string())),
        ("finished", Some(finished)),
        ("duration", e.duration_ms.map(fmt_duration)),
        ("stage", e.failure_stage.clone()),
        // A success's reason (`publish_merged`) is no error.
        (
            if e.outcome == Outcome::Success {
                "reason"
            } else {
                "error"
            },
            e.error_message.clone(),
        ),
        ("result", e.result_ref.clone()),
        ("disposition", e.disposition.clone()),
        ("host", Some(e.host.clone())),
        ("command", e.command.as_ref().map(|c| c.join(" "))),
        ("workdir", e.workdir.clone()),
    ]
}

/// Whether the prompt's text is kept, and how to read it.
fn prompt_kept(e: &Execution, p: Option<&PromptText>) -> String {
    match p {
        Some(p) if p.truncated => format!(
            "kept, its first {} KiB (--prompt prints it)",
            jobwarden_ledger::PROMPT_KEPT_BYTES / 1024
        ),
        Some(_) => "kept (--prompt prints it)".to_owned(),
        None if e.source == Source::External => {
            "not kept (`history record` keeps no prompt)".to_owned()
        }
        None if e.outcome == jobwarden_ledger::Outcome::Rejected => {
            "not kept (a rejected prompt's text is not kept: its file is under \
             archive/rejected/ until retention removes it)"
                .to_owned()
        }
        None => "not kept (recorded before the ledger kept prompts, \
                 or its prompt copy could not be read)"
            .to_owned(),
    }
}

/// `history show --prompt`: the kept text as it was (exit 1, saying why,
/// when the ledger has none).
fn print_prompt(e: &Execution, p: Option<&PromptText>) -> anyhow::Result<ExitCode> {
    let Some(p) = p else {
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: the ledger keeps no prompt text for execution {}: {}",
            e.id,
            prompt_kept(e, None)
        ));
        return Ok(ExitCode::from(EXIT_NO));
    };
    let mut out = std::io::stdout().lock();
    out.write_all(neutralise_str(&p.text).as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")?;
    if p.truncated {
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: only the first {} KiB of this prompt are kept",
            jobwarden_ledger::PROMPT_KEPT_BYTES / 1024
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Its published branch, and its merge or deletion.
fn published(s: &Shown<'_>) -> Vec<(&'static str, Option<String>)> {
    let Some(p) = &s.published else {
        return Vec::new();
    };
    let settled = match (&p.settled, p.merged_at, &p.merge_commit) {
        (None, ..) => "watched by the reconcile (not merged yet)".to_owned(),
        (Some(how), Some(at), Some(commit)) => {
            format!("{how}: merged {at} by {commit}")
        }
        (Some(how), ..) => how.clone(),
    };
    vec![
        (
            "branch",
            Some(format!("{} → {} in {}", p.branch, p.target, p.repo)),
        ),
        ("merge", Some(settled)),
    ]
}

/// Its Slurm job: `12 on node1, COMPLETED; pending 2.1s, ran 4m03s`.
fn slurm(s: &Shown<'_>) -> Vec<(&'static str, Option<String>)> {
    let Some(r) = &s.slurm else {
        return Vec::new();
    };
    let mut line = r.slurm_job_id.clone();
    if let Some(node) = &r.node {
        line.push_str(&format!(" on {node}"));
    }
    if let Some(state) = &r.state {
        line.push_str(&format!(", {state}"));
    }
    let times: Vec<String> = [("pending", r.pending_ms), ("ran", r.run_ms)]
        .into_iter()
        .filter_map(|(what, ms)| ms.map(|ms| format!("{what} {}", fmt_duration(ms))))
        .collect();
    if !times.is_empty() {
        line.push_str(&format!("; {}", times.join(", ")));
    }
    vec![("slurm", Some(line))]
}

/// `failure (exit 3)`, `aborted (signal SIGTERM)`, `success`.
fn outcome_line(e: &Execution) -> String {
    match (e.exit_code, &e.signal) {
        (_, Some(sig)) => format!("{} (signal {sig})", e.outcome),
        (Some(code), None) => format!("{} (exit {code})", e.outcome),
        (None, None) => e.outcome.to_string(),
    }
}

fn attempt_line(e: &Execution) -> String {
    match &e.retry_of {
        Some(prev) => format!("{} (retry of {prev})", e.attempt),
        None => e.attempt.to_string(),
    }
}

fn print_paths(out: &mut impl Write, paths: &[StoredPath]) -> std::io::Result<()> {
    if paths.is_empty() {
        return Ok(());
    }
    writeln!(out, "paths:")?;
    for p in paths {
        writeln!(out, "  {:<12} {}", p.relation, neutralise_str(&p.path))?;
    }
    Ok(())
}

/// Each artifact's size line, then its text indented.
fn print_artifacts(out: &mut impl Write, artifacts: &[StoredArtifact]) -> std::io::Result<()> {
    for a in artifacts {
        let bytes = a.content["bytes"].as_u64().unwrap_or(0);
        let cut = if a.content["truncated"] == true {
            ", truncated: the tail is shown"
        } else {
            ""
        };
        writeln!(out, "{} ({bytes} bytes{cut}):", a.kind)?;
        for line in a.content["text"].as_str().unwrap_or("").lines() {
            writeln!(out, "    {}", neutralise_str(line))?;
        }
    }
    Ok(())
}
