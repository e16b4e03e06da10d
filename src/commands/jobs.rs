//! `jobwarden jobs [--state S…] [--project P] [--name N] [--since T]
//! [--until T] [--limit N] [--json]`: everything the daemon knows of, newest first.
//! First the prompts waiting in the inbox with no job yet (`waiting`, or
//! `deferred` by a cooldown; `commands/waiting.rs`), newest drop first;
//! then jobs whose run folders exist, newest claim first, from the job
//! index. A live job's row is checked against its `job.json` (which wins),
//! so a lagging index never shows a finished job as running.

use std::process::ExitCode;

use serde::Serialize;

use crate::cli::{GlobalArgs, JobsArgs};
use jobwarden_engine::waiting::{self, DEFERRED, WAITING, Waiting};
use jobwarden_ledger::{IndexedJob, JobFilter, JobOrder, Ledger, SHORT_ID_MAX, short_id};
use jobwarden_model::config::Config;
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::{self, Layout};
use jobwarden_sys::clock::Timestamp;

use super::args::Window;
use super::output::{
    Cell, Column, Table, fit, fmt_ago, fmt_duration, found, limit_of, print_json, print_line,
    prompt_label, say_more, timestamp,
};
use super::queue_view::{QueueView, pause_lines};
use super::waiting::WaitingJson;

pub fn run(global: &GlobalArgs, args: &JobsArgs) -> anyhow::Result<ExitCode> {
    if args.watch {
        return super::redraw::every_second("jobwarden jobs", || once(global, args));
    }
    once(global, args)
}

/// The list, once.
fn once(global: &GlobalArgs, args: &JobsArgs) -> anyhow::Result<ExitCode> {
    let window = Window::parse(args.since.as_deref(), args.until.as_deref())?;
    let states = parse_states(&args.state)?;
    let (inbox_states, job_states): (Vec<String>, Vec<String>) = states
        .into_iter()
        .partition(|s| s == WAITING || s == DEFERRED);
    let any_state = args.state.is_empty();
    let filter = JobFilter {
        states: job_states,
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
        profile: args.profile.clone(),
        since_ms: window.since_ms,
        until_ms: window.until_ms,
        text: None,
    };
    let (config, layout) = super::load_existing(global)?;
    let ledger = super::open_ledger(&layout)?;
    let limit = limit_of(args.limit);
    let mut rows = Vec::new();
    let mut more = 0;
    if (any_state || !inbox_states.is_empty()) && filter.profile.is_none() {
        let wanted = |state: &str| any_state || inbox_states.iter().any(|s| s == state);
        let (found, matched) = in_inbox(&layout, &config, ledger.as_ref(), &filter, wanted, limit)?;
        more += matched - found.len() as u64;
        rows.extend(found.into_iter().map(Row::Waiting));
    }
    if any_state || !filter.states.is_empty() {
        let (jobs, matched) = match &ledger {
            Some(ledger) => ledger.page_jobs(&filter, JobOrder::Newest, 0, limit - rows.len())?,
            None => (Vec::new(), 0),
        };
        more += matched.saturating_sub(jobs.len() as u64);
        // A row whose job.json moved on (the index lags by an instant) is
        // shown as it is now; one that no longer matches the state filter
        // is dropped.
        // Why each queued job waits: the live daemon's word, else what
        // the pause markers say.
        let queue = QueueView::load(&layout);
        rows.extend(
            jobs.into_iter()
                .map(|j| current(&layout, j))
                .filter(|j| filter.states.is_empty() || filter.states.contains(&j.state))
                .map(|j| {
                    let waits = (j.state == "queued")
                        .then(|| queue.reason(&j.id, &j.project))
                        .flatten();
                    Row::Job(j, waits)
                }),
        );
    }
    say_more(more, args.limit);
    if args.json {
        let daemon = super::waiting::daemon_alive(&layout);
        let view: Vec<JobJson> = rows.iter().map(|r| r.json(&layout, daemon)).collect();
        print_json(&view)?;
    } else {
        for p in pause_lines(&jobwarden_model::control::read(&layout)) {
            print_line(format_args!("paused: {}", fit(&p, 72)))?;
        }
        if rows.is_empty() {
            print_line("no jobs matched")?;
        } else {
            let now = Timestamp::now().epoch_ms();
            let mut table = Table::new(&COLUMNS);
            for row in &rows {
                row.push_to(&mut table, now);
            }
            super::output::print_lines(&table.lines(super::output::colour()))?;
        }
    }
    Ok(found(!rows.is_empty()))
}

/// One line of `jobs`: a prompt with no job yet, or a job.
enum Row {
    Waiting(Waiting),
    /// A job, and why it waits when it is queued.
    Job(IndexedJob, Option<String>),
}

impl Row {
    fn json(&self, layout: &Layout, daemon: bool) -> JobJson {
        match self {
            Row::Job(j, waits) => JobJson {
                waits: waits.clone(),
                ..JobJson::from(j)
            },
            Row::Waiting(w) => JobJson::waiting(layout, w, daemon),
        }
    }

    /// Its row of the table (a queued job's reason to wait on a line under it).
    fn push_to(&self, table: &mut Table, now_ms: u64) {
        match self {
            Row::Job(j, waits) => {
                table.push(cells(j, now_ms));
                if let Some(why) = waits {
                    // Cut to keep the table to 80 columns.
                    table.note(format!("{:<8}  waits: {}", "", fit(why, 63)));
                }
            }
            Row::Waiting(w) => table.push(waiting_cells(w, now_ms)),
        }
    }
}

/// The prompts waiting in the inbox that pass `filter` and whose state
/// (`waiting` or `deferred`) is `wanted`, newest first, at most `limit`;
/// and how many pass in all.
fn in_inbox(
    layout: &Layout,
    config: &Config,
    ledger: Option<&Ledger>,
    filter: &JobFilter,
    wanted: impl Fn(&str) -> bool,
    limit: usize,
) -> anyhow::Result<(Vec<Waiting>, u64)> {
    let now = Timestamp::now().epoch_ms();
    let mut rows = Vec::new();
    let mut matched = 0;
    let every_state = wanted(WAITING) && wanted(DEFERRED);
    for (prompt, found) in waiting::list(layout) {
        let passes = filter.project.as_ref().is_none_or(|p| *p == prompt.project)
            && filter.name.as_ref().is_none_or(|n| *n == prompt.name)
            && filter
                .since_ms
                .is_none_or(|since| Timestamp::from(found.mtime).epoch_ms() >= since)
            && filter
                .until_ms
                .is_none_or(|until| Timestamp::from(found.mtime).epoch_ms() < until);
        if !passes {
            continue;
        }
        if rows.len() >= limit && every_state {
            // Counted, not shown: what it waits for need not be worked out.
            matched += 1;
            continue;
        }
        let w = waiting::examine(layout, config, ledger, prompt, found, now)?;
        if wanted(w.state()) {
            matched += 1;
            if rows.len() < limit {
                rows.push(w);
            }
        }
    }
    Ok((rows, matched))
}

/// `--state` values: job state names, or `waiting` / `deferred` for a
/// prompt in the inbox; the error lists them.
fn parse_states(values: &[String]) -> anyhow::Result<Vec<String>> {
    values
        .iter()
        .map(|v| {
            if v == WAITING || v == DEFERRED {
                return Ok(v.clone());
            }
            v.parse::<JobState>().map(|s| s.to_string()).map_err(|_| {
                anyhow::anyhow!(
                    "--state {v:?} is not a state; use one of: {WAITING}, {DEFERRED}, {}",
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

/// One row of `jobs --json`, and a job in `status --json`
/// (docs/cli-json.md): a job, or a prompt waiting in the inbox (`id` and
/// `created_at` null, `waiting` set).
#[derive(Debug, Serialize)]
pub(super) struct JobJson {
    id: Option<String>,
    /// `project/name` (`name` at the top of the inbox).
    label: String,
    project: String,
    name: String,
    state: String,
    attempt: u32,
    created_at: Option<Timestamp>,
    started_at: Option<Timestamp>,
    finished_at: Option<Timestamp>,
    duration_ms: Option<u64>,
    exit_code: Option<i32>,
    state_reason: Option<String>,
    waiting: Option<WaitingJson>,
    /// Why a queued job has not started, when known.
    waits: Option<String>,
    /// The profile it ran under; null for a prompt with no job yet, and
    /// for a job the index has not yet learnt it of.
    profile: Option<String>,
}

impl From<&IndexedJob> for JobJson {
    fn from(j: &IndexedJob) -> Self {
        JobJson {
            id: Some(j.id.clone()),
            label: prompt_label(&j.project, &j.name),
            project: j.project.clone(),
            name: j.name.clone(),
            state: j.state.clone(),
            attempt: j.attempt,
            created_at: Some(timestamp(j.created_at)),
            started_at: j.started_at.map(timestamp),
            finished_at: j.finished_at.map(timestamp),
            duration_ms: j
                .started_at
                .zip(j.finished_at)
                .map(|(s, f)| f.saturating_sub(s)),
            exit_code: j.exit_code,
            state_reason: j.state_reason.clone(),
            waiting: None,
            waits: None,
            profile: j.profile.clone(),
        }
    }
}

impl JobJson {
    fn waiting(layout: &Layout, w: &Waiting, daemon: bool) -> Self {
        JobJson {
            id: None,
            label: w.label(),
            project: w.prompt.project.clone(),
            name: w.prompt.name.clone(),
            state: w.state().to_owned(),
            attempt: w.attempt,
            created_at: None,
            started_at: None,
            finished_at: None,
            duration_ms: None,
            exit_code: None,
            state_reason: Some(w.reason(daemon)),
            waiting: Some(WaitingJson::new(layout, w, daemon)),
            waits: None,
            profile: None,
        }
    }
}

/// The longest state a row shows (`setup_failed`), whole.
pub(super) const STATE_WIDTH: usize = 12;

/// The table's columns; a row fits 80 columns while its id is a generated
/// one's short form (custom ids are shown whole, however long).
pub(super) const COLUMNS: [Column; 6] = [
    Column::left("ID", SHORT_ID_MAX),
    Column::left("PROMPT", 26),
    Column::left("STATE", STATE_WIDTH),
    Column::right("TRY", 3),
    Column::right("TIME", 8),
    Column::left("CLAIMED", 12),
];

/// A job as a table row: the short id ([`short_id`], which `<job>`
/// arguments accept a prefix of), prompt, state, attempt, run time
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

/// A prompt waiting in the inbox as a table row: no id yet (`-`), the
/// attempt its claim starts, and when it is claimed: `after 1h59m` for a
/// deferred one, else `not yet`. `show project/name` says why.
fn waiting_cells(w: &Waiting, now_ms: u64) -> Vec<Cell> {
    let when = match &w.deferral {
        Some(d) => format!("after {}", fmt_duration(d.until_ms.saturating_sub(now_ms))),
        None => "not yet".to_owned(),
    };
    vec![
        "-".into(),
        w.label().into(),
        Cell::state(w.state()),
        w.attempt.to_string().into(),
        "-".into(),
        when.into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_and_a_custom_id_fit_their_columns_whole() {
        let names = JobState::ALL.iter().map(|s| s.as_str());
        for state in names.chain([WAITING, DEFERRED]) {
            assert!(state.len() <= STATE_WIDTH, "{state} is cut");
        }
        let job = |id: &str, state: JobState| IndexedJob {
            id: id.into(),
            project: "p".into(),
            name: "n".into(),
            state: state.to_string(),
            attempt: 1,
            created_at: 0,
            started_at: None,
            finished_at: None,
            exit_code: None,
            state_reason: None,
            updated_at: 0,
            profile: None,
        };
        let mut table = Table::new(&COLUMNS);
        table.push(cells(&job("nightly-2", JobState::SetupFailed), 0));
        let id = "019ac5a1-7c2e-7d41-9a3b-5e8f3c159231-r2";
        table.push(cells(&job(id, JobState::Interrupted), 0));
        let lines = table.lines(false);
        assert!(lines[1].starts_with("nightly-2  "), "{lines:#?}");
        assert!(lines[1].contains(" setup_failed "), "{lines:#?}");
        assert!(lines[2].starts_with("3c159231-r2  "), "{lines:#?}");
    }
}
