//! `jobwarden show <job> [--json]`: one job whole — its record as
//! `job.json` has it, what follows from it (`show/facts.rs`: profile,
//! route, attempt, elapsed or duration, timeout and time left), the paths
//! of its files, its ledger row, and the last lines of its log. A job
//! whose run folder retention removed is still shown from its ledger row;
//! one known to neither is a clean "no" (exit 1). A prompt waiting in the
//! inbox, which has no job yet, is shown by `commands/waiting.rs`: where it
//! waits, since when, and for what.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;

mod facts;
mod human;

use facts::Facts;

use super::history::list::ExecutionJson;
use super::output::print_json;
use crate::cli::{GlobalArgs, ShowArgs};
use jobwarden_engine::lookup::Target;
use jobwarden_ledger::Execution;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::fsio;

/// Lines of the log shown.
const LOG_LINES: usize = 10;
/// At most this much of the log's end is read for them.
const LOG_TAIL_BYTES: u64 = 16 * 1024;
/// How much of the end of `events.jsonl` is read for the notifications:
/// a job's deliveries are among its last events, a few hundred bytes each.
const NOTIFICATIONS_TAIL_BYTES: u64 = 256 * 1024;

pub fn run(global: &GlobalArgs, args: &ShowArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_existing(global)?;
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
    let log_tail = log_tail(layout.root(), &layout.job_log(&id));
    let mut facts = Facts::of(
        record.as_ref().map(|(_, rec)| rec),
        execution.as_ref(),
        Some(&config),
        Timestamp::now().epoch_ms(),
    );
    if !log_tail.is_empty() {
        // The log is ahead of the record's last heartbeat.
        facts.output = Some("some");
    }
    if let Some((_, rec)) = &record {
        facts.after = facts::AfterFact::of(&layout, rec);
    }
    let shown = Shown {
        notifications: notifications(&layout, &id),
        paths: Paths::of(&layout, &id, record.as_ref()),
        log_tail,
        id,
        record,
        execution,
        facts,
    };
    if args.json {
        print_json(&shown.json())?;
    } else {
        human::print(&shown).context("writing to stdout")?;
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
    /// The deliveries of `[[notify]]` hooks about it (`notified` and
    /// `notify_failed` events), oldest first.
    notifications: Vec<Value>,
    record: Option<(Value, JobRecord)>,
    execution: Option<Execution>,
    paths: Paths,
    log_tail: Vec<String>,
    facts: Facts,
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
    /// Profile, route, attempt, elapsed or duration, timeout, time left.
    #[serde(flatten)]
    facts: &'a Facts,
    /// `job.json` as it is, or null when retention removed the run folder.
    job: Option<&'a Value>,
    paths: &'a Paths,
    /// The ledger row (the `history` shape), or null before the job ends.
    execution: Option<ExecutionJson<'a>>,
    /// The last lines of `job.log`, oldest first.
    log_tail: &'a [String],
    /// Its `notified` and `notify_failed` events, oldest first.
    notifications: &'a [Value],
    /// The prompt waiting in the inbox, for one that has no job yet
    /// (`commands/waiting.rs`); null for a job.
    waiting: Option<()>,
}

impl Shown {
    fn json(&self) -> ShowJson<'_> {
        ShowJson {
            id: self.id.as_str(),
            facts: &self.facts,
            job: self.record.as_ref().map(|(raw, _)| raw),
            paths: &self.paths,
            execution: self.execution.as_ref().map(ExecutionJson::from),
            log_tail: &self.log_tail,
            notifications: &self.notifications,
            waiting: None,
        }
    }
}

/// The job's notification deliveries, from the end of its events, where
/// they are (they follow its end); none when they cannot be read.
fn notifications(layout: &Layout, id: &JobId) -> Vec<Value> {
    let ops = [
        jobwarden_model::events::Op::Notified.as_str(),
        jobwarden_model::events::Op::NotifyFailed.as_str(),
    ];
    jobwarden_model::events::read_tail(layout.root(), &layout.events(id), NOTIFICATIONS_TAIL_BYTES)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["op"].as_str().is_some_and(|op| ops.contains(&op)))
        .collect()
}

/// The last [`LOG_LINES`] lines of the log (invalid UTF-8 replaced).
/// A log that is not a regular file (a FIFO, a symlink) is refused with a
/// warning naming it, never read.
fn log_tail(root: &Path, path: &Path) -> Vec<String> {
    let bytes = match fsio::read_tail(root, path, LOG_TAIL_BYTES) {
        Ok((bytes, _)) => bytes,
        Err(e) if fsio::is_refusal(&e) => {
            jobwarden_sys::logging::line(format_args!("warning: {e}"));
            return Vec::new();
        }
        Err(_) => return Vec::new(),
    };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_LINES);
    lines[start..].iter().map(|l| (*l).to_owned()).collect()
}
