//! A job's page: a summary (prompt, profile, attempt n of m, state and
//! why, started, how long, exit, timeout left), its actions, its stages
//! (prepare, run, publish) with their durations, its log (the tail, line
//! numbers, colours, search, the whole raw log a link away, followed live
//! while the job runs, the state with it, the stream closed at the end),
//! the attempts of its prompt, and its record and events folded below.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;

use super::Web;
use super::html::{Ctx, button, esc, page, state, url, when};
use super::pages::{duration, ledger, refused};
use jobwarden_ledger::Ledger;
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_sys::clock::Timestamp;

pub async fn job(State(web): State<Arc<Web>>, ctx: Ctx, Path(id): Path<String>) -> Response {
    let not_found = |ctx: &Ctx| {
        refused(
            ctx,
            StatusCode::NOT_FOUND,
            "no such job here: it never was, or retention removed it",
            "/jobs",
        )
    };
    let Ok(id) = JobId::parse(&id) else {
        return not_found(&ctx);
    };
    let rec = match JobRecord::load_job(&web.layout, &id) {
        Ok(rec) => rec,
        Err(_) if std::fs::symlink_metadata(web.layout.run_dir(&id)).is_err() => {
            return not_found(&ctx);
        }
        Err(_) => {
            let body = format!(
                "<h1>Job <code>{}</code></h1><p class=\"refusal\">its record cannot be read now \
                 (being rewritten, or damaged: the daemon repairs it); reload in a moment</p>",
                esc(id.as_str())
            );
            return Html(page(&ctx, &format!("job {}", id.as_str()), &body)).into_response();
        }
    };
    let ledger = ledger(&web);
    let events = jobwarden_model::events::read_all(web.layout.root(), &web.layout.events(&id))
        .unwrap_or_default();
    let mut body = format!(
        "<h1>{} <span class=\"muted\">· job <code>{}</code></span></h1>",
        esc(&rec.prompt_name().to_string()),
        esc(&jobwarden_ledger::short_id(id.as_str()))
    );
    body.push_str(&summary(&web, &rec));
    body.push_str(&actions(&ctx, &rec, ledger.as_ref()));
    body.push_str(&stages(&rec, &events));
    body.push_str(&log(&web, &rec));
    if let Some(ledger) = &ledger {
        body.push_str(&attempts(ledger, &rec));
    }
    let json = serde_json::to_string_pretty(&rec).unwrap_or_default();
    body.push_str(&format!(
        "<details><summary>Record (job.json)</summary><pre>{}</pre></details>",
        esc(&json)
    ));
    body.push_str(&events_table(&events));
    Html(page(&ctx, &format!("job {}", id.as_str()), &body)).into_response()
}

/// What the job is and how it stands.
fn summary(web: &Web, rec: &JobRecord) -> String {
    let config = web.config();
    let max = rec.overrides.max_attempts.or_else(|| {
        rec.profile
            .as_deref()
            .and_then(|p| config.profiles.get(p))
            .map(|p| p.max_attempts)
    });
    let attempt = match max {
        Some(m) => format!("{} of {m}", rec.attempt),
        None => rec.attempt.to_string(),
    };
    let reason = rec
        .state_reason
        .as_deref()
        .map(|r| format!(": {}", esc(r)))
        .unwrap_or_default();
    let mut facts = vec![
        (
            "state",
            format!(
                "<span id=\"state\">{}</span>{reason}",
                state(rec.state.as_str())
            ),
        ),
        ("profile", esc(rec.profile.as_deref().unwrap_or("—"))),
        ("attempt", attempt),
        ("claimed", when(rec.created_at.epoch_ms())),
    ];
    if !rec.after.is_empty() {
        let deps: Vec<String> = rec
            .after
            .iter()
            .map(|dep| {
                let how = JobRecord::load_job(&web.layout, dep)
                    .map(|d| {
                        let prompt = esc(&d.prompt_name().to_string());
                        format!(" ({prompt}, {})", state(d.state.as_str()))
                    })
                    .unwrap_or_default();
                let (id, short) = (
                    url(dep.as_str()),
                    esc(&jobwarden_ledger::short_id(dep.as_str())),
                );
                format!("<a href=\"/jobs/{id}\">{short}</a>{how}")
            })
            .collect();
        facts.push(("after", deps.join(", ")));
    }
    if let (Some(at), JobState::Queued) = (rec.not_before, rec.state) {
        facts.push(("not before", when(at.epoch_ms())));
    }
    if let Some(started) = rec.started_at {
        facts.push(("started", when(started.epoch_ms())));
        let end = rec.finished_at.unwrap_or_else(Timestamp::now);
        let took = duration(end.epoch_ms().saturating_sub(started.epoch_ms()));
        let label = if rec.finished_at.is_some() {
            "took"
        } else {
            "running for"
        };
        facts.push((label, took));
    }
    if let Some(finished) = rec.finished_at {
        facts.push(("ended", when(finished.epoch_ms())));
    }
    if let Some(code) = rec.exit_code {
        let signal = rec
            .signal
            .as_deref()
            .map(|s| format!(" ({})", esc(s)))
            .unwrap_or_default();
        facts.push(("exit", format!("{code}{signal}")));
    }
    if let (Some(at), false) = (rec.timeout_at, rec.state.is_terminal()) {
        facts.push(("timeout", when(at.epoch_ms())));
    }
    if let Some(r) = &rec.result_ref {
        facts.push(("result", esc(r)));
    }
    let items: String = facts
        .iter()
        .map(|(k, v)| format!("<dt>{k}</dt><dd>{v}</dd>"))
        .collect();
    format!("<dl class=\"facts\">{items}</dl>")
}

/// The buttons that apply to the job as it stands.
fn actions(ctx: &Ctx, rec: &JobRecord, ledger: Option<&Ledger>) -> String {
    let to = |what: &str| format!("/jobs/{}/{what}", url(rec.job_id.as_str()));
    let mut out = String::from("<div class=\"actions\">");
    if rec.state == JobState::Queued {
        out.push_str(&format!(
            "<div class=\"inline\" data-while-live>{}</div>",
            button(ctx, &to("abort"), "cancel", &[])
        ));
    } else if !rec.state.is_terminal() {
        out.push_str(&format!(
            "<div class=\"inline\" data-while-live>{}</div>",
            button(ctx, &to("abort"), "abort", &[])
        ));
    } else {
        out.push_str(&button(ctx, &to("retry"), "retry", &[]));
        out.push_str(&button(ctx, &to("retry"), "retry now", &[("now", "1")]));
    }
    let needs_ack = ledger
        .and_then(|l| l.prompts_needing_attention(1000).ok())
        .is_some_and(|list| list.iter().any(|a| a.job_id == rec.job_id.as_str()));
    if needs_ack {
        out.push_str(&button(ctx, &to("ack"), "ack", &[]));
    }
    out.push_str("</div>");
    out
}

/// The job's stages as its events tell them, each with how long it took.
fn stages(rec: &JobRecord, events: &[Value]) -> String {
    let at = |op: &str| {
        events
            .iter()
            .find(|e| e["op"] == op)
            .and_then(|e| e["ts"].as_str())
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map(Timestamp::epoch_ms)
    };
    let end = rec.finished_at.map(Timestamp::epoch_ms);
    let now = Timestamp::now().epoch_ms();
    let (prepare, run, publish) = (at("prepare_started"), at("started"), at("publish_started"));
    let mut rows = Vec::new();
    let mut stage = |name: &str, from: Option<u64>, to: Option<u64>| {
        if let Some(from) = from {
            let (took, open) = match to {
                Some(to) => (duration(to.saturating_sub(from)), ""),
                None => (duration(now.saturating_sub(from)), " so far"),
            };
            rows.push(format!(
                "<tr><td data-label=\"stage\">{name}</td><td data-label=\"began\">{}</td><td data-label=\"took\" class=\"num\">{took}{open}</td></tr>",
                when(from)
            ));
        }
    };
    stage("prepare", prepare, run.or(end));
    stage("run", run, publish.or(end));
    stage("publish", publish, end);
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "<h2>Stages</h2><table class=\"rows\" id=\"stages\"><thead><tr><th>stage</th><th>began</th><th>took</th></tr></thead><tbody>{}</tbody></table>",
        rows.concat()
    )
}

/// The log's tail, followed while the job runs.
fn log(web: &Web, rec: &JobRecord) -> String {
    let live = !rec.state.is_terminal();
    let tail = super::logs::tail(web, &rec.job_id, super::logs::SHOWN, live);
    let (html, next) = super::ansi::lines(&tail.text, tail.first_line);
    let raw = format!("/jobs/{}/log", url(rec.job_id.as_str()));
    let cut = if tail.skipped > 0 {
        format!(
            "<p class=\"notice\" id=\"log-cut\">the log is {} long: its first {} lines ({}) are not shown here; \
             <a href=\"{raw}\">the whole log</a></p>",
            bytes(tail.end.max(tail.skipped)),
            tail.first_line - 1,
            bytes(tail.skipped)
        )
    } else {
        String::new()
    };
    let follow = if live {
        format!(
            " data-follow=\"/live/jobs/{}/log?from={}&amp;line={next}&amp;state={}\"",
            url(rec.job_id.as_str()),
            tail.end,
            url(rec.state.as_str())
        )
    } else {
        String::new()
    };
    format!(
        "<h2>Log</h2><div class=\"logbar\"><label>search the log <input id=\"log-search\" type=\"search\"></label>\
         <a href=\"{raw}\">whole log (raw)</a></div>{cut}<pre class=\"log\" id=\"log\"{follow}>{html}</pre>"
    )
}

fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} bytes"),
        1024..1_048_576 => format!("{:.0} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
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
    out.push_str(
        "<table class=\"rows\" id=\"attempts\"><thead><tr><th>attempt</th><th>execution</th><th>outcome</th>\
         <th>ended</th><th>why</th></tr></thead><tbody>",
    );
    for e in rows {
        out.push_str(&format!(
            "<tr><td data-label=\"attempt\" class=\"num\">{}</td><td data-label=\"execution\"><a href=\"/jobs/{}\">{}</a></td>\
             <td data-label=\"outcome\">{}</td><td data-label=\"ended\">{}</td><td data-label=\"why\">{}</td></tr>",
            e.attempt,
            url(&e.id),
            esc(&jobwarden_ledger::short_id(&e.id)),
            esc(e.outcome.as_str()),
            when(e.finished_at),
            esc(e.error_message.as_deref().unwrap_or(""))
        ));
    }
    out.push_str("</tbody></table>");
    out
}

/// The job's events, newest first, folded.
fn events_table(events: &[Value]) -> String {
    let mut out = format!(
        "<details id=\"events\"><summary>Events ({})</summary><table class=\"rows\"><thead><tr><th>#</th><th>when</th>\
         <th>what</th><th>details</th></tr></thead><tbody>",
        events.len()
    );
    for e in events.iter().rev().take(500) {
        let at = e["ts"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map(|t| when(t.epoch_ms()))
            .unwrap_or_default();
        let mut rest = e.clone();
        if let Some(obj) = rest.as_object_mut() {
            for k in ["seq", "op", "ts"] {
                obj.remove(k);
            }
        }
        let details: Vec<String> = rest
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => format!("{k}: {s}"),
                        other => format!("{k}: {other}"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "<tr><td data-label=\"#\" class=\"num\">{}</td><td data-label=\"when\">{at}</td><td data-label=\"what\">{}</td>\
             <td data-label=\"details\">{}</td></tr>",
            esc(&e["seq"].to_string()),
            esc(e["op"].as_str().unwrap_or("")),
            esc(&details.join(" · "))
        ));
    }
    out.push_str("</tbody></table></details>");
    out
}
