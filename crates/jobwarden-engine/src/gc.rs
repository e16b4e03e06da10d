//! Retention (DESIGN §7): prune finished work by count and age. One pass
//! over `runs/` judges every run folder; [`select_removals`] (pure) decides
//! which finished jobs go; their run folders and archived prompts are then
//! removed, and the ledger drops the artifacts of all but the newest
//! executions of each prompt.
//!
//! What is never touched: a job that is not terminal or whose monitor still
//! holds its lock, a run folder whose record does not load (left for a
//! person to look at), anything in `runs/` that is not a real folder named
//! by a valid job id, any file outside `archive/`, and `executions` rows.
//!
//! Used by `jobwarden gc` and periodically by the daemon (which decides
//! when), one pass at a time (`gc.lock` at the root); it never fails as a
//! whole: each failure is logged and counted.
//! Deletions are not fsynced: one that a crash undoes is simply redone by
//! the next pass.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::recover::{self, Monitor};
use jobwarden_ledger::Ledger;
use jobwarden_model::config::Config;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;
use jobwarden_sys::fsio;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// What one retention pass removed (or, in a dry run, would remove).
#[derive(Debug, Default, Serialize)]
pub struct GcReport {
    /// True when nothing was changed, only listed.
    pub dry_run: bool,
    pub runs_removed: usize,
    pub prompts_removed: usize,
    pub artifacts_removed: usize,
    /// Finished jobs kept by `keep_runs` / `keep_days`.
    pub runs_kept: usize,
    /// Jobs not terminal yet, or whose monitor still lives: never touched.
    pub runs_active: usize,
    /// Run folders whose record does not load: left alone.
    pub runs_skipped: usize,
    /// Failures (each one logged).
    pub errors: usize,
    pub run_dirs: Vec<PathBuf>,
    pub archived_prompts: Vec<PathBuf>,
    pub artifacts: Vec<PrunedArtifact>,
}

/// One `execution_artifacts` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrunedArtifact {
    pub execution_id: String,
    pub kind: String,
}

/// A terminal job whose monitor is gone: what the selection looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub id: JobId,
    pub finished_at: SystemTime,
}

/// Apply `config.retention` under `layout`. With `dry_run`, change nothing
/// and report what would go.
pub fn collect(layout: &Layout, config: &Config, ledger: &mut Ledger, dry_run: bool) -> GcReport {
    let mut report = GcReport {
        dry_run,
        ..GcReport::default()
    };
    // One pass at a time (the daemon's, `jobwarden gc`): two passes would
    // judge and remove the same folders at once.
    let _turn = match fsio::lock_wait(layout.root(), &layout.gc_lock()) {
        Ok(lock) => lock,
        Err(e) => {
            tracing::error!("gc: {e}; nothing was pruned");
            report.errors += 1;
            return report;
        }
    };
    let finished = scan(layout, &mut report);
    let total = finished.len();
    let r = config.retention;
    let doomed = select_removals(finished, r.keep_runs, r.keep_days, SystemTime::now());
    report.runs_kept = total - doomed.len();
    for job in &doomed {
        remove_job(layout, ledger, &job.id, dry_run, &mut report);
    }
    prune_artifacts(ledger, r.keep_artifacts, dry_run, &mut report);
    log_summary(&report);
    report
}

/// Which finished jobs retention removes: every one except the newest
/// `keep_runs` (by `finished_at`, ties by id) and those that finished less
/// than `keep_days` days before `now`.
pub fn select_removals(
    mut jobs: Vec<Finished>,
    keep_runs: usize,
    keep_days: u32,
    now: SystemTime,
) -> Vec<Finished> {
    let keep_for = DAY * keep_days;
    jobs.sort_by(|a, b| (b.finished_at, &b.id).cmp(&(a.finished_at, &a.id)));
    jobs.into_iter()
        .skip(keep_runs)
        .filter(|j| now.duration_since(j.finished_at).unwrap_or_default() >= keep_for)
        .collect()
}

/// One pass over `runs/`: the finished jobs; the others are counted.
fn scan(layout: &Layout, report: &mut GcReport) -> Vec<Finished> {
    match layout.job_ids() {
        Ok(ids) => ids
            .into_iter()
            .filter_map(|id| judge(layout, id, report))
            .collect(),
        Err(e) => {
            tracing::error!("gc: reading {}: {e}", layout.runs().display());
            report.errors += 1;
            Vec::new()
        }
    }
}

/// Load a job's record: `Some` if retention may consider it.
fn judge(layout: &Layout, id: JobId, report: &mut GcReport) -> Option<Finished> {
    let rec = match JobRecord::load_job(layout, &id) {
        Ok(rec) => rec,
        Err(e) => {
            tracing::warn!(job = %id, "gc: left alone, its record does not load: {e}");
            report.runs_skipped += 1;
            return None;
        }
    };
    if !is_finished(layout, &rec) {
        report.runs_active += 1;
        return None;
    }
    let finished_at = rec.finished_at.unwrap_or(rec.updated_at).system_time();
    Some(Finished { id, finished_at })
}

/// Terminal, its prompt archived, and no monitor holding it any more.
fn is_finished(layout: &Layout, rec: &JobRecord) -> bool {
    rec.state.is_terminal()
        && archive_settled(layout, rec)
        && !matches!(
            recover::monitor_state_of(layout, &rec.job_id, Some(rec)),
            Monitor::Alive(_)
        )
}

/// Whoever ends a job writes the terminal record, then moves the prompt to
/// the archive: a record naming an archive that is not there yet while the
/// claimed prompt still is means that move is under way (or left for
/// startup recovery to finish). Such a job is not done with.
fn archive_settled(layout: &Layout, rec: &JobRecord) -> bool {
    let present = |p: PathBuf| fs::symlink_metadata(p).is_ok();
    let Some(rel) = rec.archive_path.as_deref() else {
        // Requeued (or never archived): done with only once its prompt is no
        // longer claimed, whoever holds the claim now.
        return !present(layout.running_prompt(&rec.prompt_name()));
    };
    present(layout.resolve(rel)) || !present(layout.running_prompt(&rec.prompt_name()))
}

/// Remove one finished job: run folder first, then its archived prompt.
/// In that order because a record naming a missing archive would make
/// startup recovery "finish" the archive move with a newer job's claim.
fn remove_job(
    layout: &Layout,
    ledger: &mut Ledger,
    id: &JobId,
    dry_run: bool,
    report: &mut GcReport,
) {
    // Re-check against the record as it is now, not as the scan saw it.
    let rec = match JobRecord::load_job(layout, id) {
        Ok(rec) if is_finished(layout, &rec) => rec,
        Ok(_) => {
            report.runs_active += 1;
            return;
        }
        Err(e) => {
            tracing::warn!(job = %id, "gc: left alone, its record does not load: {e}");
            report.runs_skipped += 1;
            return;
        }
    };
    // The record may be the only copy of a row whose insert failed: never
    // delete it before the ledger has the row.
    if !dry_run {
        if let Err(e) = jobwarden_ledger::backfill::ensure_row(layout, ledger, &rec) {
            tracing::warn!(job = %id, "gc: left alone, its ledger row could not be ensured: {e}");
            report.runs_skipped += 1;
            return;
        }
    }
    let prompt = archived_prompt(layout, &rec);
    let dir = layout.run_dir(id);
    if dry_run {
        note_run(report, dir);
        if let Some(p) = prompt {
            note_prompt(report, p);
        }
        return;
    }
    remove_run_dir(report, dir);
    if layout.has_record(id) {
        return; // The record survived: the next pass retries both, in order.
    }
    if let Err(e) = ledger.unindex_jobs(&[id.to_string()]) {
        tracing::warn!(job = %id, "gc: {e}; the job index is refreshed at the next start");
    }
    if let Some(p) = prompt {
        remove_prompt(report, p);
    }
}

fn remove_run_dir(report: &mut GcReport, dir: PathBuf) {
    // remove_dir_all never follows symlinks, at the top or inside.
    match fs::remove_dir_all(&dir) {
        Ok(()) => note_run(report, dir),
        // Removed meanwhile by someone else (a person, an older version):
        // what was to be done is done.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::error!("gc: removing {}: {e}", dir.display());
            report.errors += 1;
        }
    }
}

fn remove_prompt(report: &mut GcReport, path: PathBuf) {
    match fs::remove_file(&path) {
        Ok(()) => note_prompt(report, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::error!("gc: removing {}: {e}", path.display());
            report.errors += 1;
        }
    }
}

fn note_run(report: &mut GcReport, dir: PathBuf) {
    report.runs_removed += 1;
    report.run_dirs.push(dir);
}

fn note_prompt(report: &mut GcReport, path: PathBuf) {
    report.prompts_removed += 1;
    report.archived_prompts.push(path);
}

/// The job's archived prompt, if it exists, is not a folder and lies under
/// `archive/` even with symlinks resolved.
fn archived_prompt(layout: &Layout, rec: &JobRecord) -> Option<PathBuf> {
    let rel = rec.archive_path.as_deref()?;
    let Some(path) = layout.archived_file(rel) else {
        tracing::warn!(job = %rec.job_id, "gc: archive_path {rel:?} is not under archive/; left alone");
        return None;
    };
    let meta = fs::symlink_metadata(&path).ok()?;
    if meta.is_dir() || !stays_in_archive(layout, &path) {
        tracing::warn!(job = %rec.job_id, "gc: {} is a folder or leads out of the archive; left alone", path.display());
        return None;
    }
    Some(path)
}

/// Is the folder holding `path`, symlinks resolved, inside `archive/`? A
/// symlinked folder must not lead a deletion elsewhere.
fn stays_in_archive(layout: &Layout, path: &Path) -> bool {
    let (Some(parent), Ok(archive)) = (path.parent(), fs::canonicalize(layout.archive())) else {
        return false;
    };
    fs::canonicalize(parent).is_ok_and(|p| p.starts_with(&archive))
}

fn prune_artifacts(ledger: &mut Ledger, keep: usize, dry_run: bool, report: &mut GcReport) {
    match ledger.prune_artifacts(keep, dry_run) {
        Ok(rows) => {
            report.artifacts_removed = rows.len();
            report.artifacts = rows
                .into_iter()
                .map(|(execution_id, kind)| PrunedArtifact { execution_id, kind })
                .collect();
        }
        Err(e) => {
            tracing::error!("gc: pruning artifacts: {e}");
            report.errors += 1;
        }
    }
}

fn log_summary(r: &GcReport) {
    let changed = r.runs_removed + r.prompts_removed + r.artifacts_removed > 0;
    if r.dry_run || !changed {
        tracing::debug!(
            runs_kept = r.runs_kept,
            errors = r.errors,
            "retention pass: nothing removed"
        );
        return;
    }
    tracing::info!(
        dry_run = r.dry_run,
        runs_removed = r.runs_removed,
        prompts_removed = r.prompts_removed,
        artifacts_removed = r.artifacts_removed,
        runs_kept = r.runs_kept,
        runs_active = r.runs_active,
        runs_skipped = r.runs_skipped,
        errors = r.errors,
        "retention pass done"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobwarden_model::config::{ConfigSource, parse};
    use jobwarden_model::job::JobState;
    use jobwarden_model::layout::PromptName;

    const NOW_S: u64 = 1_800_000_000;

    fn at(secs_before_now: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(NOW_S - secs_before_now)
    }

    fn now() -> SystemTime {
        at(0)
    }

    /// Jobs `j0`, `j1`, ... finished `ages[i]` seconds before now.
    fn jobs(ages: &[u64]) -> Vec<Finished> {
        ages.iter()
            .enumerate()
            .map(|(i, age)| Finished {
                id: JobId::parse(&format!("j{i}")).expect("id"),
                finished_at: at(*age),
            })
            .collect()
    }

    fn ids(v: &[Finished]) -> Vec<&str> {
        let mut ids: Vec<&str> = v.iter().map(|f| f.id.as_str()).collect();
        ids.sort();
        ids
    }

    const D: u64 = 24 * 60 * 60;

    #[test]
    fn keeps_the_newest_n_by_finish_time_not_by_order() {
        let all = jobs(&[5 * D, D, 9 * D, 2 * D, 7 * D]);
        let gone = select_removals(all, 2, 0, now());
        assert_eq!(ids(&gone), ["j0", "j2", "j4"]);
    }

    #[test]
    fn keeps_everything_younger_than_keep_days() {
        let all = jobs(&[D - 1, D, 3 * D, 60]);
        let gone = select_removals(all, 0, 1, now());
        assert_eq!(ids(&gone), ["j1", "j2"], "exactly a day old is old enough");
    }

    #[test]
    fn a_job_is_kept_if_either_rule_keeps_it() {
        let all = jobs(&[10 * D, 20 * D, 60, 30 * D]);
        let gone = select_removals(all, 2, 2, now());
        assert_eq!(ids(&gone), ["j1", "j3"], "j0 by count, j2 by both");
    }

    #[test]
    fn zero_and_zero_keep_nothing_even_from_the_future() {
        let mut all = jobs(&[0, D]);
        all.push(Finished {
            id: JobId::parse("skewed").expect("id"),
            finished_at: now() + Duration::from_secs(60),
        });
        assert_eq!(select_removals(all, 0, 0, now()).len(), 3);
    }

    #[test]
    fn generous_rules_remove_nothing() {
        assert!(select_removals(jobs(&[D, 2 * D]), 5, 0, now()).is_empty());
        assert!(select_removals(jobs(&[D, 2 * D]), 0, 30, now()).is_empty());
        assert!(select_removals(Vec::new(), 0, 0, now()).is_empty());
    }

    #[test]
    fn equal_finish_times_are_ordered_by_id() {
        let mut all = jobs(&[D, D, D]);
        all.reverse();
        assert_eq!(ids(&select_removals(all, 1, 0, now())), ["j0", "j1"]);
    }

    // -- collect() against a real temporary root -----------------------------

    struct Root {
        _dir: tempfile::TempDir,
        layout: Layout,
        ledger: Ledger,
    }

    fn root() -> Root {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        for d in layout.skeleton() {
            std::fs::create_dir_all(&d).expect("skeleton");
        }
        let ledger = Ledger::open(&layout.ledger()).expect("ledger");
        Root {
            _dir: dir,
            layout,
            ledger,
        }
    }

    /// A job of `p/<name>` in `state`, with its prompt archived if terminal.
    fn job(layout: &Layout, name: &str, state: JobState) -> JobId {
        let id = JobId::generate();
        std::fs::create_dir_all(layout.run_dir(&id)).expect("run dir");
        let prompt = PromptName {
            project: "p".into(),
            name: name.into(),
        };
        let mut rec =
            JobRecord::new_queued(id.clone(), &prompt, "inbox/p/x.running.md".into(), "h");
        if state.is_terminal() {
            let archived = layout.archived_prompt(state, &prompt, &id);
            std::fs::create_dir_all(archived.parent().expect("parent")).expect("archive dir");
            fsio::write_atomic(layout.root(), &archived, b"prompt").expect("archived prompt");
            rec.archive_path = Some(layout.relative(&archived).to_string_lossy().into_owned());
            rec.finished_at = Some(jobwarden_sys::clock::Timestamp::now());
        }
        rec.state = state;
        rec.save(layout).expect("save");
        id
    }

    fn config(text: &str) -> Config {
        parse(text, ConfigSource::BuiltIn).expect("config")
    }

    #[test]
    fn collect_removes_only_finished_jobs_and_their_archived_prompts() {
        let mut r = root();
        let done = job(&r.layout, "done", JobState::Succeeded);
        let running = job(&r.layout, "running", JobState::Running);
        let corrupt = JobId::generate();
        std::fs::create_dir_all(r.layout.run_dir(&corrupt)).expect("dir");
        fsio::write_atomic(r.layout.root(), &r.layout.job_json(&corrupt), b"{not json")
            .expect("corrupt");
        std::fs::create_dir_all(r.layout.runs().join("not-a-job.d")).expect("stray");
        let archived = r.layout.resolve(
            JobRecord::load_job(&r.layout, &done)
                .expect("load")
                .archive_path
                .as_deref()
                .expect("archived"),
        );
        let cfg = config("keep_runs = 0\nkeep_days = 0\n");

        let dry = collect(&r.layout, &cfg, &mut r.ledger, true);
        assert_eq!((dry.runs_removed, dry.prompts_removed), (1, 1));
        assert!(
            r.layout.run_dir(&done).exists() && archived.exists(),
            "dry run changes nothing"
        );

        let report = collect(&r.layout, &cfg, &mut r.ledger, false);
        assert_eq!(report.run_dirs, [r.layout.run_dir(&done)]);
        assert_eq!(report.archived_prompts, std::slice::from_ref(&archived));
        assert_eq!(
            (report.runs_active, report.runs_skipped, report.errors),
            (1, 1, 0)
        );
        assert!(!r.layout.run_dir(&done).exists() && !archived.exists());
        for kept in [r.layout.run_dir(&running), r.layout.job_json(&corrupt)] {
            assert!(kept.exists(), "{} kept", kept.display());
        }
        assert!(r.layout.runs().join("not-a-job.d").exists());
    }

    #[test]
    fn collect_leaves_a_job_whose_prompt_is_not_archived_yet() {
        let mut r = root();
        let id = job(&r.layout, "x", JobState::Failed);
        let rec = JobRecord::load_job(&r.layout, &id).expect("load");
        let archived = r
            .layout
            .resolve(rec.archive_path.as_deref().expect("archive"));
        let held = r.layout.running_prompt(&rec.prompt_name());
        std::fs::create_dir_all(held.parent().expect("parent")).expect("inbox dir");
        fsio::rename_noreplace(r.layout.root(), &archived, &held).expect("un-archive");
        let cfg = config("keep_runs = 0\nkeep_days = 0\n");

        let report = collect(&r.layout, &cfg, &mut r.ledger, false);
        assert_eq!((report.runs_removed, report.runs_active), (0, 1));
        assert!(r.layout.job_json(&id).exists() && held.exists());
    }

    #[test]
    fn collect_never_deletes_through_a_symlinked_archive_folder() {
        let mut r = root();
        let id = job(&r.layout, "n", JobState::Failed);
        let outside = tempfile::tempdir().expect("outside");
        let victim = outside.path().join(format!("n.{id}.md"));
        fsio::write_atomic(outside.path(), &victim, b"keep me").expect("victim");
        let project_dir = r.layout.archive().join("failed").join("p");
        fs::remove_dir_all(&project_dir).expect("rm project dir");
        std::os::unix::fs::symlink(outside.path(), &project_dir).expect("symlink");

        let report = collect(
            &r.layout,
            &config("keep_runs = 0\nkeep_days = 0\n"),
            &mut r.ledger,
            false,
        );
        assert_eq!((report.runs_removed, report.prompts_removed), (1, 0));
        assert!(victim.exists(), "a file outside archive/ is never deleted");
    }

    #[test]
    fn archived_file_accepts_only_paths_under_archive() {
        let l = Layout::new("/r");
        assert_eq!(
            l.archived_file("archive/failed/p/n.x.md"),
            Some(PathBuf::from("/r/archive/failed/p/n.x.md"))
        );
        for bad in [
            "archive",
            "inbox/p/n.running.md",
            "archive/../runs/x",
            "/r/archive/x",
            "runs/x",
        ] {
            assert_eq!(l.archived_file(bad), None, "{bad}");
        }
    }
}
