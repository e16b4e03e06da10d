//! Finished work generated directly (not run): job records on disk, the
//! job index and ledger rows, for the scenarios that measure a daemon or
//! the CLI with a long history behind them.

#![allow(clippy::disallowed_methods)] // fixtures of the harness

use std::path::Path;

use anyhow::Context;
use jobwarden_ledger::{Execution, IndexedJob, Ledger, Outcome, Source};
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::{Layout, PromptName};
use jobwarden_sys::clock::Timestamp;

/// `n` succeeded jobs with their run folders, records, archived prompts,
/// ledger rows and index rows, as the daemon leaves them.
pub fn finished_jobs_on_disk(root: &Path, n: usize) -> anyhow::Result<()> {
    let layout = Layout::new(root.to_path_buf());
    let mut ledger = Ledger::open(&layout.ledger())?;
    let mut index = Vec::with_capacity(n);
    let host = jobwarden_sys::host::hostname();
    for i in 0..n {
        let id = JobId::generate();
        let prompt = PromptName {
            project: format!("p{}", i % 50),
            name: format!("n{i}"),
        };
        std::fs::create_dir_all(layout.run_dir(&id))?;
        let archived = layout.archived_prompt(JobState::Succeeded, &prompt, &id);
        let archive = layout.relative(&archived).to_string_lossy().into_owned();
        let mut rec = JobRecord::new_queued(id.clone(), &prompt, archive.clone(), &host);
        rec.state = JobState::Succeeded;
        rec.started_at = Some(rec.created_at);
        rec.finished_at = Some(Timestamp::now());
        rec.exit_code = Some(0);
        rec.archive_path = Some(archive.clone());
        rec.outcome = Some("success".into());
        rec.disposition = Some("archived".into());
        rec.profile = Some("default".into());
        std::fs::write(layout.job_json(&id), serde_json::to_vec(&rec)?)?;
        std::fs::write(layout.prompt_copy(&id), "x\n")?;
        if let Some(dir) = archived.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(archived, "x\n")?;
        let exec = Execution::from_record(&rec, Outcome::Success, Some("archived"), Source::Daemon);
        ledger.record(&exec, &[], &[])?;
        index.push(IndexedJob::from_record(&rec));
    }
    ledger.index_jobs(&index)?;
    Ok(())
}

/// A long history generated fast, for the start-up scenario: `n`
/// succeeded jobs, each with its run folder (`job.json` and the prompt
/// copy), its archived prompt, its index row and its ledger row, written
/// without fsync and with the ledger's rows in large transactions. Their
/// times lie in the past, one second apart. Returns one of the ids (the
/// middle one) for `show`.
pub fn history_on_disk(root: &Path, n: usize) -> anyhow::Result<Option<JobId>> {
    let layout = Layout::new(root.to_path_buf());
    std::fs::create_dir_all(layout.runs())?;
    drop(Ledger::open(&layout.ledger())?);
    let mut conn = rusqlite::Connection::open(layout.ledger()).context("opening the ledger")?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    let start_ms = Timestamp::now()
        .epoch_ms()
        .saturating_sub(n as u64 * 1000 + 60_000);
    let template = history_template();
    let mut middle = None;
    let mut made_dirs = std::collections::HashSet::new();
    let mut done = 0;
    while done < n {
        let batch = (n - done).min(20_000);
        let tx = conn.transaction()?;
        {
            let mut jobs = tx.prepare_cached(HISTORY_JOB_ROW)?;
            let mut execs = tx.prepare_cached(HISTORY_EXECUTION_ROW)?;
            for i in done..done + batch {
                let rec = history_record(&template, i, start_ms + i as u64 * 1000);
                history_files(&layout, &rec, &mut made_dirs)?;
                history_rows(&rec, &mut jobs, &mut execs)?;
                if i == n / 2 {
                    middle = Some(rec.job_id.clone());
                }
            }
        }
        tx.commit().context("writing the history's rows")?;
        done += batch;
    }
    Ok(middle)
}

/// Remove what [`history_on_disk`] made (and the jobs run since) in the
/// order it was made: run folders by id (time-ordered), archived prompts by
/// number. Deleting in the order of creation touches the filesystem's
/// tables in order and takes half the time of the directory order that a
/// recursive removal follows.
pub fn remove_history(root: &Path) -> anyhow::Result<()> {
    let layout = Layout::new(root.to_path_buf());
    remove_in_order(&layout.runs(), |dir| Ok(std::fs::remove_dir_all(dir)?))?;
    let succeeded = layout.archive().join(JobState::Succeeded.as_str());
    remove_in_order(&succeeded, |project| {
        remove_in_order(project, |file| Ok(std::fs::remove_file(file)?))?;
        Ok(std::fs::remove_dir(project)?)
    })?;
    Ok(())
}

/// Remove each entry of `dir` with `remove`, shortest names first, then
/// by name (`n9` before `n10`; ids of equal length sort by time).
fn remove_in_order(
    dir: &Path,
    mut remove: impl FnMut(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        names.push(entry?.file_name());
    }
    names.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    for name in names {
        let path = dir.join(name);
        remove(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

const HISTORY_JOB_ROW: &str = "INSERT INTO jobs (id, id_short, project, name, state, attempt,
    created_at, started_at, finished_at, exit_code, updated_at)
    VALUES (?1, ?2, ?3, ?4, 'succeeded', 1, ?5, ?5, ?6, 0, ?6)";

const HISTORY_EXECUTION_ROW: &str = "INSERT INTO executions (id, project, name, attempt, profile,
    started_at, finished_at, duration_ms, outcome, exit_code, host, disposition, source)
    VALUES (?1, ?2, ?3, 1, 'default', ?4, ?5, ?6, 'success', 0, ?7, 'archived', 'daemon')";

/// The record every history job is a copy of.
fn history_template() -> JobRecord {
    let prompt = PromptName {
        project: "p0".into(),
        name: "n0".into(),
    };
    // This host's: a daemon's start-up check reads another host's records
    // without asking the ledger about them, which would flatter the figure.
    let host = jobwarden_sys::host::hostname();
    let mut rec = JobRecord::new_queued(JobId::generate(), &prompt, String::new(), &host);
    rec.state = JobState::Succeeded;
    rec.exit_code = Some(0);
    rec.outcome = Some("success".into());
    rec.disposition = Some("archived".into());
    rec.profile = Some("default".into());
    rec
}

/// The `i`th history job, created at `created_ms`, done 400 ms later.
fn history_record(template: &JobRecord, i: usize, created_ms: u64) -> JobRecord {
    let mut rec = template.clone();
    rec.job_id = JobId::generate();
    rec.project = format!("p{}", i % 50);
    rec.name = format!("n{i}");
    rec.created_at = Timestamp::from_epoch_ms(created_ms);
    rec.started_at = Some(Timestamp::from_epoch_ms(created_ms + 5));
    rec.finished_at = Some(Timestamp::from_epoch_ms(created_ms + 400));
    rec.updated_at = Timestamp::from_epoch_ms(created_ms + 400);
    rec
}

/// A history job's run folder and archived prompt.
fn history_files(
    layout: &Layout,
    rec: &JobRecord,
    made_dirs: &mut std::collections::HashSet<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let prompt = PromptName {
        project: rec.project.clone(),
        name: rec.name.clone(),
    };
    let archived = layout.archived_prompt(JobState::Succeeded, &prompt, &rec.job_id);
    let mut rec = rec.clone();
    let relative = layout.relative(&archived).to_string_lossy().into_owned();
    rec.inbox_path = Some(relative.clone());
    rec.archive_path = Some(relative);
    std::fs::create_dir(layout.run_dir(&rec.job_id))?;
    std::fs::write(layout.job_json(&rec.job_id), serde_json::to_vec(&rec)?)?;
    std::fs::write(layout.prompt_copy(&rec.job_id), "x\n")?;
    if let Some(dir) = archived.parent()
        && made_dirs.insert(dir.to_path_buf())
    {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&archived, "x\n")?;
    Ok(())
}

/// A history job's index row and ledger row.
fn history_rows(
    rec: &JobRecord,
    jobs: &mut rusqlite::CachedStatement<'_>,
    execs: &mut rusqlite::CachedStatement<'_>,
) -> anyhow::Result<()> {
    let id = rec.job_id.as_str();
    let created = rec.created_at.epoch_ms() as i64;
    let started = created + 5;
    let finished = created + 400;
    jobs.execute(rusqlite::params![
        id,
        jobwarden_ledger::short_id(id),
        rec.project,
        rec.name,
        created,
        finished
    ])?;
    execs.execute(rusqlite::params![
        id,
        rec.project,
        rec.name,
        started,
        finished,
        finished - started,
        rec.host
    ])?;
    Ok(())
}

/// `rows` executions (50 projects × 400 prompts, outcomes mixed) and
/// `jobs` finished jobs in the job index, generated inside SQLite.
pub fn long_history(ledger_path: &Path, rows: u64, jobs: u64) -> anyhow::Result<()> {
    drop(Ledger::open(ledger_path)?);
    let conn = rusqlite::Connection::open(ledger_path).context("opening the ledger")?;
    conn.execute_batch(&format!(
        "BEGIN;
         WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < {rows})
         INSERT INTO executions (id, project, name, attempt, started_at, finished_at, duration_ms,
                                 outcome, exit_code, host)
         SELECT 'bench-' || i, 'p' || (i % 50), 'n' || (i % 400), 1,
                1700000000000 + i * 1000 - (i * 7919 % 600000),
                1700000000000 + i * 1000, i * 7919 % 600000,
                CASE i % 7 WHEN 3 THEN 'failure' WHEN 4 THEN 'timeout'
                           WHEN 5 THEN 'rate_limited' WHEN 6 THEN 'aborted' ELSE 'success' END,
                CASE WHEN i % 7 IN (3, 4, 5, 6) THEN 1 ELSE 0 END, 'bench'
         FROM seq;
         WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < {jobs})
         INSERT INTO jobs (id, id_short, project, name, state, attempt, created_at, started_at,
                           finished_at, exit_code, updated_at)
         SELECT printf('%08x-0000-7000-8000-%012x', 26214400 + i / 1000, i),
                printf('%08x', i), 'p' || (i % 50), 'n' || (i % 400),
                CASE i % 6 WHEN 3 THEN 'failed' WHEN 4 THEN 'timed_out' WHEN 5 THEN 'aborted'
                           ELSE 'succeeded' END,
                1, 1700000000000 + i * 1000, 1700000000000 + i * 1000,
                1700000000000 + i * 1000 + 5000, 0, 1700000000000 + i * 1000 + 5000
         FROM seq;
         COMMIT;"
    ))
    .context("generating the history")?;
    Ok(())
}
