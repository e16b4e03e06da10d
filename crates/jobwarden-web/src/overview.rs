//! The overview, the page an operator keeps open: the daemon's health,
//! the jobs running (how long, their last log line), the queue and why
//! each waits, what needs attention (with ack), throughput and failure
//! rate over a chosen range, the pauses, and the counts by state. The
//! running and queue tables follow the daemon live (`/live/running`,
//! `/live/queue`: keyed rows, as the job list's).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Html;
use serde::Deserialize;

use super::Web;
use super::charts::Range;
use super::html::{Ctx, button, esc, job_cells, page, prompt, state, url, when};
use super::pages::{daemon_running, ledger, range_links};
use jobwarden_engine::daemon_file::{self, Verdict};
use jobwarden_ledger::{JobFilter, Ledger};
use jobwarden_model::job::{JobId, JobState};
use jobwarden_sys::clock::Timestamp;

/// `/?range=`.
#[derive(Debug, Default, Deserialize)]
pub struct OverviewQuery {
    #[serde(default)]
    pub range: Option<String>,
}

/// The states of a job that runs.
const RUNNING: &[&str] = &["preparing", "running", "publishing"];

pub async fn overview(
    State(web): State<Arc<Web>>,
    ctx: Ctx,
    Query(q): Query<OverviewQuery>,
) -> Html<String> {
    let ledger = ledger(&web);
    let range = Range::named(q.range.as_deref());
    let mut body = String::from("<h1>Overview</h1>");
    body.push_str(&format!(
        "<table class=\"health\" id=\"daemon\" aria-label=\"the daemon\"><tbody data-live=\"/live/health\">{}</tbody></table>",
        rows_html(&health_rows(&web, &ctx, ledger.as_ref()))
    ));
    body.push_str(&format!(
        "<h2>Running</h2><table class=\"rows\"><thead><tr><th>job</th><th>prompt</th><th>state</th>\
         <th>started</th><th>last line</th><th><span class=\"hidden\">action</span></th></tr></thead>\
         <tbody data-live=\"/live/running\">{}</tbody></table>",
        rows_html(&running_rows(&web, &ctx, ledger.as_ref()))
    ));
    body.push_str(&format!(
        "<h2>Queue</h2><table class=\"rows\"><thead><tr><th>job</th><th>prompt</th><th>state</th>\
         <th>since</th><th>why it waits</th><th><span class=\"hidden\">action</span></th></tr></thead>\
         <tbody data-live=\"/live/queue\">{}</tbody></table>",
        rows_html(&queue_rows(&web, &ctx, ledger.as_ref()))
    ));
    body.push_str(&format!(
        "<h2>Needs attention</h2><table class=\"rows\"><thead><tr><th>prompt</th><th>outcome</th><th>ended</th>\
         <th>why</th><th><span class=\"hidden\">action</span></th></tr></thead>\
         <tbody data-live=\"/live/attention\">{}</tbody></table>",
        rows_html(&attention_rows(&web, &ctx, ledger.as_ref()))
    ));
    body.push_str(&rates(ledger.as_ref(), range));
    body.push_str(&pauses(&web, &ctx));
    body.push_str(&counts(ledger.as_ref()));
    Html(page(&ctx, "overview", &body))
}

/// Rows as one string.
pub(super) fn rows_html(rows: &[(String, String)]) -> String {
    rows.iter().map(|(_, html)| html.as_str()).collect()
}

fn empty(columns: usize, text: &str) -> Vec<(String, String)> {
    vec![(
        String::new(),
        format!("<tr data-key=\"\"><td colspan=\"{columns}\" class=\"muted\">{text}</td></tr>"),
    )]
}

/// The daemon's health, a row a fact: whether it runs, its heartbeat,
/// version, uptime, the config in force and its last reload, storage and
/// ledger.
pub(super) fn health_rows(
    web: &Web,
    _ctx: &Ctx,
    _ledger: Option<&Ledger>,
) -> Vec<(String, String)> {
    let seen = daemon_file::read(&web.layout).ok().flatten();
    let seen = seen.as_ref();
    let running = daemon_running(web);
    let mut facts: Vec<(&str, String)> = vec![(
        "daemon",
        if running {
            "<b class=\"o-ok\">running</b>".to_owned()
        } else {
            "<b class=\"o-bad\">not running</b>: nothing is claimed or started; start it with <code>jobwarden daemon</code>".to_owned()
        },
    )];
    if let Some(d) = seen.filter(|_| running) {
        facts.push((
            "version",
            format!(
                "{} (pid {}, on {})",
                esc(&d.version),
                d.pid,
                esc(d.host.as_deref().unwrap_or("?"))
            ),
        ));
        facts.push(("up since", when(d.started_at.epoch_ms())));
        facts.push(("heartbeat", when(d.heartbeat_at.epoch_ms())));
        if let Some(c) = &d.config {
            let source = c.source.as_ref().map_or_else(
                || "built-in defaults".to_owned(),
                |p| p.display().to_string(),
            );
            facts.push((
                "config",
                format!("{}, loaded {}", esc(&source), when(c.loaded_at.epoch_ms())),
            ));
            if let Some(last) = &c.last_reload {
                let text = match last.result {
                    Verdict::Applied => format!("applied {}", when(last.at.epoch_ms())),
                    Verdict::Refused => format!(
                        "<b class=\"o-bad\">refused</b> {}; the previous config stays in force: {}",
                        when(last.at.epoch_ms()),
                        esc(&last.errors.join("; "))
                    ),
                };
                facts.push(("last reload", text));
            }
        }
        if let Some(s) = &d.storage {
            let detail = s
                .detail
                .as_deref()
                .map(|r| format!(": {}", esc(r)))
                .unwrap_or_default();
            let condition = serde_json::to_value(s.condition)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            facts.push(("storage", format!("{}{detail}", esc(&condition))));
        }
        if let Some(l) = &d.ledger {
            let text = if l.ok {
                "ok".to_owned()
            } else {
                format!(
                    "<b class=\"o-bad\">{}</b> {}",
                    esc(l.error.as_deref().unwrap_or("unusable")),
                    esc(l.fix.as_deref().unwrap_or(""))
                )
            };
            facts.push(("ledger", text));
        }
        if let Some(w) = &d.watch {
            let why = d
                .watch_reason
                .as_deref()
                .map(|r| format!(" ({})", esc(r)))
                .unwrap_or_default();
            facts.push(("inbox watch", format!("{}{why}", esc(w))));
        }
    }
    let limits: Vec<String> = jobwarden_model::limits::read(&web.layout)
        .list()
        .into_iter()
        .map(|(scope, l)| {
            let what = match scope.name() {
                Some(_) => scope.to_string(),
                None => "every job".to_owned(),
            };
            format!("{}: at most {} at once", esc(&what), l.max_jobs)
        })
        .collect();
    if !limits.is_empty() {
        facts.push(("limits set by hand", limits.join("; ")));
    }
    facts
        .into_iter()
        .map(|(k, v)| {
            let html = format!("<tr data-key=\"{k}\"><th scope=\"row\">{k}</th><td>{v}</td></tr>");
            (k.to_owned(), html)
        })
        .collect()
}

/// The jobs running now, each with how long and its last log line.
pub(super) fn running_rows(web: &Web, ctx: &Ctx, ledger: Option<&Ledger>) -> Vec<(String, String)> {
    let filter = JobFilter {
        states: RUNNING.iter().map(|s| (*s).to_owned()).collect(),
        ..JobFilter::default()
    };
    let jobs = ledger
        .and_then(|l| l.list_jobs(&filter, 200).ok())
        .unwrap_or_default();
    if jobs.is_empty() {
        return empty(6, "nothing runs");
    }
    jobs.iter()
        .map(|j| {
            let last = JobId::parse(&j.id)
                .map(|id| super::logs::last_line(web, &id))
                .unwrap_or_default();
            let abort = button(ctx, &format!("/jobs/{}/abort", url(&j.id)), "abort", &[]);
            let html = format!(
                "<tr data-key=\"{key}\">{cells}<td data-label=\"started\">{started}</td>\
                 <td data-label=\"last line\" class=\"last-line\">{last}</td><td>{abort}</td></tr>",
                key = esc(&j.id),
                cells = job_cells(j),
                started = when(j.started_at.unwrap_or(j.created_at)),
            );
            (j.id.clone(), html)
        })
        .collect()
}

/// The queue: jobs claimed and waiting for a slot (why, as the daemon
/// says), then the prompts waiting in the inbox (why: a cooldown until
/// when, a pause, an earlier job of theirs).
pub(super) fn queue_rows(web: &Web, ctx: &Ctx, ledger: Option<&Ledger>) -> Vec<(String, String)> {
    let seen = daemon_file::read(&web.layout).ok().flatten();
    let reasons: BTreeMap<String, String> = seen
        .iter()
        .flat_map(|d| d.queue.iter())
        .filter_map(|q| Some((q.job_id().to_owned(), q.waiting()?.to_owned())))
        .collect();
    let daemon = daemon_running(web);
    let queued = ledger
        .and_then(|l| l.jobs_in_states(&["queued"], 200).ok())
        .unwrap_or_default();
    let mut rows: Vec<(String, String)> = queued
        .iter()
        .map(|j| {
            let why = match reasons.get(&j.id) {
                Some(r) => r.clone(),
                None if daemon => "about to start".to_owned(),
                None => "no daemon is running".to_owned(),
            };
            let cancel = button(ctx, &format!("/jobs/{}/abort", url(&j.id)), "cancel", &[]);
            let html = format!(
                "<tr data-key=\"{key}\">{cells}<td data-label=\"since\">{since}</td>\
                 <td data-label=\"why\">{why}</td><td>{cancel}</td></tr>",
                key = esc(&j.id),
                cells = job_cells(j),
                since = when(j.created_at),
                why = esc(&why),
            );
            (j.id.clone(), html)
        })
        .collect();
    let config = web.config();
    let now = Timestamp::now().epoch_ms();
    for (prompt, found) in jobwarden_engine::waiting::list(&web.layout)
        .into_iter()
        .take(200)
    {
        let Ok(w) =
            jobwarden_engine::waiting::examine(&web.layout, &config, ledger, prompt, found, now)
        else {
            continue;
        };
        let cancel = button(
            ctx,
            "/waiting/cancel",
            "cancel",
            &[("project", &w.prompt.project), ("name", &w.prompt.name)],
        );
        let why = match &w.deferral {
            Some(d) => format!("{}; claimed {}", esc(&d.reason()), when(d.until_ms)),
            None => esc(&w.reason(daemon)),
        };
        let key = format!("waiting:{}", w.label());
        let html = format!(
            "<tr data-key=\"{key}\"><td data-label=\"job\" class=\"muted\">—</td><td data-label=\"prompt\">{label}</td>\
             <td data-label=\"state\">{state}</td><td data-label=\"since\">{since}</td><td data-label=\"why\">{why}</td>\
             <td>{cancel}</td></tr>",
            key = esc(&key),
            label = esc(&w.label()),
            state = state(w.state()),
            since = when(w.since_ms),
        );
        rows.push((key, html));
    }
    if rows.is_empty() {
        return empty(6, "nothing waits");
    }
    rows
}

/// The prompts whose newest attempt went wrong and nobody acknowledged,
/// each with its ack.
pub(super) fn attention_rows(
    _web: &Web,
    ctx: &Ctx,
    ledger: Option<&Ledger>,
) -> Vec<(String, String)> {
    let list = ledger
        .and_then(|l| l.prompts_needing_attention(50).ok())
        .unwrap_or_default();
    if list.is_empty() {
        return empty(5, "nothing");
    }
    list.iter()
        .map(|a| {
            let html = format!(
                "<tr data-key=\"{key}\"><td data-label=\"prompt\"><a href=\"/jobs/{id}\">{prompt}</a></td>\
                 <td data-label=\"outcome\">{outcome}</td><td data-label=\"ended\">{ended}</td>\
                 <td data-label=\"why\">{why}</td><td>{ack}</td></tr>",
                key = esc(&a.job_id),
                id = url(&a.job_id),
                prompt = prompt(&a.project, &a.name),
                outcome = esc(&a.outcome),
                ended = when(a.finished_at),
                why = esc(a.reason.as_deref().unwrap_or("")),
                ack = button(ctx, &format!("/jobs/{}/ack", url(&a.job_id)), "ack", &[]),
            );
            (a.job_id.clone(), html)
        })
        .collect()
}

/// Executions ended over `range`: how many an hour, and how many failed.
fn rates(ledger: Option<&Ledger>, range: Range) -> String {
    let now = Timestamp::now().epoch_ms();
    let filter = jobwarden_ledger::history::Filter {
        since_ms: Some(now.saturating_sub(range.ms)),
        ..Default::default()
    };
    let ended = ledger
        .and_then(|l| l.list(&filter, 100_000).ok())
        .unwrap_or_default();
    let failed = ended
        .iter()
        .filter(|e| !matches!(e.outcome.as_str(), "success" | "cancelled" | "aborted"))
        .count();
    let per_hour = ended.len() as f64 / (range.ms as f64 / 3_600_000.0);
    let rate = if ended.is_empty() {
        "—".to_owned()
    } else {
        format!("{:.0}%", 100.0 * failed as f64 / ended.len() as f64)
    };
    format!(
        "<h2>Throughput</h2>{links}<div class=\"cards\"><div class=\"card\"><b>{n}</b>ended ({range})</div>\
         <div class=\"card\"><b>{per_hour:.1}</b>an hour</div><div class=\"card\"><b>{rate}</b>failed</div></div>{chart}",
        links = range_links("/?", range),
        n = ended.len(),
        range = range.name,
        chart = super::charts::per_hour(&ended, now, range),
    )
}

fn pauses(web: &Web, ctx: &Ctx) -> String {
    let pauses = jobwarden_model::control::read(&web.layout);
    let mut out = String::from("<h2>Paused</h2>");
    let list = pauses.list();
    if list.is_empty() {
        out.push_str("<div><span class=\"muted\">nothing is paused</span> ");
        out.push_str(&button(ctx, "/pause", "pause everything", &[]));
        out.push_str("</div>");
        return out;
    }
    out.push_str("<ul>");
    for (scope, p) in list {
        out.push_str(&format!(
            "<li>{}{} {}</li>",
            esc(&format!("{} {}", scope.kind(), scope.name().unwrap_or(""))),
            p.reason
                .as_deref()
                .map(|r| format!(": {}", esc(r)))
                .unwrap_or_default(),
            button(
                ctx,
                "/resume",
                "resume",
                &[("kind", scope.kind()), ("name", scope.name().unwrap_or(""))]
            )
        ));
    }
    out.push_str("</ul>");
    out
}

/// How many jobs are in each state, each a link to them.
fn counts(ledger: Option<&Ledger>) -> String {
    let counts: BTreeMap<String, u64> = ledger
        .and_then(|l| l.count_jobs_by_state().ok())
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut out = String::from("<h2>Jobs by state</h2><div class=\"cards\" id=\"counts\">");
    for s in JobState::ALL {
        let n = counts.get(s.as_str()).copied().unwrap_or(0);
        out.push_str(&format!(
            "<a class=\"card\" href=\"/jobs?state={0}\"><b>{n}</b>{1}</a>",
            url(s.as_str()),
            state(s.as_str())
        ));
    }
    out.push_str("</div>");
    out
}
