//! `show` for people: one `label  value` line per fact, then the end of
//! the log (or what to say when it has nothing: "no output yet" only while
//! the job has not ended).

use std::io::Write;

use super::super::output::{
    fmt_ago, fmt_bytes, fmt_duration, neutralise_str, prompt_label, timestamp,
};
use super::{Paths, Shown};
use jobwarden_ledger::Execution;
use jobwarden_model::job::JobRecord;
use jobwarden_sys::clock::Timestamp;

use super::facts::Facts;

/// Labelled lines, in the order shown.
type Rows = Vec<(&'static str, String)>;

pub(super) fn print(s: &Shown) -> std::io::Result<()> {
    let now = Timestamp::now().epoch_ms();
    let mut rows: Rows = vec![("job", s.id.to_string())];
    match &s.record {
        Some((_, rec)) => record_rows(&mut rows, rec, &s.facts, now),
        None => gone_rows(&mut rows, &s.facts),
    }
    for n in &s.notifications {
        rows.push(("notified", notification_line(n)));
    }
    file_rows(&mut rows, &s.paths);
    rows.push(("ledger", ledger_row(s.execution.as_ref(), now)));
    if s.log_tail.is_empty() {
        if let Some(empty) = s.facts.empty_log_line() {
            rows.push(("log", empty.to_owned()));
        }
    }
    let mut out = std::io::stdout().lock();
    // Values and the log hold what jobs wrote: no escape reaches the
    // terminal (`--json` is the raw form).
    for (label, value) in &rows {
        writeln!(out, "{label:<10}{}", neutralise_str(value))?;
    }
    if !s.log_tail.is_empty() {
        writeln!(out, "log (last {} lines):", s.log_tail.len())?;
        for l in &s.log_tail {
            writeln!(out, "  {}", neutralise_str(l))?;
        }
    }
    Ok(())
}

/// What the record (and the facts drawn from it) say.
fn record_rows(rows: &mut Rows, rec: &JobRecord, facts: &Facts, now: u64) {
    let when = |t: Timestamp| format!("{} ({t})", fmt_ago(t.epoch_ms(), now));
    rows.push(("prompt", prompt_label(&rec.project, &rec.name)));
    if let Some(attempt) = facts.attempt_line() {
        let retry = rec
            .retry_of
            .as_ref()
            .map(|r| format!(", retry of {r}"))
            .unwrap_or_default();
        rows.push(("attempt", format!("{attempt}{retry}")));
    }
    rows.extend(facts.profile_line().map(|p| ("profile", p)));
    rows.push(("state", state_line(rec)));
    rows.extend(facts.after.iter().map(|a| ("after", a.line())));
    rows.extend(
        rec.not_before
            .filter(|_| rec.state == jobwarden_model::job::JobState::Queued)
            .map(|t| ("starts at", when(t))),
    );
    rows.extend(rec.result_ref.clone().map(|r| ("result", r)));
    rows.extend(git_rows(rec, &when));
    rows.extend(slurm_row(rec));
    rows.push(("claimed", when(rec.created_at)));
    rows.extend(rec.started_at.map(|t| ("started", when(t))));
    rows.extend(rec.finished_at.map(|t| ("finished", when(t))));
    rows.extend(facts.time_line());
    rows.extend(facts.timeout_line(Some(rec.state)).map(|t| ("timeout", t)));
    match (rec.exit_code, rec.signal.as_deref()) {
        (Some(code), Some(sig)) => rows.push(("exit", format!("killed by {sig} (code {code})"))),
        (Some(code), None) => rows.push(("exit", format!("code {code}"))),
        (None, Some(sig)) => rows.push(("exit", format!("killed by {sig}"))),
        _ => {}
    }
    rows.extend(rec.command.as_ref().map(|c| ("command", c.join(" "))));
    rows.extend(rec.workdir.clone().map(|w| ("workdir", w)));
    if let (false, Some(pid)) = (rec.state.is_terminal(), rec.pid) {
        let heartbeat = rec
            .heartbeat_at
            .map(|t| format!(", heartbeat {}", fmt_ago(t.epoch_ms(), now)))
            .unwrap_or_default();
        rows.push(("process", format!("pid {pid}{heartbeat}")));
    }
}

/// Its Slurm job: `Slurm job 12 RUNNING on node1, pending 2.1s`.
fn slurm_row(rec: &JobRecord) -> Option<(&'static str, String)> {
    let s = rec.slurm.as_ref()?;
    let mut line = match &s.job_id {
        Some(id) => format!("Slurm job {id}"),
        None => format!("being submitted to Slurm as {}", s.name),
    };
    if let Some(state) = &s.state {
        line.push_str(&format!(" {}", state.as_str()));
    }
    if let Some(reason) = &s.reason {
        line.push_str(&format!(" ({reason})"));
    }
    if let Some(node) = &s.node {
        line.push_str(&format!(" on {node}"));
    }
    if let Some(ms) = s.pending_ms {
        line.push_str(&format!(", pending {}", fmt_duration(ms)));
    }
    if let Some(ms) = s.run_ms {
        line.push_str(&format!(", ran {}", fmt_duration(ms)));
    }
    Some(("slurm", line))
}

/// The job's published work: its branch, and its merge or what the
/// reconcile found.
fn git_rows(rec: &JobRecord, when: &dyn Fn(Timestamp) -> String) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    let Some(git) = &rec.git else {
        return rows;
    };
    rows.push((
        "branch",
        format!("{} → {} in {}", git.branch, git.target, git.repo),
    ));
    rows.extend(git.worktree.clone().map(|w| ("worktree", w)));
    if let (Some(at), Some(commit)) = (rec.merged_at, &rec.merge_commit) {
        rows.push(("merged", format!("{} by {commit}", when(at))));
    } else if let Some(r) = &rec.reconciled {
        rows.push(("reconcile", format!("{} {}", r.reason, when(r.at))));
    }
    rows
}

/// `rec: failed, delivered` or `dead: failed, not delivered after 2
/// attempts: <why>`.
fn notification_line(n: &serde_json::Value) -> String {
    let text = |k: &str| n[k].as_str().unwrap_or("?").to_owned();
    let attempts = n["attempts"].as_u64().unwrap_or(1);
    let tries = if attempts == 1 {
        "1 attempt".to_owned()
    } else {
        format!("{attempts} attempts")
    };
    match n["error"].as_str() {
        None => format!("{}: {}, delivered ({tries})", text("hook"), text("event")),
        Some(e) => format!(
            "{}: {}, not delivered after {tries}: {e}",
            text("hook"),
            text("event")
        ),
    }
}

/// `failed (in prepare): <reason>`.
fn state_line(rec: &JobRecord) -> String {
    let stage = rec
        .failure_stage
        .as_deref()
        .map(|st| format!(" (in {st})"))
        .unwrap_or_default();
    let reason = rec
        .state_reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    format!("{}{stage}{reason}", rec.state)
}

/// A job whose run folder retention removed: what its ledger row says.
fn gone_rows(rows: &mut Rows, facts: &Facts) {
    rows.push((
        "state",
        "run folder removed by retention; the ledger row remains".to_owned(),
    ));
    rows.extend(facts.attempt_line().map(|a| ("attempt", a)));
    rows.extend(facts.profile.clone().map(|p| ("profile", p)));
    rows.extend(facts.time_line());
}

/// Where the job's files are.
fn file_rows(rows: &mut Rows, p: &Paths) {
    if p.run_dir_exists {
        let size = std::fs::metadata(&p.job_log)
            .map(|m| format!(" ({})", fmt_bytes(m.len())))
            .unwrap_or_default();
        rows.push(("files", p.run_dir.display().to_string()));
        rows.push((
            "",
            format!("  job.json, prompt.md, events.jsonl, job.log{size}"),
        ));
    }
    rows.extend(
        p.prompt
            .as_ref()
            .map(|x| ("prompt at", x.display().to_string())),
    );
    rows.extend(
        p.abort_marker
            .as_ref()
            .map(|m| ("abort", format!("requested ({})", m.display()))),
    );
}

/// `failure, 4.2s, archived, finished 3m ago`, or that there is no row yet.
fn ledger_row(execution: Option<&Execution>, now: u64) -> String {
    let Some(e) = execution else {
        return "no row yet (written when the job ends)".to_owned();
    };
    let took = e
        .duration_ms
        .map(|d| format!(", {}", fmt_duration(d)))
        .unwrap_or_default();
    let disposition = e
        .disposition
        .as_deref()
        .map(|d| format!(", {d}"))
        .unwrap_or_default();
    format!(
        "{}{took}{disposition}, finished {}",
        e.outcome.as_str(),
        fmt_ago(timestamp(e.finished_at).epoch_ms(), now)
    )
}
