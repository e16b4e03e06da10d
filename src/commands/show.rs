//! `jobwarden show <job> [--json]`: one job whole — its record as
//! `job.json` has it, the paths of its files, its ledger row, and the last
//! lines of its log. A job whose run folder retention removed is still shown
//! from its ledger row; one known to neither is a clean "no" (exit 1). A
//! prompt waiting in the inbox, which has no job yet, is shown by
//! `commands/waiting.rs`: where it waits, since when, and for what.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;

use super::history::list::ExecutionJson;
use super::output::{fmt_ago, fmt_bytes, fmt_duration, print_json, prompt_label, timestamp};
use crate::cli::{GlobalArgs, ShowArgs};
use crate::clock::Timestamp;
use crate::error::IoContext;
use crate::fsio;
use crate::job::{JobId, JobRecord};
use crate::layout::Layout;
use crate::ledger::Execution;
use crate::lookup::Target;

/// Lines of the log shown.
const LOG_LINES: usize = 10;
/// At most this much of the log's end is read for them.
const LOG_TAIL_BYTES: u64 = 16 * 1024;

pub fn run(global: &GlobalArgs, args: &ShowArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    let ledger = super::open_ledger(&layout)?;
    let id = match super::resolve_target(&layout, ledger.as_ref(), &args.job)? {
        Target::Job(id) => id,
        Target::Waiting { prompt, .. } => {
            return super::waiting::show(&layout, &config, ledger.as_ref(), &prompt, args.json);
        }
    };
    let record = read_record(&layout, &id)?;
    let execution = match &ledger {
        Some(l) => l.execution(id.as_str())?,
        None => None,
    };
    if record.is_none() && execution.is_none() {
        return Err(super::No(format!("no job {id}: no run folder and no ledger row")).into());
    }
    let shown = Shown {
        paths: Paths::of(&layout, &id, record.as_ref()),
        log_tail: log_tail(layout.root(), &layout.job_log(&id)),
        id,
        record,
        execution,
    };
    if args.json {
        print_json(&shown.json())?;
    } else {
        print_human(&shown).context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The record as `job.json` holds it (every field, including ones this
/// version does not know), and parsed. `None` if the run folder is gone.
fn read_record(layout: &Layout, id: &JobId) -> anyhow::Result<Option<(Value, JobRecord)>> {
    if !layout.run_dir(id).is_dir() {
        return Ok(None);
    }
    let rec = JobRecord::load_job(layout, id)?;
    let raw = serde_json::to_value(&rec).context("re-encoding the record")?;
    Ok(Some((raw, rec)))
}

struct Shown {
    id: JobId,
    record: Option<(Value, JobRecord)>,
    execution: Option<Execution>,
    paths: Paths,
    log_tail: Vec<String>,
}

/// Where the job's files are (absolute), and whether each exists.
#[derive(Debug, Serialize)]
struct Paths {
    run_dir: PathBuf,
    job_json: PathBuf,
    job_log: PathBuf,
    events: PathBuf,
    prompt_copy: PathBuf,
    /// Where the prompt is now: `*.running.md` while the job holds it, in
    /// `archive/` after, or back in the inbox for another attempt.
    prompt: Option<PathBuf>,
    /// The ABORT marker, when one was written.
    abort_marker: Option<PathBuf>,
    run_dir_exists: bool,
}

impl Paths {
    fn of(layout: &Layout, id: &JobId, record: Option<&(Value, JobRecord)>) -> Self {
        let marker = layout.abort_marker(id);
        Paths {
            run_dir: layout.run_dir(id),
            job_json: layout.job_json(id),
            job_log: layout.job_log(id),
            events: layout.events(id),
            prompt_copy: layout.prompt_copy(id),
            prompt: record
                .and_then(|(_, rec)| rec.inbox_path.as_deref())
                .map(|p| layout.resolve(p)),
            abort_marker: marker.exists().then_some(marker),
            run_dir_exists: layout.run_dir(id).is_dir(),
        }
    }
}

/// `show --json` (docs/cli-json.md).
#[derive(Serialize)]
struct ShowJson<'a> {
    id: &'a str,
    /// `job.json` as it is, or null when retention removed the run folder.
    job: Option<&'a Value>,
    paths: &'a Paths,
    /// The ledger row (the `history` shape), or null before the job ends.
    execution: Option<ExecutionJson<'a>>,
    /// The last lines of `job.log`, oldest first.
    log_tail: &'a [String],
    /// The prompt waiting in the inbox, for one that has no job yet
    /// (`commands/waiting.rs`); null for a job.
    waiting: Option<()>,
}

impl Shown {
    fn json(&self) -> ShowJson<'_> {
        ShowJson {
            id: self.id.as_str(),
            job: self.record.as_ref().map(|(raw, _)| raw),
            paths: &self.paths,
            execution: self.execution.as_ref().map(ExecutionJson::from),
            log_tail: &self.log_tail,
            waiting: None,
        }
    }
}

/// The last [`LOG_LINES`] lines of the log (invalid UTF-8 replaced).
/// A log that is not a regular file (a FIFO, a symlink) is refused with a
/// warning naming it, never read.
fn log_tail(root: &Path, path: &Path) -> Vec<String> {
    let read = || -> Result<Vec<u8>, crate::error::IoError> {
        let mut f = fsio::open_file(root, path)?;
        let len = f.metadata().ctx("inspecting", path)?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))
            .ctx("reading", path)?;
        Ok(fsio::read_capped_from(f, path, LOG_TAIL_BYTES)?.0)
    };
    let bytes = match read() {
        Ok(bytes) => bytes,
        Err(e) if fsio::is_refusal(&e) => {
            crate::logging::line(format_args!("warning: {e}"));
            return Vec::new();
        }
        Err(_) => return Vec::new(),
    };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_LINES);
    lines[start..].iter().map(|l| (*l).to_owned()).collect()
}

fn print_human(s: &Shown) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let now = Timestamp::now().epoch_ms();
    let mut line = |k: &str, v: &str| writeln!(out, "{k:<10}{v}");
    let when = |t: Timestamp| format!("{} ({t})", fmt_ago(t.epoch_ms(), now));
    line("job", s.id.as_str())?;
    if let Some((_, rec)) = &s.record {
        let retry = rec
            .retry_of
            .as_ref()
            .map(|r| format!(", retry of {r}"))
            .unwrap_or_default();
        line(
            "prompt",
            &format!(
                "{} (attempt {}{retry})",
                prompt_label(&rec.project, &rec.name),
                rec.attempt
            ),
        )?;
        let reason = rec
            .state_reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        let stage = rec
            .failure_stage
            .as_deref()
            .map(|st| format!(" (in {st})"))
            .unwrap_or_default();
        line("state", &format!("{}{stage}{reason}", rec.state))?;
        if let Some(r) = &rec.result_ref {
            line("result", r)?;
        }
        line("claimed", &when(rec.created_at))?;
        if let Some(t) = rec.started_at {
            line("started", &when(t))?;
        }
        if let Some(t) = rec.finished_at {
            let took = rec
                .started_at
                .map(|st| {
                    format!(
                        ", took {}",
                        fmt_duration(t.epoch_ms().saturating_sub(st.epoch_ms()))
                    )
                })
                .unwrap_or_default();
            line("finished", &format!("{}{took}", when(t)))?;
        }
        match (rec.exit_code, rec.signal.as_deref()) {
            (Some(code), _) => line("exit", &format!("code {code}"))?,
            (None, Some(sig)) => line("exit", &format!("killed by {sig}"))?,
            _ => {}
        }
        if let Some(cmd) = &rec.command {
            line("command", &cmd.join(" "))?;
        }
        if let Some(w) = &rec.workdir {
            line("workdir", w)?;
        }
        if !rec.state.is_terminal() {
            let heartbeat = rec
                .heartbeat_at
                .map(|t| format!(", heartbeat {}", fmt_ago(t.epoch_ms(), now)))
                .unwrap_or_default();
            if let Some(pid) = rec.pid {
                line("process", &format!("pid {pid}{heartbeat}"))?;
            }
        }
    } else {
        line(
            "state",
            "run folder removed by retention; the ledger row remains",
        )?;
    }
    let p = &s.paths;
    if p.run_dir_exists {
        let size = std::fs::metadata(&p.job_log)
            .map(|m| format!(" ({})", fmt_bytes(m.len())))
            .unwrap_or_default();
        line("files", &format!("{}", p.run_dir.display()))?;
        line(
            "",
            &format!("  job.json, prompt.md, events.jsonl, job.log{size}"),
        )?;
    }
    if let Some(prompt) = &p.prompt {
        line("prompt at", &prompt.display().to_string())?;
    }
    if let Some(marker) = &p.abort_marker {
        line("abort", &format!("requested ({})", marker.display()))?;
    }
    match &s.execution {
        Some(e) => {
            let took = e
                .duration_ms
                .map(|d| format!(", {}", fmt_duration(d)))
                .unwrap_or_default();
            let disposition = e
                .disposition
                .as_deref()
                .map(|d| format!(", {d}"))
                .unwrap_or_default();
            line(
                "ledger",
                &format!(
                    "{}{took}{disposition}, finished {}",
                    e.outcome.as_str(),
                    fmt_ago(timestamp(e.finished_at).epoch_ms(), now)
                ),
            )?;
        }
        None => line("ledger", "no row yet (written when the job ends)")?,
    }
    if !s.log_tail.is_empty() {
        writeln!(out, "log (last {} lines):", s.log_tail.len())?;
        for l in &s.log_tail {
            writeln!(out, "  {l}")?;
        }
    }
    Ok(())
}
