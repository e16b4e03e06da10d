//! What the page changes, each a POST carrying the CSRF token, through
//! the same file contract as the CLI: an ABORT marker (`jobwarden
//! abort`), an acknowledgement in the ledger (`jobwarden ack`), a pause
//! marker (`jobwarden pause`, `resume`). Each answers with a redirect to
//! the page it came from, or a plain refusal saying why.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::json;

use super::Web;
use jobwarden_model::control::Scope;
use jobwarden_model::events::{EventLog, Op};
use jobwarden_model::job::{JobId, JobRecord};

/// The fields every form sends (a body that is no form is an empty one,
/// and refused for its missing CSRF token like any other).
#[derive(Debug, Default, Deserialize)]
pub struct Posted {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    text: Option<String>,
    /// A retry's "now": without waiting for a cooldown.
    #[serde(default)]
    now: Option<String>,
}

/// Who did it, for the markers and events: the page, and the browser's
/// address when known.
const BY: &str = "jobwarden web";

fn refuse(status: StatusCode, why: &str) -> Response {
    Refusal(status, why.to_owned()).into_response()
}

/// A request refused: its status and why, said as plain text.
pub struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (
            self.0,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("jobwarden: {}\n", self.1),
        )
            .into_response()
    }
}

/// The form posted in `body`, once its CSRF token is checked.
fn posted(web: &Web, body: &[u8]) -> Result<Posted, Refusal> {
    let posted: Posted = serde_urlencoded::from_bytes(body).unwrap_or_default();
    let ok = posted.csrf.len() == web.csrf.len()
        && posted
            .csrf
            .bytes()
            .zip(web.csrf.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if ok {
        Ok(posted)
    } else {
        Err(Refusal(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong; reload the page and try again".into(),
        ))
    }
}

/// The form of a POST about job `id`, checked, and the id.
fn posted_for(web: &Web, body: &[u8], id: &str) -> Result<(Posted, JobId), Refusal> {
    let posted = posted(web, body)?;
    let id = JobId::parse(id).map_err(|_| Refusal(StatusCode::NOT_FOUND, "no such job".into()))?;
    Ok((posted, id))
}

/// Back to the page the form was on (same site only), else `fallback`.
fn back(headers: &HeaderMap, fallback: &str) -> Response {
    let to = headers
        .get(header::REFERER)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| r.split_once("://").map(|(_, rest)| rest))
        .and_then(|rest| rest.find('/').map(|i| rest[i..].to_owned()))
        .unwrap_or_else(|| fallback.to_owned());
    Redirect::to(super::html::local_target(&to)).into_response()
}

pub async fn abort(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (_, id) = match posted_for(&web, &body, &id) {
        Ok(checked) => checked,
        Err(refused) => return refused.into_response(),
    };
    let rec = match JobRecord::load_job(&web.layout, &id) {
        Ok(rec) => rec,
        Err(e) => return refuse(StatusCode::NOT_FOUND, &e.to_string()),
    };
    if rec.state.is_terminal() {
        return refuse(
            StatusCode::CONFLICT,
            &format!("the job already ended {}", rec.state),
        );
    }
    match jobwarden_model::abort::write_marker_by(&web.layout, &id, Some("from the web page"), BY) {
        Ok(_) => back(
            &headers,
            &format!("/jobs/{}", super::html::url(id.as_str())),
        ),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

pub async fn ack(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (_, id) = match posted_for(&web, &body, &id) {
        Ok(checked) => checked,
        Err(refused) => return refused.into_response(),
    };
    let Some(mut ledger) = super::pages::ledger(&web) else {
        return refuse(StatusCode::NOT_FOUND, "nothing has run yet");
    };
    let now = jobwarden_sys::clock::Timestamp::now().epoch_ms();
    match ledger.acknowledge(id.as_str(), now, Some(BY)) {
        Ok(_) => {
            if let Ok(rec) = JobRecord::load_job(&web.layout, &id) {
                EventLog::open(
                    web.layout.root(),
                    &web.layout.events(&id),
                    web.config.events_for(&rec),
                )
                .append(Op::Acknowledged, json!({"by": BY}));
            }
            back(&headers, "/")
        }
        Err(e) => refuse(StatusCode::NOT_FOUND, &e.to_string()),
    }
}

/// Retry an ended job, as `jobwarden retry [--now]` does; then its page
/// (the retry's event is in its events).
pub async fn retry(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (posted, id) = match posted_for(&web, &body, &id) {
        Ok(checked) => checked,
        Err(refused) => return refused.into_response(),
    };
    let now = posted
        .now
        .as_deref()
        .is_some_and(|v| !v.is_empty() && v != "0");
    let web2 = web.clone();
    let id2 = id.clone();
    let done = tokio::task::spawn_blocking(move || {
        let ledger = super::pages::ledger(&web2);
        jobwarden_engine::retry::by_hand::retry(
            &web2.layout,
            &web2.config,
            ledger.as_ref(),
            &id2,
            now,
            BY,
        )
    })
    .await;
    match done {
        Ok(Ok(_)) => back(
            &headers,
            &format!("/jobs/{}", super::html::url(id.as_str())),
        ),
        Ok(Err(e)) if e.downcast_ref::<jobwarden_sys::error::No>().is_some() => {
            refuse(StatusCode::CONFLICT, &format!("{e:#}"))
        }
        Ok(Err(e)) => refuse(StatusCode::BAD_REQUEST, &format!("{e:#}")),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// Cancel a prompt waiting in the inbox, as `jobwarden abort
/// project/name` does: claimed and ended `cancelled`, or, if the daemon
/// claimed it first, the job it became gets its ABORT marker. Then that
/// job's page.
pub async fn cancel_waiting(State(web): State<Arc<Web>>, body: axum::body::Bytes) -> Response {
    let posted = match posted(&web, &body) {
        Ok(posted) => posted,
        Err(refused) => return refused.into_response(),
    };
    let project = posted.project.clone().unwrap_or_default();
    let name = posted.name.clone().unwrap_or_default();
    let prompt = match check_prompt(&project, &name) {
        Ok(p) => p,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, &why),
    };
    let web2 = web.clone();
    let done = tokio::task::spawn_blocking(move || cancel_waiting_now(&web2, &prompt)).await;
    match done {
        Ok(Ok(id)) => {
            Redirect::to(&format!("/jobs/{}", super::html::url(id.as_str()))).into_response()
        }
        Ok(Err(refused)) => refused.into_response(),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn cancel_waiting_now(
    web: &Web,
    prompt: &jobwarden_model::layout::PromptName,
) -> Result<JobId, Refusal> {
    use jobwarden_engine::cancel::WaitingCancelled;
    let not_waiting = || {
        Refusal(
            StatusCode::CONFLICT,
            format!("{prompt} is no longer waiting in the inbox; nothing was cancelled"),
        )
    };
    if std::fs::symlink_metadata(web.layout.waiting_prompt(prompt)).is_err() {
        return Err(not_waiting());
    }
    let mut ledger = super::pages::ledger(web);
    let before = ledger
        .as_ref()
        .and_then(|l| l.newest_job_of(&prompt.project, &prompt.name).ok())
        .flatten()
        .map(|j| j.id);
    let reason = Some("from the web page");
    let done = jobwarden_engine::cancel::cancel_waiting_by_hand(
        &web.layout,
        &web.config,
        ledger.as_mut(),
        prompt,
        before.as_deref(),
        reason,
        Some(BY),
    )
    .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")))?;
    match done {
        WaitingCancelled::Ended(rec) | WaitingCancelled::Rejected(rec) => Ok(rec.job_id),
        WaitingCancelled::ClaimedAs(id) => {
            if JobRecord::load_job(&web.layout, &id).is_ok_and(|r| r.state.is_terminal()) {
                // It ran and ended before the marker could stop it.
                return Ok(id);
            }
            jobwarden_model::abort::write_marker_by(&web.layout, &id, reason, BY)
                .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            Ok(id)
        }
        WaitingCancelled::Gone => Err(not_waiting()),
    }
}

/// The submit form: the prompt dropped as `jobwarden submit` drops it,
/// its profile (when chosen) in its front matter.
pub async fn submit(State(web): State<Arc<Web>>, body: axum::body::Bytes) -> Response {
    let posted = match posted(&web, &body) {
        Ok(posted) => posted,
        Err(refused) => return refused.into_response(),
    };
    let project = posted.project.clone().unwrap_or_default();
    let name = posted.name.clone().unwrap_or_default();
    let mut text = posted
        .text
        .clone()
        .unwrap_or_default()
        .replace("\r\n", "\n");
    if let Some(profile) = posted.profile.as_deref().filter(|p| !p.is_empty()) {
        text = format!("---\nprofile: {profile}\n---\n{text}");
    }
    let prompt = match check_prompt(&project, &name) {
        Ok(p) => p,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, &why),
    };
    let dropped = jobwarden_engine::submit::prepare(
        &web.config,
        &web.layout,
        prompt,
        "the prompt",
        &text,
        None,
    )
    .and_then(|s| {
        jobwarden_engine::submit::drop_prompt(&web.layout, &s.prompt, s.text.as_bytes()).map(|_| s)
    });
    match dropped {
        Ok(s) => Redirect::to(&format!(
            "/jobs?project={}",
            super::html::url(&s.prompt.project)
        ))
        .into_response(),
        Err(e) => refuse(StatusCode::BAD_REQUEST, &format!("{e:#}")),
    }
}

fn check_prompt(project: &str, name: &str) -> Result<jobwarden_model::layout::PromptName, String> {
    jobwarden_model::layout::validate_project(project).map_err(|e| {
        format!("project {project:?}: {e}; give a folder under the inbox, such as acme/api")
    })?;
    jobwarden_model::layout::validate_segment(name).map_err(|e| format!("name {name:?} {e}"))?;
    Ok(jobwarden_model::layout::PromptName {
        project: project.to_owned(),
        name: name.to_owned(),
    })
}

fn scope_of(posted: &Posted) -> Result<Scope, &'static str> {
    let name = posted.name.clone().filter(|n| !n.is_empty());
    match (posted.kind.as_deref(), name) {
        (None | Some("daemon") | Some(""), _) => Ok(Scope::Daemon),
        (Some("profile"), Some(n)) => Ok(Scope::Profile(n)),
        (Some("project"), Some(n)) => Ok(Scope::Project(n)),
        _ => Err("a pause's scope is daemon, or profile or project with a name"),
    }
}

pub async fn pause(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    change_pause(&web, &headers, &body, |layout, scope| {
        jobwarden_model::control::pause(layout, scope, Some("from the web page")).map(drop)
    })
}

pub async fn resume(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    change_pause(&web, &headers, &body, |layout, scope| {
        jobwarden_model::control::resume(layout, scope).map(drop)
    })
}

/// A pause or its end, for the scope the form names, as `jobwarden pause`
/// and `resume` make them.
fn change_pause(
    web: &Web,
    headers: &HeaderMap,
    body: &[u8],
    change: impl FnOnce(
        &jobwarden_model::layout::Layout,
        &Scope,
    ) -> Result<(), jobwarden_model::control::ControlError>,
) -> Response {
    let posted = match posted(web, body) {
        Ok(posted) => posted,
        Err(refused) => return refused.into_response(),
    };
    let scope = match scope_of(&posted) {
        Ok(s) => s,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    match change(&web.layout, &scope) {
        Ok(()) => back(headers, "/"),
        Err(e) => refuse(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}
