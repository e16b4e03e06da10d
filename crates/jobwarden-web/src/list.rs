//! The job list: the prompts waiting in the inbox (each with its cancel
//! button), then the jobs, filtered by state, project, profile and text,
//! sorted, a page of [`ROWS`] at a time, with bulk retry of the failed
//! ones and bulk cancel of the waiting ones shown. Its rows are keyed
//! (`data-key`) and hold nothing that changes by itself (times are
//! `<time>` the page's script keeps current), so the live stream
//! (`live.rs`) replaces a row only when the row changed.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Html;
use serde::Deserialize;

use super::Web;
use super::html::{Ctx, button, esc, job_cells, page, state, url, when};
use super::pages::{daemon_running, ledger};
use jobwarden_engine::waiting::{self, DEFERRED, WAITING};
use jobwarden_ledger::{IndexedJob, JobFilter, JobOrder, Ledger};
use jobwarden_model::job::JobState;
use jobwarden_sys::clock::Timestamp;

/// `/jobs?state=&project=&profile=&q=&sort=&page=`.
#[derive(Debug, Default, Clone, Deserialize)]
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
    /// `newest` (the default), `oldest`, `prompt`, `state`, `ended`.
    #[serde(default)]
    pub sort: Option<String>,
    /// The page, from 1.
    #[serde(default)]
    pub page: Option<String>,
}

/// Rows a page.
pub const ROWS: usize = 100;
/// The table's columns.
const COLUMNS: usize = 7;
/// The sorts offered, as `sort=` names them.
const SORTS: &[(&str, JobOrder)] = &[
    ("newest", JobOrder::Newest),
    ("oldest", JobOrder::Oldest),
    ("prompt", JobOrder::Prompt),
    ("state", JobOrder::State),
    ("ended", JobOrder::Ended),
];
/// The states whose jobs a bulk retry takes.
const RETRYABLE: &[&str] = &["failed", "timed_out", "interrupted", "setup_failed"];

impl JobsQuery {
    fn get(field: &Option<String>) -> Option<&str> {
        field.as_deref().filter(|v| !v.is_empty())
    }

    fn text(&self) -> String {
        Self::get(&self.q).unwrap_or("").to_lowercase()
    }

    pub fn order(&self) -> JobOrder {
        let sort = Self::get(&self.sort).unwrap_or("newest");
        SORTS
            .iter()
            .find(|(name, _)| *name == sort)
            .map_or(JobOrder::Newest, |(_, o)| *o)
    }

    /// The page asked for, from 1.
    pub fn page(&self) -> usize {
        Self::get(&self.page)
            .and_then(|p| p.parse::<usize>().ok())
            .filter(|p| *p >= 1 && *p <= 1_000_000)
            .unwrap_or(1)
    }

    /// Whether `project/name` passes the project and text filters.
    fn passes(&self, project: &str, name: &str) -> bool {
        let text = self.text();
        Self::get(&self.project).is_none_or(|p| p == project)
            && (text.is_empty() || format!("{project}/{name}").to_lowercase().contains(&text))
    }

    /// Whether prompts still in the inbox are listed: they have no profile
    /// yet (it is chosen at the claim), and they come first, on page 1.
    fn wants_waiting(&self) -> bool {
        Self::get(&self.profile).is_none()
            && Self::get(&self.state).is_none_or(|s| s == WAITING || s == DEFERRED)
            && self.page() == 1
    }

    fn wants_jobs(&self) -> bool {
        Self::get(&self.state).is_none_or(|s| s != WAITING && s != DEFERRED)
    }

    pub fn filter(&self) -> JobFilter {
        JobFilter {
            states: Self::get(&self.state)
                .map(str::to_owned)
                .into_iter()
                .collect(),
            project: Self::get(&self.project).map(str::to_owned),
            profile: Self::get(&self.profile).map(str::to_owned),
            text: Self::get(&self.q).map(str::to_owned),
            ..JobFilter::default()
        }
    }

    /// The query as an address's, with `page` set to `page`.
    pub(super) fn params(&self, page: usize) -> String {
        let field = |v: &Option<String>| url(v.as_deref().unwrap_or(""));
        format!(
            "state={}&project={}&profile={}&q={}&sort={}&page={page}",
            field(&self.state),
            field(&self.project),
            field(&self.profile),
            field(&self.q),
            field(&self.sort),
        )
    }
}

/// What a list shows: its keyed rows, in order, and how many jobs match.
pub(super) struct Listed {
    pub rows: Vec<(String, String)>,
    pub jobs: Vec<IndexedJob>,
    pub waiting: Vec<jobwarden_model::layout::PromptName>,
    pub total: u64,
}

/// The rows of the job list: the prompts waiting, then a page of jobs.
pub(super) fn job_rows(web: &Web, ledger: Option<&Ledger>, ctx: &Ctx, q: &JobsQuery) -> Listed {
    let mut listed = Listed {
        rows: Vec::new(),
        jobs: Vec::new(),
        waiting: Vec::new(),
        total: 0,
    };
    if q.wants_waiting() {
        for w in waiting_prompts(web, ledger, q) {
            listed.rows.push(waiting_row(ctx, &w, daemon_running(web)));
            listed.waiting.push(w.prompt);
        }
    }
    if q.wants_jobs()
        && let Some(ledger) = ledger
    {
        let offset = (q.page() - 1) * ROWS;
        let (jobs, total) = ledger
            .page_jobs(&q.filter(), q.order(), offset, ROWS)
            .unwrap_or_default();
        listed.total = total;
        listed
            .rows
            .extend(jobs.iter().map(|j| (j.id.clone(), job_row(ctx, j))));
        listed.jobs = jobs;
    }
    listed
}

/// The message row shown when there is no row.
fn empty_row(ledger: bool) -> String {
    let text = if ledger {
        "no job matches"
    } else {
        "nothing has run yet"
    };
    format!("<tr data-key=\"\"><td colspan=\"{COLUMNS}\" class=\"muted\">{text}</td></tr>")
}

/// The rows to send: the listed ones, or the message row (`ledger`: the
/// root's, if it has one).
pub(super) fn keyed(ledger: Option<&Ledger>, listed: &Listed) -> Vec<(String, String)> {
    if listed.rows.is_empty() {
        vec![(String::new(), empty_row(ledger.is_some()))]
    } else {
        listed.rows.clone()
    }
}

/// A job's row.
pub(super) fn job_row(ctx: &Ctx, j: &IndexedJob) -> String {
    let to = format!("/jobs/{}/abort", url(&j.id));
    let action = match j.state.as_str() {
        "queued" => button(ctx, &to, "cancel", &[]),
        "preparing" | "running" | "publishing" => button(ctx, &to, "abort", &[]),
        _ => String::new(),
    };
    let at = j.finished_at.or(j.started_at).unwrap_or(j.created_at);
    format!(
        "<tr data-key=\"{key}\">{cells}<td data-label=\"profile\">{profile}</td><td data-label=\"when\">{when}</td>\
         <td data-label=\"why\" class=\"why\">{reason}</td><td>{action}</td></tr>",
        key = esc(&j.id),
        cells = job_cells(j),
        profile = esc(j.profile.as_deref().unwrap_or("")),
        when = when(at),
        reason = esc(j.state_reason.as_deref().unwrap_or("")),
    )
}

/// The prompts waiting in the inbox that pass the filters.
fn waiting_prompts(
    web: &Web,
    ledger: Option<&jobwarden_ledger::Ledger>,
    q: &JobsQuery,
) -> Vec<waiting::Waiting> {
    let now = Timestamp::now().epoch_ms();
    let config = web.config();
    let wanted = JobsQuery::get(&q.state);
    waiting::list(&web.layout)
        .into_iter()
        .filter(|(prompt, _)| q.passes(&prompt.project, &prompt.name))
        .filter_map(|(prompt, found)| {
            waiting::examine(&web.layout, &config, ledger, prompt, found, now).ok()
        })
        .filter(|w| wanted.is_none_or(|s| s == w.state()))
        .take(ROWS)
        .collect()
}

fn waiting_row(ctx: &Ctx, w: &waiting::Waiting, daemon: bool) -> (String, String) {
    let cancel = button(
        ctx,
        "/waiting/cancel",
        "cancel",
        &[("project", &w.prompt.project), ("name", &w.prompt.name)],
    );
    let key = format!("waiting:{}", w.label());
    let html = format!(
        "<tr data-key=\"{key}\"><td data-label=\"job\" class=\"muted\">—</td><td data-label=\"prompt\">{label}</td>\
         <td data-label=\"state\">{state}</td><td data-label=\"profile\"></td><td data-label=\"when\">{when}</td>\
         <td data-label=\"why\" class=\"why\">{reason}</td><td>{cancel}</td></tr>",
        key = esc(&key),
        label = esc(&w.label()),
        state = state(w.state()),
        when = when(w.deferral.as_ref().map_or(w.since_ms, |d| d.until_ms)),
        reason = esc(&w.reason(daemon)),
    );
    (key, html)
}

fn options<'a>(values: impl Iterator<Item = (&'a str, &'a str)>, chosen: Option<&str>) -> String {
    values
        .map(|(value, label)| {
            let selected = if chosen == Some(value) {
                " selected"
            } else {
                ""
            };
            format!(
                "<option value=\"{}\"{selected}>{}</option>",
                esc(value),
                esc(label)
            )
        })
        .collect()
}

pub async fn jobs(
    State(web): State<Arc<Web>>,
    ctx: Ctx,
    Query(q): Query<JobsQuery>,
) -> Html<String> {
    let config = web.config();
    let state_names: Vec<&str> = [WAITING, DEFERRED]
        .into_iter()
        .chain(JobState::ALL.iter().map(|s| s.as_str()))
        .collect();
    let states = options(
        std::iter::once(("", "any state")).chain(state_names.iter().map(|s| (*s, *s))),
        q.state.as_deref(),
    );
    let profile_names: Vec<&str> = config.profiles.keys().map(String::as_str).collect();
    let profiles = options(
        std::iter::once(("", "any profile")).chain(profile_names.iter().map(|p| (*p, *p))),
        q.profile.as_deref(),
    );
    let sorts = options(
        SORTS.iter().map(|(name, _)| (*name, *name)),
        Some(JobsQuery::get(&q.sort).unwrap_or("newest")),
    );
    let ledger = ledger(&web);
    let listed = job_rows(&web, ledger.as_ref(), &ctx, &q);
    let rows: String = keyed(ledger.as_ref(), &listed)
        .into_iter()
        .map(|(_, html)| html)
        .collect();
    let body = format!(
        "<h1>Jobs</h1><form method=\"get\" action=\"/jobs\" class=\"filters\">\
         <label>state <select name=\"state\">{states}</select></label> \
         <label>project <input name=\"project\" value=\"{project}\"></label> \
         <label>profile <select name=\"profile\">{profiles}</select></label> \
         <label>text <input name=\"q\" type=\"search\" value=\"{text}\"></label> \
         <label>sort <select name=\"sort\">{sorts}</select></label> <button>filter</button></form>\
         {bulk}<table class=\"rows\"><thead><tr><th>job</th><th>prompt</th><th>state</th><th>profile</th>\
         <th>when</th><th>why</th><th><span class=\"hidden\">action</span></th></tr></thead>\
         <tbody id=\"rows\" data-live=\"/live/jobs?{params}\">{rows}</tbody></table>{pager}",
        project = esc(q.project.as_deref().unwrap_or("")),
        text = esc(q.q.as_deref().unwrap_or("")),
        bulk = bulk(&ctx, &q, &listed),
        params = esc(&q.params(q.page())),
        pager = pager(&q, listed.total),
    );
    Html(page(&ctx, "jobs", &body))
}

/// The bulk actions on what the page shows: retry the failed jobs, cancel
/// the waiting prompts.
fn bulk(ctx: &Ctx, q: &JobsQuery, listed: &Listed) -> String {
    let mut out = String::new();
    let failed: Vec<&str> = listed
        .jobs
        .iter()
        .filter(|j| RETRYABLE.contains(&j.state.as_str()))
        .map(|j| j.id.as_str())
        .collect();
    if !failed.is_empty() && JobsQuery::get(&q.state).is_some_and(|s| RETRYABLE.contains(&s)) {
        let ids = failed.join(",");
        let n = failed.len();
        out.push_str(&button(
            ctx,
            "/bulk/retry",
            &format!("retry these {n}"),
            &[("ids", &ids)],
        ));
        out.push_str(&button(
            ctx,
            "/bulk/retry",
            &format!("retry these {n} now"),
            &[("ids", &ids), ("now", "1")],
        ));
    }
    if !listed.waiting.is_empty() {
        let prompts: Vec<String> = listed.waiting.iter().map(|p| p.to_string()).collect();
        out.push_str(&button(
            ctx,
            "/bulk/cancel",
            &format!("cancel these {} waiting", prompts.len()),
            &[("prompts", &prompts.join("\n"))],
        ));
    }
    if out.is_empty() {
        out
    } else {
        format!("<div class=\"bulk\">{out}</div>")
    }
}

/// Links to the pages before and after, and where this one is.
fn pager(q: &JobsQuery, total: u64) -> String {
    let page = q.page();
    let pages = (total as usize).div_ceil(ROWS).max(1);
    let jobs = if total == 1 { "job" } else { "jobs" };
    let mut out = format!(
        "<nav class=\"pager\" aria-label=\"pages of jobs\"><span>page {page} of {pages} · {total} {jobs}</span>"
    );
    if page > 1 {
        out.push_str(&format!(
            " <a href=\"/jobs?{}\" rel=\"prev\">previous</a>",
            esc(&q.params(page - 1))
        ));
    }
    if page < pages {
        out.push_str(&format!(
            " <a href=\"/jobs?{}\" rel=\"next\">next</a>",
            esc(&q.params(page + 1))
        ));
    }
    out.push_str("</nav>");
    out
}
