//! `jobwarden jobs [--state S…] [--project P] [--name N] [--since T]
//! [--until T] [--limit N] [--json]`: jobs whose run folders exist, newest claim first,
//! from the job index. A live job's row is checked against its `job.json`
//! (which wins), so a lagging index never shows a finished job as running.

use std::process::ExitCode;

use serde::Serialize;

use crate::cli::{GlobalArgs, JobsArgs};
use crate::clock::Timestamp;
use crate::job::{JobId, JobRecord, JobState};
use crate::layout::{self, Layout};
use crate::ledger::{IndexedJob, JobFilter, short_id};

use super::args::Window;
use super::output::{
    Cell, Column, fmt_ago, fmt_duration, found, print_json, print_line, prompt_label, timestamp,
};

pub fn run(global: &GlobalArgs, args: &JobsArgs) -> anyhow::Result<ExitCode> {
    let window = Window::parse(args.since.as_deref(), args.until.as_deref())?;
    let filter = JobFilter {
        states: parse_states(&args.state)?,
        project: args
            .project
            .as_deref()
            .map(|p| layout::validate_project(p).map(|()| p.to_owned()))
            .transpose()
            .map_err(|e| anyhow::anyhow!("--project: {e}"))?,
        name: args
            .name
            .as_deref()
            .map(|n| layout::validate_segment(n).map(|()| n.to_owned()))
            .transpose()
            .map_err(|e| anyhow::anyhow!("--name {:?} {e}", args.name.as_deref().unwrap_or("")))?,
        since_ms: window.since_ms,
        until_ms: window.until_ms,
    };
    let (_, layout) = super::load(global)?;
    let rows = match super::open_ledger(&layout)? {
        Some(ledger) => ledger.list_jobs(&filter, args.limit as usize)?,
        None => Vec::new(),
    };
    // A row whose job.json moved on (the index lags by an instant) is shown
    // as it is now; one that no longer matches the state filter is dropped.
    let rows: Vec<IndexedJob> = rows
        .into_iter()
        .map(|j| current(&layout, j))
        .filter(|j| filter.states.is_empty() || filter.states.contains(&j.state))
        .collect();
    if args.json {
        let view: Vec<JobJson> = rows.iter().map(JobJson::from).collect();
        print_json(&view)?;
    } else if rows.is_empty() {
        print_line("no jobs matched")?;
    } else {
        print_table(&rows)?;
    }
    Ok(found(!rows.is_empty()))
}

/// `--state` values: job state names; the error lists them.
fn parse_states(values: &[String]) -> anyhow::Result<Vec<String>> {
    values
        .iter()
        .map(|v| {
            v.parse::<JobState>().map(|s| s.to_string()).map_err(|_| {
                anyhow::anyhow!(
                    "--state {v:?} is not a job state; use one of: {}",
                    JobState::ALL
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        })
        .collect()
}

/// The index row, or for a job not yet ended what its `job.json` says now.
pub(super) fn current(layout: &Layout, j: IndexedJob) -> IndexedJob {
    let live = j
        .state
        .parse::<JobState>()
        .map_or(true, |s| !s.is_terminal());
    if !live {
        return j;
    }
    JobId::parse(&j.id)
        .ok()
        .and_then(|id| JobRecord::load_job(layout, &id).ok())
        .map_or(j, |rec| IndexedJob::from_record(&rec))
}

/// One job in `jobs --json` and `status --json` (docs/cli-json.md).
#[derive(Debug, Serialize)]
pub(super) struct JobJson {
    id: String,
    project: String,
    name: String,
    state: String,
    attempt: u32,
    created_at: Timestamp,
    started_at: Option<Timestamp>,
    finished_at: Option<Timestamp>,
    duration_ms: Option<u64>,
    exit_code: Option<i32>,
    state_reason: Option<String>,
}

impl From<&IndexedJob> for JobJson {
    fn from(j: &IndexedJob) -> Self {
        JobJson {
            id: j.id.clone(),
            project: j.project.clone(),
            name: j.name.clone(),
            state: j.state.clone(),
            attempt: j.attempt,
            created_at: timestamp(j.created_at),
            started_at: j.started_at.map(timestamp),
            finished_at: j.finished_at.map(timestamp),
            duration_ms: j
                .started_at
                .zip(j.finished_at)
                .map(|(s, f)| f.saturating_sub(s)),
            exit_code: j.exit_code,
            state_reason: j.state_reason.clone(),
        }
    }
}

/// The table's columns; with the caps a row fits 80 columns.
pub(super) const COLUMNS: [Column; 6] = [
    Column::left("ID", 8),
    Column::left("PROMPT", 26),
    Column::left("STATE", 11),
    Column::right("TRY", 3),
    Column::right("TIME", 8),
    Column::left("CLAIMED", 12),
];

pub(super) fn print_table(rows: &[IndexedJob]) -> anyhow::Result<()> {
    super::output::print_table(&COLUMNS, rows, cells)
}

/// A job as a table row: the short id (the id's last 8 characters, which
/// `<job>` arguments accept a prefix of), prompt, state, attempt, run time
/// (so far, for a running job) and how long ago it was claimed.
pub(super) fn cells(j: &IndexedJob, now_ms: u64) -> Vec<Cell> {
    let time = match (j.started_at, j.finished_at) {
        (Some(s), Some(f)) => fmt_duration(f.saturating_sub(s)),
        (Some(s), None) => fmt_duration(now_ms.saturating_sub(s)),
        _ => "-".into(),
    };
    vec![
        short_id(&j.id).into(),
        prompt_label(&j.project, &j.name).into(),
        Cell::state(&j.state),
        j.attempt.to_string().into(),
        time.into(),
        fmt_ago(j.created_at, now_ms).into(),
    ]
}
