//! The job list: the prompts waiting in the inbox (each with its cancel
//! button), then the jobs, newest first, filtered by state, project,
//! profile and text, its rows sent again over server-sent events whenever
//! they change (`live.rs`).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Html;
use serde::Deserialize;

use super::Web;
use super::html::{button, esc, page, state, url};
use super::pages::{ago, daemon_running, ledger};
use jobwarden_engine::waiting::{self, DEFERRED, WAITING};
use jobwarden_ledger::{IndexedJob, JobFilter};
use jobwarden_model::job::JobState;
use jobwarden_sys::clock::Timestamp;

/// `/jobs?state=&project=&profile=&q=`.
#[derive(Debug, Default, Deserialize)]
pub struct JobsQuery {
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub profile: Option<String>,
    /// Text found in the prompt's name or project.
    #[serde(default)]
    pub q: Option<String>,
}

/// At most this many rows.
const ROWS: usize = 200;
/// The table's columns.
const COLUMNS: usize = 7;

impl JobsQuery {
    fn get(field: &Option<String>) -> Option<&str> {
        field.as_deref().filter(|v| !v.is_empty())
    }

    fn text(&self) -> String {
        Self::get(&self.q).unwrap_or("").to_lowercase()
    }

    /// Whether `project/name` passes the project and text filters.
    fn passes(&self, project: &str, name: &str) -> bool {
        let text = self.text();
        Self::get(&self.project).is_none_or(|p| p == project)
            && (text.is_empty() || format!("{project}/{name}").to_lowercase().contains(&text))
    }

    /// Whether prompts still in the inbox are listed: they have no profile
    /// yet (it is chosen at the claim).
    fn wants_waiting(&self) -> bool {
        Self::get(&self.profile).is_none()
            && Self::get(&self.state).is_none_or(|s| s == WAITING || s == DEFERRED)
    }

    fn wants_jobs(&self) -> bool {
        Self::get(&self.state).is_none_or(|s| s != WAITING && s != DEFERRED)
    }
}

fn message(text: &str) -> String {
    format!("<tr><td colspan=\"{COLUMNS}\" class=\"muted\">{text}</td></tr>")
}

/// The rows of the job list: the prompts waiting, then the jobs, newest
/// first, at most [`ROWS`] in all.
pub(super) fn job_rows(web: &Web, q: &JobsQuery) -> String {
    let ledger = ledger(web);
    let mut rows = Vec::new();
    if q.wants_waiting() {
        rows.extend(waiting_rows(web, ledger.as_ref(), q));
    }
    if q.wants_jobs()
        && let Some(ledger) = &ledger
    {
        let filter = JobFilter {
            states: JobsQuery::get(&q.state)
                .map(str::to_owned)
                .into_iter()
                .collect(),
            project: JobsQuery::get(&q.project).map(str::to_owned),
            profile: JobsQuery::get(&q.profile).map(str::to_owned),
            ..JobFilter::default()
        };
        let scan = if q.text().is_empty() { ROWS } else { 5000 };
        let jobs = ledger.list_jobs(&filter, scan).unwrap_or_default();
        rows.extend(
            jobs.iter()
                .filter(|j| q.passes(&j.project, &j.name))
                .take(ROWS.saturating_sub(rows.len()))
                .map(|j| job_row(web, j)),
        );
    }
    match (rows.is_empty(), ledger.is_some()) {
        (false, _) => rows.concat(),
        (true, true) => message("no job matches"),
        (true, false) => message("nothing has run yet"),
    }
}

fn job_row(web: &Web, j: &IndexedJob) -> String {
    let action = match j.state.as_str() {
        "queued" => button(
            &format!("/jobs/{}/abort", url(&j.id)),
            "cancel",
            &web.csrf,
            &[],
        ),
        "preparing" | "running" | "publishing" => button(
            &format!("/jobs/{}/abort", url(&j.id)),
            "abort",
            &web.csrf,
            &[],
        ),
        _ => String::new(),
    };
    format!(
        "<tr data-id=\"{id}\"><td><a href=\"/jobs/{id}\">{short}</a></td><td>{prompt}</td><td>{state}</td>\
         <td class=\"wide\">{profile}</td><td class=\"wide\">{when}</td><td class=\"wide\">{reason}</td><td>{action}</td></tr>",
        id = url(&j.id),
        short = esc(&jobwarden_ledger::short_id(&j.id)),
        prompt = esc(&format!("{}/{}", j.project, j.name)),
        state = state(&j.state),
        profile = esc(j.profile.as_deref().unwrap_or("")),
        when = esc(&ago(j.finished_at.unwrap_or(j.created_at))),
        reason = esc(j.state_reason.as_deref().unwrap_or("")),
    )
}

/// The prompts waiting in the inbox that pass the filters, each with its
/// cancel button.
fn waiting_rows(
    web: &Web,
    ledger: Option<&jobwarden_ledger::Ledger>,
    q: &JobsQuery,
) -> Vec<String> {
    let now = Timestamp::now().epoch_ms();
    let daemon = daemon_running(web);
    let wanted = JobsQuery::get(&q.state);
    waiting::list(&web.layout)
        .into_iter()
        .filter(|(prompt, _)| q.passes(&prompt.project, &prompt.name))
        .filter_map(|(prompt, found)| {
            waiting::examine(&web.layout, &web.config, ledger, prompt, found, now).ok()
        })
        .filter(|w| wanted.is_none_or(|s| s == w.state()))
        .take(ROWS)
        .map(|w| {
            let cancel = button(
                "/waiting/cancel",
                "cancel",
                &web.csrf,
                &[("project", &w.prompt.project), ("name", &w.prompt.name)],
            );
            format!(
                "<tr data-prompt=\"{label}\"><td class=\"muted\">—</td><td>{label}</td><td>{state}</td>\
                 <td class=\"wide\"></td><td class=\"wide\">{when}</td><td class=\"wide\">{reason}</td><td>{cancel}</td></tr>",
                label = esc(&w.label()),
                state = state(w.state()),
                when = esc(&ago(w.since_ms)),
                reason = esc(&w.reason(daemon)),
            )
        })
        .collect()
}

fn options(values: impl Iterator<Item = String>, chosen: Option<&str>) -> String {
    std::iter::once(String::new())
        .chain(values)
        .map(|v| {
            let selected = if chosen == Some(v.as_str()) {
                " selected"
            } else {
                ""
            };
            format!("<option value=\"{0}\"{selected}>{0}</option>", esc(&v))
        })
        .collect()
}

pub async fn jobs(State(web): State<Arc<Web>>, Query(q): Query<JobsQuery>) -> Html<String> {
    let states = options(
        [WAITING, DEFERRED]
            .into_iter()
            .chain(JobState::ALL.iter().map(|s| s.as_str()))
            .map(str::to_owned),
        q.state.as_deref(),
    );
    let profiles = options(web.config.profiles.keys().cloned(), q.profile.as_deref());
    let params = format!(
        "state={}&project={}&profile={}&q={}",
        url(q.state.as_deref().unwrap_or("")),
        url(q.project.as_deref().unwrap_or("")),
        url(q.profile.as_deref().unwrap_or("")),
        url(q.q.as_deref().unwrap_or(""))
    );
    let body = format!(
        "<h1>Jobs</h1><form method=\"get\" action=\"/jobs\">\
         <select name=\"state\" title=\"state\">{states}</select> \
         <input name=\"project\" placeholder=\"project\" value=\"{project}\"> \
         <select name=\"profile\" title=\"profile\">{profiles}</select> \
         <input name=\"q\" placeholder=\"text\" value=\"{text}\"> <button>filter</button></form>\
         <table><thead><tr><th>job</th><th>prompt</th><th>state</th><th class=\"wide\">profile</th>\
         <th class=\"wide\">when</th><th class=\"wide\">why</th><th></th></tr></thead>\
         <tbody id=\"rows\">{rows}</tbody></table>\
         <script>new EventSource('/live/jobs?{params}').onmessage = e => \
         {{ document.getElementById('rows').innerHTML = e.data; }};</script>",
        project = esc(q.project.as_deref().unwrap_or("")),
        text = esc(q.q.as_deref().unwrap_or("")),
        rows = job_rows(&web, &q),
        params = esc(&params),
    );
    Html(page("jobs", &body))
}
