//! What the page changes, each a POST carrying the CSRF token, through
//! the same file contract as the CLI: an ABORT marker (`jobwarden
//! abort`), an acknowledgement in the ledger (`jobwarden ack`), a pause
//! marker (`jobwarden pause`, `resume`). Each answers with a redirect to
//! the page it came from (the form's `back`), saying what it did
//! (`done=`, shown as a notice), or a page saying why it was refused,
//! with the way back. Bulk forms retry the failed jobs a list shows, or
//! cancel the prompts it shows waiting.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use super::html::Ctx;
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
    /// The page the form was on.
    #[serde(default)]
    back: Option<String>,
    /// A bulk retry's jobs, comma-separated.
    #[serde(default)]
    ids: Option<String>,
    /// A bulk cancel's prompts, one `project/name` a line.
    #[serde(default)]
    prompts: Option<String>,
}

impl Posted {
    /// A retry's "now" asked (any value but empty or `0`).
    fn now(&self) -> bool {
        self.now
            .as_deref()
            .is_some_and(|v| !v.is_empty() && v != "0")
    }

    /// The items of a bulk form's `field`, split by `sep`, trimmed; refused
    /// unless there are between 1 and [`BULK_MAX`] of them.
    fn bulk(field: Option<&str>, sep: char, what: &str) -> Result<Vec<String>, Refusal> {
        let items: Vec<String> = field
            .unwrap_or("")
            .split(sep)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if items.is_empty() || items.len() > BULK_MAX {
            let why = format!(
                "a bulk {what} names between 1 and {BULK_MAX}; this one named {}",
                items.len()
            );
            return Err(Refusal(StatusCode::BAD_REQUEST, why));
        }
        Ok(items)
    }

    /// Where the answer sends the browser: the form's page, else `fallback`.
    fn back_or(&self, fallback: &str) -> String {
        self.back
            .as_deref()
            .filter(|b| super::html::local_target(b) == *b)
            .unwrap_or(fallback)
            .to_owned()
    }
}

/// The most jobs or prompts one bulk form acts on.
const BULK_MAX: usize = 1000;

/// Who did it, for the markers and events: the page, and the browser's
/// address when known.
const BY: &str = "jobwarden web";

/// A request refused: its status and why, said on a page with the way
/// back.
pub struct Refusal(StatusCode, String);

impl Refusal {
    fn page(self, ctx: &Ctx, back: &str) -> Response {
        super::pages::refused(ctx, self.0, &self.1, back)
    }
}

/// Where an action sends the browser once done: `to`, saying `done`.
fn done(to: &str, what: &str, n: Option<u64>) -> Response {
    Redirect::to(&super::html::with_notice(to, what, n)).into_response()
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

/// The form posted in `body`, checked, and where its answer goes (its
/// `back`, else `fallback`); else the page refusing it.
fn form(
    web: &Web,
    ctx: &Ctx,
    body: &[u8],
    fallback: &str,
) -> Result<(Posted, String), Box<Response>> {
    match posted(web, body) {
        Ok(posted) => {
            let back = posted.back_or(fallback);
            Ok((posted, back))
        }
        Err(refused) => Err(Box::new(refused.page(ctx, fallback))),
    }
}

/// The form of a POST about job `id`, checked, and the id.
fn posted_for(web: &Web, body: &[u8], id: &str) -> Result<(Posted, JobId), Refusal> {
    let posted = posted(web, body)?;
    let id = JobId::parse(id).map_err(|_| Refusal(StatusCode::NOT_FOUND, "no such job".into()))?;
    Ok((posted, id))
}

pub async fn abort(
    State(web): State<Arc<Web>>,
    ctx: Ctx,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let page_of = format!("/jobs/{}", super::html::url(&id));
    let (posted, id) = match posted_for(&web, &body, &id) {
        Ok(checked) => checked,
        Err(refused) => return refused.page(&ctx, &page_of),
    };
    let back = posted.back_or(&page_of);
    let rec = match JobRecord::load_job(&web.layout, &id) {
        Ok(rec) => rec,
        Err(_) => return Refusal(StatusCode::NOT_FOUND, "no such job".into()).page(&ctx, &back),
    };
    if rec.state.is_terminal() {
        // It ended between the page and the click: said, not refused.
        return done(&page_of, "ended", None);
    }
    match jobwarden_model::abort::write_marker_by(&web.layout, &id, Some("from the web page"), BY) {
        Ok(_) => {
            let what = if rec.state == jobwarden_model::job::JobState::Queued {
                "cancelled"
            } else {
                "aborted"
            };
            done(&back, what, None)
        }
        Err(e) => Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).page(&ctx, &back),
    }
}

pub async fn ack(
    State(web): State<Arc<Web>>,
    ctx: Ctx,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let (posted, id) = match posted_for(&web, &body, &id) {
        Ok(checked) => checked,
        Err(refused) => return refused.page(&ctx, "/"),
    };
    let back = posted.back_or("/");
    let Some(mut ledger) = super::pages::ledger(&web) else {
        return Refusal(StatusCode::NOT_FOUND, "nothing has run yet".into()).page(&ctx, &back);
    };
    let now = jobwarden_sys::clock::Timestamp::now().epoch_ms();
    match ledger.acknowledge(id.as_str(), now, Some(BY)) {
        Ok(_) => {
            if let Ok(rec) = JobRecord::load_job(&web.layout, &id) {
                EventLog::open(
                    web.layout.root(),
                    &web.layout.events(&id),
                    web.config().events_for(&rec),
                )
                .append(Op::Acknowledged, json!({"by": BY}));
            }
            done(&back, "acked", None)
        }
        Err(e) => Refusal(StatusCode::NOT_FOUND, e.to_string()).page(&ctx, &back),
    }
}

/// Retry an ended job, as `jobwarden retry [--now]` does; then the page
/// the form was on (the retry's event is in the job's events).
pub async fn retry(
    State(web): State<Arc<Web>>,
    ctx: Ctx,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let page_of = format!("/jobs/{}", super::html::url(&id));
    let (posted, id) = match posted_for(&web, &body, &id) {
        Ok(checked) => checked,
        Err(refused) => return refused.page(&ctx, &page_of),
    };
    let back = posted.back_or(&page_of);
    match retry_one(&web, id, posted.now()).await {
        Ok(()) => done(&back, "retried", Some(1)),
        Err(refused) => refused.page(&ctx, &back),
    }
}

/// One retry by hand, off the runtime's threads.
async fn retry_one(web: &Arc<Web>, id: JobId, now: bool) -> Result<(), Refusal> {
    let web = web.clone();
    let done = tokio::task::spawn_blocking(move || {
        let ledger = super::pages::ledger(&web);
        jobwarden_engine::retry::by_hand::retry(
            &web.layout,
            &web.config(),
            ledger.as_ref(),
            &id,
            now,
            BY,
        )
    })
    .await;
    match done {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.downcast_ref::<jobwarden_sys::error::No>().is_some() => {
            Err(Refusal(StatusCode::CONFLICT, format!("{e:#}")))
        }
        Ok(Err(e)) => Err(Refusal(StatusCode::BAD_REQUEST, format!("{e:#}"))),
        Err(e) => Err(Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

/// Retry every job a list showed failed (`ids`), as one retry each
/// (`now`: without waiting for their cooldowns).
pub async fn bulk_retry(
    State(web): State<Arc<Web>>,
    ctx: Ctx,
    body: axum::body::Bytes,
) -> Response {
    let (posted, back) = match form(&web, &ctx, &body, "/jobs") {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let ids = match Posted::bulk(posted.ids.as_deref(), ',', "retry of jobs") {
        Ok(ids) => ids,
        Err(refused) => return refused.page(&ctx, &back),
    };
    let now = posted.now();
    let mut retried = 0u64;
    let mut refusals = Vec::new();
    for raw in &ids {
        let Ok(id) = JobId::parse(raw) else {
            refusals.push(format!("{raw}: no such job"));
            continue;
        };
        match retry_one(&web, id, now).await {
            Ok(()) => retried += 1,
            Err(Refusal(_, why)) => refusals.push(format!("{raw}: {why}")),
        }
    }
    bulk_answer(&ctx, &back, ("retried", "retried"), retried, &refusals)
}

/// What a bulk action answers: its notice, or, if any item was refused,
/// a page counting what was done (`verb`) and saying why each other was
/// not.
fn bulk_answer(
    ctx: &Ctx,
    back: &str,
    (code, verb): (&str, &str),
    n: u64,
    refusals: &[String],
) -> Response {
    if refusals.is_empty() {
        done(back, code, Some(n))
    } else {
        let why = format!("{n} {verb}; not {verb}: {}", refusals.join("; "));
        Refusal(StatusCode::CONFLICT, why).page(ctx, back)
    }
}

/// Cancel every prompt a list showed waiting (`prompts`), as one cancel
/// each.
pub async fn bulk_cancel(
    State(web): State<Arc<Web>>,
    ctx: Ctx,
    body: axum::body::Bytes,
) -> Response {
    let (posted, back) = match form(&web, &ctx, &body, "/jobs") {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let labels = match Posted::bulk(posted.prompts.as_deref(), '\n', "cancel of prompts") {
        Ok(labels) => labels,
        Err(refused) => return refused.page(&ctx, &back),
    };
    let web2 = web.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let mut cancelled = 0u64;
        let mut refusals = Vec::new();
        for label in labels {
            let (project, name) = label.rsplit_once('/').unwrap_or(("", &label));
            let result = check_prompt(project, name)
                .map_err(|why| Refusal(StatusCode::BAD_REQUEST, why))
                .and_then(|prompt| cancel_waiting_now(&web2, &prompt));
            match result {
                Ok(_) => cancelled += 1,
                Err(Refusal(_, why)) => refusals.push(format!("{label}: {why}")),
            }
        }
        (cancelled, refusals)
    })
    .await;
    match outcome {
        Ok((n, refusals)) => bulk_answer(
            &ctx,
            &back,
            ("cancelled-waiting", "cancelled"),
            n,
            &refusals,
        ),
        Err(e) => Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).page(&ctx, &back),
    }
}

/// Cancel a prompt waiting in the inbox, as `jobwarden abort
/// project/name` does: claimed and ended `cancelled`, or, if the daemon
/// claimed it first, the job it became gets its ABORT marker. Then that
/// job's page.
pub async fn cancel_waiting(
    State(web): State<Arc<Web>>,
    ctx: Ctx,
    body: axum::body::Bytes,
) -> Response {
    let (posted, back) = match form(&web, &ctx, &body, "/jobs") {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let project = posted.project.clone().unwrap_or_default();
    let name = posted.name.clone().unwrap_or_default();
    let prompt = match check_prompt(&project, &name) {
        Ok(p) => p,
        Err(why) => return Refusal(StatusCode::BAD_REQUEST, why).page(&ctx, &back),
    };
    let web2 = web.clone();
    let outcome = tokio::task::spawn_blocking(move || cancel_waiting_now(&web2, &prompt)).await;
    match outcome {
        Ok(Ok(id)) => done(
            &format!("/jobs/{}", super::html::url(id.as_str())),
            "cancelled",
            None,
        ),
        Ok(Err(refused)) => refused.page(&ctx, &back),
        Err(e) => Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).page(&ctx, &back),
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
        &web.config(),
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
pub async fn submit(State(web): State<Arc<Web>>, ctx: Ctx, body: axum::body::Bytes) -> Response {
    let posted = match posted(&web, &body) {
        Ok(posted) => posted,
        Err(refused) => return refused.page(&ctx, "/submit"),
    };
    let project = posted.project.clone().unwrap_or_default();
    let name = posted.name.clone().unwrap_or_default();
    let text = posted
        .text
        .clone()
        .unwrap_or_default()
        .replace("\r\n", "\n");
    // The profile chosen goes into the prompt's front matter, beside its own.
    let set: Vec<(&str, String)> = posted
        .profile
        .clone()
        .filter(|p| !p.is_empty())
        .map(|p| ("profile", p))
        .into_iter()
        .collect();
    let prompt = match check_prompt(&project, &name) {
        Ok(p) => p,
        Err(why) => return Refusal(StatusCode::BAD_REQUEST, why).page(&ctx, "/submit"),
    };
    let config = web.config();
    let dropped = jobwarden_engine::submit::prepare(
        &config,
        &web.layout,
        prompt,
        "the prompt",
        &text,
        None,
        &set,
    )
    .and_then(|s| {
        jobwarden_engine::submit::drop_prompt(&web.layout, &s.prompt, s.text.as_bytes()).map(|_| s)
    });
    match dropped {
        Ok(s) => done(
            &format!("/jobs?project={}", super::html::url(&s.prompt.project)),
            "submitted",
            None,
        ),
        Err(e) => Refusal(StatusCode::BAD_REQUEST, format!("{e:#}")).page(&ctx, "/submit"),
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

pub async fn pause(State(web): State<Arc<Web>>, ctx: Ctx, body: axum::body::Bytes) -> Response {
    change_pause(&web, &ctx, &body, true)
}

pub async fn resume(State(web): State<Arc<Web>>, ctx: Ctx, body: axum::body::Bytes) -> Response {
    change_pause(&web, &ctx, &body, false)
}

/// A pause (`pause`) or its end, for the scope the form names, as
/// `jobwarden pause` and `resume` make them: a pause of a profile the
/// config in force does not define is refused.
fn change_pause(web: &Web, ctx: &Ctx, body: &[u8], pause: bool) -> Response {
    let (posted, back) = match form(web, ctx, body, "/") {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let scope = match scope_of(&posted) {
        Ok(s) => s,
        Err(why) => return Refusal(StatusCode::BAD_REQUEST, why.into()).page(ctx, &back),
    };
    let changed = if pause {
        if let Some(why) = jobwarden_engine::pause::pauses_nothing(&web.config(), &scope) {
            return Refusal(StatusCode::BAD_REQUEST, why).page(ctx, &back);
        }
        jobwarden_model::control::pause(&web.layout, &scope, Some("from the web page")).map(drop)
    } else {
        jobwarden_model::control::resume(&web.layout, &scope).map(drop)
    };
    match changed {
        Ok(()) => done(&back, if pause { "paused" } else { "resumed" }, None),
        Err(e) => Refusal(StatusCode::BAD_REQUEST, e.to_string()).page(ctx, &back),
    }
}
