//! The pages beside the overview (`overview.rs`), a job's (`job_page.rs`)
//! and the list (`list.rs`): the submit form, history, `/metrics`, and
//! what every page shares (the ledger, whether a daemon runs, the page
//! for a request refused or a thing not found).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::Web;
use super::charts::Range;
use super::html::{Ctx, esc, page, prompt, url, when};
use jobwarden_ledger::{JobFilter, Ledger};
use jobwarden_sys::clock::Timestamp;

/// The ledger, if the root has one (never created by the page).
pub(super) fn ledger(web: &Web) -> Option<Ledger> {
    let path = web.layout.ledger();
    std::fs::symlink_metadata(&path)
        .is_ok()
        .then(|| Ledger::open(&path).ok())
        .flatten()
}

/// The ledger a live stream keeps between its looks: opened at its first,
/// and again only when the file at the ledger's path is another one (a
/// `history repair` moved the damaged one aside) or could not be opened
/// the last time. Each look then costs its queries, not an open.
#[derive(Default)]
pub(super) struct HeldLedger {
    held: Option<(Ledger, (u64, u64))>,
}

impl HeldLedger {
    /// The root's ledger as it is now, if it has one.
    pub(super) fn current(&mut self, web: &Web) -> Option<&Ledger> {
        use std::os::unix::fs::MetadataExt;
        let path = web.layout.ledger();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            self.held = None;
            return None;
        };
        let file = (meta.dev(), meta.ino());
        if self.held.as_ref().is_none_or(|(_, was)| *was != file) {
            self.held = Ledger::open(&path).ok().map(|l| (l, file));
        }
        self.held.as_ref().map(|(ledger, _)| ledger)
    }
}

/// Does a daemon hold the root's lock? Not when that cannot be told.
pub(super) fn daemon_running(web: &Web) -> bool {
    jobwarden_engine::cancel::daemon_running(&web.layout) == Some(true)
}

/// A page saying why a request was refused, or what was not found, with
/// the way back: `status`, the sentence, where to go.
pub(super) fn refused(ctx: &Ctx, status: StatusCode, why: &str, back: &str) -> Response {
    let title = status
        .canonical_reason()
        .unwrap_or("refused")
        .to_lowercase();
    let body = format!(
        "<h1>{}</h1><p class=\"refusal\" role=\"alert\">{}</p><p><a href=\"{}\">back</a></p>",
        esc(&title),
        esc(why),
        esc(super::html::local_target(back))
    );
    (status, Html(page(ctx, &title, &body))).into_response()
}

/// Any address the page does not serve.
pub async fn not_found(ctx: Ctx) -> Response {
    refused(&ctx, StatusCode::NOT_FOUND, "this page does not exist", "/")
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

pub async fn submit_form(State(web): State<Arc<Web>>, ctx: Ctx) -> Html<String> {
    let profiles: String = web
        .config()
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
         <p><label for=\"text\">prompt</label><br><textarea id=\"text\" name=\"text\" rows=\"10\" class=\"wide\" required placeholder=\"What the job should do\"></textarea></p>\
         <p><button type=\"submit\">submit</button></p></form>",
        csrf = esc(&ctx.csrf),
    );
    Html(page(&ctx, "submit", &body))
}

/// `/history?path=&range=`.
#[derive(Debug, Default, Deserialize)]
pub struct HistoryQuery {
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub range: Option<String>,
}

/// Links to the ranges a chart can cover, the one shown marked.
pub(super) fn range_links(base: &str, shown: Range) -> String {
    let links: Vec<String> = super::charts::RANGES
        .iter()
        .map(|r| {
            if *r == shown {
                format!("<b aria-current=\"true\">{}</b>", r.name)
            } else {
                format!("<a href=\"{base}range={}\">{}</a>", r.name, r.name)
            }
        })
        .collect();
    format!("<p class=\"ranges\">range: {}</p>", links.join(" · "))
}

pub async fn history(
    State(web): State<Arc<Web>>,
    ctx: Ctx,
    Query(q): Query<HistoryQuery>,
) -> Html<String> {
    let Some(ledger) = ledger(&web) else {
        return Html(page(
            &ctx,
            "history",
            "<h1>History</h1><p class=\"muted\">nothing has run yet</p>",
        ));
    };
    let range = Range::named(q.range.as_deref());
    let now = Timestamp::now().epoch_ms();
    let within = jobwarden_ledger::history::Filter {
        since_ms: Some(now.saturating_sub(range.ms)),
        ..Default::default()
    };
    let recent = ledger.list(&within, 20_000).unwrap_or_default();
    let window = JobFilter {
        since_ms: Some(now.saturating_sub(range.ms + 86_400_000)),
        ..JobFilter::default()
    };
    let jobs = ledger.list_jobs(&window, 20_000).unwrap_or_default();
    let mut body = String::from("<h1>History</h1>");
    body.push_str(&range_links("/history?", range));
    body.push_str(&super::charts::per_hour(&recent, now, range));
    body.push_str(&super::charts::durations(&recent));
    body.push_str(&super::charts::queue(&jobs, now, range));
    body.push_str(&format!(
        "<h2>Who touched a file</h2><form method=\"get\" action=\"/history\">\
         <label>path <input name=\"path\" type=\"search\" size=\"40\" placeholder=\"/srv/repos/api/src/lib.rs\" value=\"{}\"></label> <button>look up</button></form>",
        esc(q.path.as_deref().unwrap_or(""))
    ));
    if let Some(path) = q.path.as_deref().filter(|p| !p.is_empty()) {
        let touches = ledger.touching(path).unwrap_or_default();
        if touches.is_empty() {
            body.push_str("<p class=\"muted\">no execution touched it</p>");
        } else {
            body.push_str("<table class=\"rows\"><thead><tr><th>execution</th><th>prompt</th><th>outcome</th><th>how</th></tr></thead><tbody>");
            for t in touches.iter().take(200) {
                let how: Vec<String> = t
                    .paths
                    .iter()
                    .map(|p| format!("{} {}", p.relation, p.path))
                    .collect();
                body.push_str(&format!(
                    "<tr><td data-label=\"execution\"><a href=\"/jobs/{}\">{}</a></td><td data-label=\"prompt\">{}</td>\
                     <td data-label=\"outcome\">{}</td><td data-label=\"how\">{}</td></tr>",
                    url(&t.execution.id),
                    esc(&jobwarden_ledger::short_id(&t.execution.id)),
                    prompt(&t.execution.project, &t.execution.name),
                    esc(t.execution.outcome.as_str()),
                    esc(&how.join(", "))
                ));
            }
            body.push_str("</tbody></table>");
        }
    }
    body.push_str("<h2>Latest executions</h2><table class=\"rows\"><thead><tr><th>execution</th><th>prompt</th><th>outcome</th><th>ended</th><th>duration</th></tr></thead><tbody>");
    for e in recent.iter().take(50) {
        body.push_str(&format!(
            "<tr><td data-label=\"execution\"><a href=\"/jobs/{}\">{}</a></td><td data-label=\"prompt\">{}</td>\
             <td data-label=\"outcome\">{}</td><td data-label=\"ended\">{}</td><td data-label=\"duration\" class=\"num\">{}</td></tr>",
            url(&e.id),
            esc(&jobwarden_ledger::short_id(&e.id)),
            prompt(&e.project, &e.name),
            esc(e.outcome.as_str()),
            when(e.finished_at),
            e.duration_ms.map(duration).unwrap_or_default()
        ));
    }
    body.push_str("</tbody></table>");
    Html(page(&ctx, "history", &body))
}

/// A duration as people read it: `850 ms`, `12.4 s`, `3m05s`, `2h10m`.
pub(super) fn duration(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms} ms"),
        1000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_400), "12.4 s");
        assert_eq!(duration(185_000), "3m05s");
        assert_eq!(duration(7_800_000), "2h10m");
    }
}
