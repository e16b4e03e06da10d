//! Notifications: the `[[notify]]` hooks told what happened. The daemon
//! hands a [`Notice`] to the [`Hub`] and goes on; each hook that wants it
//! gets it on a task of its own: a command (the notice as JSON on its
//! stdin, killed with its process group at the hook's timeout) or a
//! webhook (an HTTP POST of the same JSON, abandoned at the timeout). A
//! failed delivery is tried again with backoff (1 s, 2 s, 4 s, … at most
//! 60 s), `retries` times at most, then given up. Every delivery and every
//! failure is recorded: a `notified` or `notify_failed` event in the job's
//! `events.jsonl`, or the daemon's log for what concerns no one job
//! (`all_done`). Nothing here is ever waited for by a claim or a job.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use jobwarden_model::config::Vars;
use jobwarden_model::config::notify::{Delivery, Hook};
use jobwarden_model::events::{EventLog, Op};
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;

/// Deliveries under way or waiting for a retry, at most; a notice beyond
/// is dropped (counted, and said in the log).
const MAX_PENDING: usize = 1000;

/// Longest answer (stderr, a response body) kept in an error message.
const MAX_SAID: usize = 300;

/// What happened, as a hook is told it.
#[derive(Debug, Clone)]
pub struct Notice {
    /// A terminal state's name, `needs_attention`, `retrying`, `cooldown`,
    /// `all_done`, or `test`.
    pub event: String,
    /// The job it is about, whose events record its deliveries.
    pub job: Option<JobId>,
    /// The JSON body (docs/notify.md), without `hook`.
    pub body: Value,
    /// The command's placeholders.
    pub vars: Vars,
}

impl Notice {
    /// `event` about the ended job `rec` (its state, `needs_attention`,
    /// `cooldown` with the time it ends).
    pub fn of_job(event: &str, rec: &JobRecord, layout: &Layout, extra: Value) -> Notice {
        let duration = rec
            .started_at
            .zip(rec.finished_at)
            .map(|(s, f)| f.epoch_ms().saturating_sub(s.epoch_ms()));
        let mut job = json!({
            "id": rec.job_id,
            "project": rec.project,
            "name": rec.name,
            "attempt": rec.attempt,
            "profile": rec.profile,
            "state": rec.state,
            "state_reason": rec.state_reason,
            "outcome": rec.outcome,
            "exit_code": rec.exit_code,
            "signal": rec.signal,
            "started_at": rec.started_at,
            "finished_at": rec.finished_at,
            "duration_ms": duration,
            "result_ref": rec.result_ref,
            "merge_commit": rec.merge_commit,
            "log_path": layout.job_log(&rec.job_id),
        });
        if let (Some(obj), Value::Object(more)) = (job.as_object_mut(), extra) {
            obj.extend(more);
        }
        let vars = jobwarden_model::config::vars([
            ("event", event.to_owned()),
            ("job_id", rec.job_id.to_string()),
            ("project", rec.project.clone()),
            ("name", rec.name.clone()),
            ("attempt", rec.attempt.to_string()),
            ("state", rec.state.to_string()),
            ("reason", rec.state_reason.clone().unwrap_or_default()),
            ("root", layout.root().display().to_string()),
            ("run_dir", layout.run_dir(&rec.job_id).display().to_string()),
        ]);
        Notice {
            event: event.to_owned(),
            job: Some(rec.job_id.clone()),
            body: body(event, Some(job), None),
            vars,
        }
    }

    /// Everything is done: the batch's completion summary.
    pub fn all_done(summary: Value, layout: &Layout) -> Notice {
        Self::about_no_job("all_done", Some(summary), layout)
    }

    /// `jobwarden notify test`: a notice about nothing.
    pub fn test(layout: &Layout) -> Notice {
        Self::about_no_job("test", None, layout)
    }

    fn about_no_job(event: &str, summary: Option<Value>, layout: &Layout) -> Notice {
        let mut vars: Vars = jobwarden_model::config::notify::NOTIFY_VARS
            .iter()
            .map(|v| ((*v).to_owned(), String::new()))
            .collect();
        vars.insert("event".into(), event.to_owned());
        vars.insert("root".into(), layout.root().display().to_string());
        Notice {
            event: event.to_owned(),
            job: None,
            body: body(event, None, summary),
            vars,
        }
    }
}

fn body(event: &str, job: Option<Value>, summary: Option<Value>) -> Value {
    json!({
        "event": event,
        "at": Timestamp::now(),
        "host": jobwarden_sys::host::hostname(),
        "job": job,
        "summary": summary,
    })
}

/// How a delivery went, after its retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub attempts: u32,
    /// The last attempt's error; `None` when it was delivered.
    pub error: Option<String>,
    pub elapsed_ms: u64,
}

/// One attempt to deliver `notice` by `hook`.
pub async fn deliver_once(
    hook: &Hook,
    notice: &Notice,
    client: &reqwest::Client,
) -> Result<(), String> {
    let mut body = notice.body.clone();
    if let Some(obj) = body.as_object_mut() {
        obj.insert("hook".into(), json!(hook.name));
    }
    let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    match &hook.delivery {
        Delivery::Command(argv) => {
            let argv: Vec<String> = argv.iter().map(|t| t.render(&notice.vars)).collect();
            run_command(&argv, &bytes, hook.timeout).await
        }
        Delivery::Webhook { url, token_file } => {
            let token = match token_file {
                Some(path) => Some(read_token(path)?),
                None => None,
            };
            post(client, url, token.as_deref(), bytes, hook.timeout).await
        }
    }
}

/// Deliver with the hook's retries and backoff.
pub async fn deliver(hook: &Hook, notice: &Notice, client: &reqwest::Client) -> Delivered {
    let start = Instant::now();
    let mut backoff = Duration::from_secs(1);
    let mut attempts = 0;
    loop {
        attempts += 1;
        match deliver_once(hook, notice, client).await {
            Ok(()) => {
                return Delivered {
                    attempts,
                    error: None,
                    elapsed_ms: start.elapsed().as_millis() as u64,
                };
            }
            Err(e) if attempts > hook.retries => {
                return Delivered {
                    attempts,
                    error: Some(e),
                    elapsed_ms: start.elapsed().as_millis() as u64,
                };
            }
            Err(e) => {
                tracing::debug!(hook = %hook.name, event = %notice.event, attempts, "delivery failed, tried again in {backoff:?}: {e}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
        }
    }
}

/// The bearer token in `path`: its first line, trimmed.
fn read_token(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(4096).read_to_string(&mut text))
        .map_err(|e| format!("reading the bearer token file {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or_default().trim().to_owned();
    if token.is_empty() {
        return Err(format!("the bearer token file {} is empty", path.display()));
    }
    Ok(token)
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), String> {
    let mut req = client
        .post(url)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(
            reqwest::header::USER_AGENT,
            concat!("jobwarden/", env!("CARGO_PKG_VERSION")),
        )
        .body(body);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.map_err(|e| {
        if e.is_timeout() {
            format!("POST {url}: no answer within {timeout:?}")
        } else {
            format!("POST {url}: {}", error_chain(&e))
        }
    })?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let said = tokio::time::timeout(Duration::from_secs(2), resp.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    Err(format!("POST {url}: {status}{}", shown_tail(&said)))
}

/// An error with its causes (`error sending request: connection refused`).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// `: <what it said>`, one line, capped; empty when it said nothing.
fn shown_tail(said: &str) -> String {
    let text: String = said
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_SAID)
        .collect();
    if text.is_empty() {
        text
    } else {
        format!(": {text}")
    }
}

/// Run `argv` with `input` on its stdin, in a process group of its own
/// killed whole at `timeout`.
async fn run_command(argv: &[String], input: &[u8], timeout: Duration) -> Result<(), String> {
    use tokio::io::AsyncWriteExt;
    let shown = argv.first().cloned().unwrap_or_default();
    let mut cmd = tokio::process::Command::new(&shown);
    cmd.args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {shown}: {e}"))?;
    // Killed whole at the timeout, and if the delivery is dropped (a
    // daemon shutting down).
    let group = jobwarden_sys::procfs::GroupGuard::new(child.id());
    let mut stdin = child.stdin.take();
    let run = async {
        if let Some(stdin) = stdin.as_mut() {
            // A command that does not read its stdin is not at fault.
            let _ = stdin.write_all(input).await;
        }
        drop(stdin);
        child.wait_with_output().await
    };
    let waited = tokio::time::timeout(timeout, run).await;
    if waited.is_ok() {
        group.done();
    }
    match waited {
        Err(_) => Err(format!("{shown}: still running after {timeout:?}; killed")),
        Ok(Err(e)) => Err(format!("{shown}: {e}")),
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => Err(format!(
            "{shown}: {}{}",
            out.status,
            shown_tail(&String::from_utf8_lossy(&out.stderr))
        )),
    }
}

/// The daemon's side: notices handed over, delivered on tasks of their
/// own, recorded when done.
#[derive(Clone)]
pub struct Hub {
    layout: Layout,
    hooks: Arc<Vec<Hook>>,
    /// Whether jobs' events are written (the config's `events`).
    events: bool,
    /// Made at the first delivery: a daemon without hooks never maps the
    /// HTTP client's code or loads its certificates.
    client: Arc<OnceLock<reqwest::Client>>,
    pending: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
}

impl Hub {
    pub fn new(layout: Layout, hooks: Vec<Hook>, events: bool) -> Hub {
        Hub {
            layout,
            hooks: Arc::new(hooks),
            events,
            client: Arc::new(OnceLock::new()),
            pending: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The hooks of a config reloaded: for notices from now on.
    pub fn set_hooks(&mut self, hooks: Vec<Hook>, events: bool) {
        self.hooks = Arc::new(hooks);
        self.events = events;
    }

    /// Is any hook told of `event`? (Saves building a notice nobody wants.)
    pub fn wants(&self, event: &str) -> bool {
        self.hooks.iter().any(|h| h.wants(event))
    }

    /// Notices dropped because too many deliveries were pending.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Hand `notice` to every hook that wants it; returns at once.
    pub fn send(&self, notice: Notice) {
        let notice = Arc::new(notice);
        for hook in self.hooks.iter().filter(|h| h.wants(&notice.event)) {
            if self.pending.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(hook = %hook.name, event = %notice.event, dropped = n, "notification dropped: {MAX_PENDING} deliveries are already pending");
                continue;
            }
            let (hub, hook, notice) = (self.clone(), hook.clone(), notice.clone());
            tokio::spawn(async move {
                let done = deliver(&hook, &notice, hub.client.get_or_init(client)).await;
                hub.record(&hook, &notice, &done);
                hub.pending.fetch_sub(1, Ordering::AcqRel);
            });
        }
    }

    /// Say how a delivery went: in the job's events, else in the log.
    fn record(&self, hook: &Hook, notice: &Notice, done: &Delivered) {
        let fields = json!({
            "hook": hook.name,
            "event": notice.event,
            "attempts": done.attempts,
            "elapsed_ms": done.elapsed_ms,
            "error": done.error,
        });
        match (&done.error, &notice.job) {
            (None, _) => {
                tracing::info!(hook = %hook.name, event = %notice.event, job = ?notice.job.as_ref().map(JobId::as_str), attempts = done.attempts, "notified")
            }
            (Some(e), _) => {
                tracing::warn!(hook = %hook.name, event = %notice.event, job = ?notice.job.as_ref().map(JobId::as_str), attempts = done.attempts, "notification failed: {e}")
            }
        }
        if let Some(id) = &notice.job {
            let op = if done.error.is_none() {
                Op::Notified
            } else {
                Op::NotifyFailed
            };
            EventLog::open(self.layout.root(), &self.layout.events(id), self.events)
                .append(op, fields);
        }
    }
}

/// The HTTP client of every webhook: no redirects followed (a hook is
/// told at the address the operator wrote), no proxy from the
/// environment.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}
