//! The JSON API under `/api/`, behind the same token as the pages (the
//! session cookie or `Authorization: Bearer`), read-only: what the pages
//! show, for scripts and dashboards (`docs/web-api.md`). Every answer is
//! a JSON object; an error is `{"error": "..."}` with its status.
//!
//! - `GET /api/jobs?state=&project=&profile=&q=&sort=&page=`: a page of
//!   jobs as the job list filters and sorts them (`jobs`, `total`, `page`,
//!   `per_page`).
//! - `GET /api/jobs/{id}`: the job's record (`job.json`).
//! - `GET /api/jobs/{id}/events`: its events, oldest first (`events`).
//! - `GET /api/history?project=&name=&since=&limit=`: ledger executions,
//!   newest first (`executions`); `since` as `jobwarden history --since`
//!   takes it.
//! - `GET /api/status`: whether a daemon runs, what `daemon.json` says,
//!   and the jobs by state.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Web;
use super::list::{JobsQuery, ROWS};
use super::pages::{daemon_running, ledger};
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_sys::clock::Timestamp;

fn error(status: StatusCode, why: &str) -> Response {
    (status, Json(json!({ "error": why }))).into_response()
}

fn no_such_job() -> Response {
    error(StatusCode::NOT_FOUND, "no such job")
}

pub async fn jobs(State(web): State<Arc<Web>>, Query(q): Query<JobsQuery>) -> Response {
    let Some(ledger) = ledger(&web) else {
        return Json(json!({"jobs": [], "total": 0, "page": 1, "per_page": ROWS})).into_response();
    };
    let offset = (q.page() - 1) * ROWS;
    match ledger.page_jobs(&q.filter(), q.order(), offset, ROWS) {
        Ok((jobs, total)) => Json(json!({
            "jobs": jobs,
            "total": total,
            "page": q.page(),
            "per_page": ROWS,
        }))
        .into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

pub async fn job(State(web): State<Arc<Web>>, Path(id): Path<String>) -> Response {
    let Ok(id) = JobId::parse(&id) else {
        return no_such_job();
    };
    match JobRecord::load_job(&web.layout, &id) {
        Ok(rec) => Json(rec).into_response(),
        Err(_) if std::fs::symlink_metadata(web.layout.run_dir(&id)).is_err() => no_such_job(),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the job's record cannot be read now; ask again in a moment",
        ),
    }
}

pub async fn events(State(web): State<Arc<Web>>, Path(id): Path<String>) -> Response {
    let Ok(id) = JobId::parse(&id) else {
        return no_such_job();
    };
    if std::fs::symlink_metadata(web.layout.run_dir(&id)).is_err() {
        return no_such_job();
    }
    let events = jobwarden_model::events::read_all(web.layout.root(), &web.layout.events(&id))
        .unwrap_or_default();
    Json(json!({ "events": events })).into_response()
}

/// `/api/history?project=&name=&since=&limit=`.
#[derive(Debug, Default, Deserialize)]
pub struct HistoryQuery {
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
}

pub async fn history(State(web): State<Arc<Web>>, Query(q): Query<HistoryQuery>) -> Response {
    let now = Timestamp::now().epoch_ms();
    let since = match q.since.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => match jobwarden_sys::clock::parse_when(s, now) {
            Ok(ms) => Some(ms),
            Err(why) => return error(StatusCode::BAD_REQUEST, &format!("since={s:?}: {why}")),
        },
        None => None,
    };
    let Some(ledger) = ledger(&web) else {
        return Json(json!({ "executions": [] })).into_response();
    };
    let filter = jobwarden_ledger::history::Filter {
        project: q.project.filter(|p| !p.is_empty()),
        name: q.name.filter(|n| !n.is_empty()),
        since_ms: since,
        ..Default::default()
    };
    match ledger.list(&filter, q.limit.unwrap_or(100).clamp(1, 10_000)) {
        Ok(rows) => Json(json!({ "executions": rows })).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

pub async fn status(State(web): State<Arc<Web>>) -> Response {
    let daemon: Value =
        jobwarden_sys::fsio::read_capped(web.layout.root(), &web.layout.daemon_json(), 1 << 20)
            .ok()
            .and_then(|(bytes, _)| serde_json::from_slice(&bytes).ok())
            .unwrap_or(Value::Null);
    let counts: serde_json::Map<String, Value> = ledger(&web)
        .and_then(|l| l.count_jobs_by_state().ok())
        .unwrap_or_default()
        .into_iter()
        .map(|(state, n)| (state, json!(n)))
        .collect();
    Json(json!({
        "daemon_running": daemon_running(&web),
        "daemon": daemon,
        "jobs_by_state": counts,
    }))
    .into_response()
}
