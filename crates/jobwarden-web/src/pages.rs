//! The pages: the overview, a job (its record, events, ledger attempts
//! and its log as it grows), the submit form, history and `/metrics`.
//! The job list is in `list.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::Web;
use super::html::{button, esc, page, state, url};
use jobwarden_ledger::{JobFilter, Ledger};
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_sys::clock::Timestamp;

/// The ledger, if the root has one (never created by the page).
pub(super) fn ledger(web: &Web) -> Option<Ledger> {
    let path = web.layout.ledger();
    std::fs::symlink_metadata(&path)
        .is_ok()
        .then(|| Ledger::open(&path).ok())
        .flatten()
}

/// Does a daemon hold the root's lock? Not when that cannot be told.
pub(super) fn daemon_running(web: &Web) -> bool {
    jobwarden_engine::cancel::daemon_running(&web.layout) == Some(true)
}

pub(super) fn ago(ms: u64) -> String {
    jobwarden_sys::clock::fmt_ago(ms, Timestamp::now().epoch_ms())
}

pub async fn overview(State(web): State<Arc<Web>>) -> Html<String> {
    let ledger = ledger(&web);
    let counts: BTreeMap<String, u64> = ledger
        .as_ref()
        .and_then(|l| l.count_jobs_by_state().ok())
        .unwrap_or_default()
        .into_iter()
        .collect();
    let running = daemon_running(&web);
    let mut body = format!(
        "<h1>Overview</h1><p id=\"daemon\">daemon: <b>{}</b></p><div class=\"cards\" id=\"counts\">",
        if running { "running" } else { "not running" }
    );
    for s in JobState::ALL {
        let n = counts.get(s.as_str()).copied().unwrap_or(0);
        body.push_str(&format!(
            "<a class=\"card\" href=\"/jobs?state={0}\"><b>{n}</b>{1}</a>",
            url(s.as_str()),
            state(s.as_str())
        ));
    }
    body.push_str("</div>");
    let pauses = jobwarden_model::control::read(&web.layout);
    body.push_str("<h2>Paused</h2>");
    let list = pauses.list();
    if list.is_empty() {
        body.push_str("<p class=\"muted\">nothing is paused ");
        body.push_str(&button("/pause", "pause everything", &web.csrf, &[]));
        body.push_str("</p>");
    } else {
        body.push_str("<ul>");
        for (scope, p) in list {
            body.push_str(&format!(
                "<li>{}{} {}</li>",
                esc(&format!("{} {}", scope.kind(), scope.name().unwrap_or(""))),
                p.reason
                    .as_deref()
                    .map(|r| format!(": {}", esc(r)))
                    .unwrap_or_default(),
                button(
                    "/resume",
                    "resume",
                    &web.csrf,
                    &[("kind", scope.kind()), ("name", scope.name().unwrap_or(""))]
                )
            ));
        }
        body.push_str("</ul>");
    }
    body.push_str("<h2>Needs attention</h2>");
    let attention = ledger
        .as_ref()
        .and_then(|l| l.prompts_needing_attention(20).ok())
        .unwrap_or_default();
    if attention.is_empty() {
        body.push_str("<p class=\"muted\">nothing</p>");
    } else {
        body.push_str(
            "<table><tr><th>prompt</th><th>outcome</th><th class=\"wide\">why</th><th></th></tr>",
        );
        for a in attention {
            body.push_str(&format!(
                "<tr><td><a href=\"/jobs/{}\">{}/{}</a></td><td>{}</td><td class=\"wide\">{}</td><td>{}</td></tr>",
                url(&a.job_id),
                esc(&a.project),
                esc(&a.name),
                esc(&a.outcome),
                esc(a.reason.as_deref().unwrap_or("")),
                button(&format!("/jobs/{}/ack", url(&a.job_id)), "ack", &web.csrf, &[])
            ));
        }
        body.push_str("</table>");
    }
    Html(page("overview", &body))
}

pub async fn job(State(web): State<Arc<Web>>, Path(id): Path<String>) -> Response {
    let Ok(id) = JobId::parse(&id) else {
        return (
            StatusCode::NOT_FOUND,
            Html(page("no such job", "<p>no such job</p>")),
        )
            .into_response();
    };
    let rec = JobRecord::load_job(&web.layout, &id);
    let mut body = format!("<h1>Job <code>{}</code></h1>", esc(id.as_str()));
    match &rec {
        Ok(rec) => {
            body.push_str(&format!(
                "<p>{}/{} · attempt {} · {}{}</p><p>",
                esc(&rec.project),
                esc(&rec.name),
                rec.attempt,
                state(rec.state.as_str()),
                rec.state_reason
                    .as_deref()
                    .map(|r| format!(": {}", esc(r)))
                    .unwrap_or_default()
            ));
            let to = |what: &str| format!("/jobs/{}/{what}", url(id.as_str()));
            if rec.state == JobState::Queued {
                body.push_str(&button(&to("abort"), "cancel", &web.csrf, &[]));
            } else if !rec.state.is_terminal() {
                body.push_str(&button(&to("abort"), "abort", &web.csrf, &[]));
            } else {
                body.push_str(&button(&to("retry"), "retry", &web.csrf, &[]));
                body.push_str(&button(
                    &to("retry"),
                    "retry now",
                    &web.csrf,
                    &[("now", "1")],
                ));
            }
            body.push_str(&button(
                &format!("/jobs/{}/ack", url(id.as_str())),
                "ack",
                &web.csrf,
                &[],
            ));
            body.push_str("</p>");
        }
        Err(e) => body.push_str(&format!("<p class=\"muted\">{}</p>", esc(&e.to_string()))),
    }
    let log =
        jobwarden_sys::fsio::read_capped(web.layout.root(), &web.layout.job_log(&id), 256 << 10)
            .map(|(bytes, _)| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default();
    let live = rec.as_ref().is_ok_and(|r| !r.state.is_terminal());
    body.push_str(&format!("<h2>Log</h2><pre id=\"log\">{}</pre>", esc(&log)));
    if live {
        body.push_str(&format!(
            "<script>const log = document.getElementById('log'); \
             new EventSource('/live/jobs/{}/log?from={}').onmessage = e => \
             {{ log.textContent += e.data + '\\n'; }};</script>",
            url(id.as_str()),
            log.len()
        ));
    }
    if let Ok(rec) = &rec {
        let json = serde_json::to_string_pretty(rec).unwrap_or_default();
        body.push_str(&format!("<h2>Record</h2><pre>{}</pre>", esc(&json)));
    }
    if let (Ok(rec), Some(ledger)) = (&rec, ledger(&web)) {
        body.push_str(&attempts(&ledger, rec));
    }
    let events = jobwarden_model::events::read_all(web.layout.root(), &web.layout.events(&id))
        .unwrap_or_default();
    body.push_str("<h2>Events</h2><table>");
    for e in events.iter().rev().take(200) {
        body.push_str(&format!(
            "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"wide\"><code>{}</code></td></tr>",
            esc(&e["seq"].to_string()),
            esc(e["op"].as_str().unwrap_or("")),
            esc(&e.to_string())
        ));
    }
    body.push_str("</table>");
    Html(page(&format!("job {}", id.as_str()), &body)).into_response()
}

pub async fn metrics(State(web): State<Arc<Web>>) -> Response {
    let text =
        jobwarden_engine::metrics::render(&web.layout, ledger(&web).as_ref(), daemon_running(&web));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub async fn submit_form(State(web): State<Arc<Web>>) -> Html<String> {
    let profiles: String = web
        .config
        .profiles
        .keys()
        .map(|p| format!("<option value=\"{0}\">{0}</option>", esc(p)))
        .collect();
    let body = format!(
        "<h1>Submit a prompt</h1><form method=\"post\" action=\"/submit\" id=\"submit\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <p><label>project <input name=\"project\" placeholder=\"acme/api\"></label></p>\
         <p><label>name <input name=\"name\" required placeholder=\"fix-tests\"></label></p>\
         <p><label>profile <select name=\"profile\"><option value=\"\">(by route)</option>{profiles}</select></label></p>\
         <p><textarea name=\"text\" rows=\"10\" style=\"width:100%\" required placeholder=\"What the job should do\"></textarea></p>\
         <p><button type=\"submit\">submit</button></p></form>",
        csrf = esc(&web.csrf),
    );
    Html(page("submit", &body))
}

/// `/history?path=`.
#[derive(Debug, Default, Deserialize)]
pub struct HistoryQuery {
    #[serde(default)]
    pub path: Option<String>,
}

pub async fn history(State(web): State<Arc<Web>>, Query(q): Query<HistoryQuery>) -> Html<String> {
    let Some(ledger) = ledger(&web) else {
        return Html(page(
            "history",
            "<h1>History</h1><p class=\"muted\">nothing has run yet</p>",
        ));
    };
    let now = Timestamp::now().epoch_ms();
    let day = jobwarden_ledger::history::Filter {
        since_ms: Some(now.saturating_sub(86_400_000)),
        ..Default::default()
    };
    let recent = ledger.list(&day, 5000).unwrap_or_default();
    let window = JobFilter {
        since_ms: Some(now.saturating_sub(2 * 86_400_000)),
        ..JobFilter::default()
    };
    let jobs = ledger.list_jobs(&window, 20_000).unwrap_or_default();
    let mut body = String::from("<h1>History</h1>");
    body.push_str(&super::charts::per_hour(&recent, now));
    body.push_str(&super::charts::durations(&recent));
    body.push_str(&super::charts::queue(&jobs, now));
    body.push_str(&format!(
        "<h2>Who touched a file</h2><form method=\"get\" action=\"/history\">\
         <input name=\"path\" size=\"50\" placeholder=\"/srv/repos/api/src/lib.rs\" value=\"{}\"> <button>look up</button></form>",
        esc(q.path.as_deref().unwrap_or(""))
    ));
    if let Some(path) = q.path.as_deref().filter(|p| !p.is_empty()) {
        let touches = ledger.touching(path).unwrap_or_default();
        if touches.is_empty() {
            body.push_str("<p class=\"muted\">no execution touched it</p>");
        } else {
            body.push_str("<table><tr><th>execution</th><th>prompt</th><th>outcome</th><th class=\"wide\">how</th></tr>");
            for t in touches.iter().take(200) {
                let how: Vec<String> = t
                    .paths
                    .iter()
                    .map(|p| format!("{} {}", p.relation, p.path))
                    .collect();
                body.push_str(&format!(
                    "<tr><td><a href=\"/jobs/{}\">{}</a></td><td>{}/{}</td><td>{}</td><td class=\"wide\">{}</td></tr>",
                    url(&t.execution.id),
                    esc(&jobwarden_ledger::short_id(&t.execution.id)),
                    esc(&t.execution.project),
                    esc(&t.execution.name),
                    esc(t.execution.outcome.as_str()),
                    esc(&how.join(", "))
                ));
            }
            body.push_str("</table>");
        }
    }
    body.push_str("<h2>Latest executions</h2><table><tr><th>execution</th><th>prompt</th><th>outcome</th><th>duration</th></tr>");
    for e in recent.iter().take(50) {
        body.push_str(&format!(
            "<tr><td><a href=\"/jobs/{}\">{}</a></td><td>{}/{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            url(&e.id),
            esc(&jobwarden_ledger::short_id(&e.id)),
            esc(&e.project),
            esc(&e.name),
            esc(e.outcome.as_str()),
            e.duration_ms.map(|d| format!("{:.1} s", d as f64 / 1000.0)).unwrap_or_default()
        ));
    }
    body.push_str("</table>");
    Html(page("history", &body))
}

/// The ledger's attempts of `rec`'s prompt, newest first.
fn attempts(ledger: &Ledger, rec: &JobRecord) -> String {
    let filter = jobwarden_ledger::history::Filter {
        project: Some(rec.project.clone()),
        name: Some(rec.name.clone()),
        ..Default::default()
    };
    let rows = ledger.list(&filter, 20).unwrap_or_default();
    let mut out = String::from("<h2>Attempts of this prompt</h2>");
    if rows.is_empty() {
        out.push_str("<p class=\"muted\">none recorded yet</p>");
        return out;
    }
    out.push_str("<table id=\"attempts\"><tr><th>attempt</th><th>execution</th><th>outcome</th><th>finished</th><th class=\"wide\">why</th></tr>");
    for e in rows {
        out.push_str(&format!(
            "<tr><td class=\"num\">{}</td><td><a href=\"/jobs/{}\">{}</a></td><td>{}</td><td>{}</td><td class=\"wide\">{}</td></tr>",
            e.attempt,
            url(&e.id),
            esc(&jobwarden_ledger::short_id(&e.id)),
            esc(e.outcome.as_str()),
            esc(&ago(e.finished_at)),
            esc(e.error_message.as_deref().unwrap_or(""))
        ));
    }
    out.push_str("</table>");
    out
}
