//! Server-sent events: the job list's rows as they change, and a job's log
//! as it grows with its state as it changes.
//!
//! - `/live/jobs?…` (the list's own query): a JSON array of `[key, html]`
//!   rows, sent whenever any row differs from the last sent; the page
//!   replaces only the rows that changed.
//! - `/live/jobs/{id}/log?from=&line=&state=`: the log's new lines from
//!   byte `from` as HTML (numbered from `line`, see `ansi.rs`); an event
//!   `state` (`{"html", "terminal"}`) whenever the job's state differs from
//!   `state`; after a terminal one, what is left of the log, and the stream
//!   ends.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Deserialize;

use super::Web;
use super::html::Ctx;
use super::list::{JobsQuery, job_rows, keyed};
use super::pages::HeldLedger;
use jobwarden_ledger::Ledger;
use jobwarden_model::job::{JobId, JobRecord};

/// How often a stream looks again.
const EVERY: Duration = Duration::from_millis(500);
/// The most of a log one event carries.
const CHUNK: u64 = 256 << 10;

/// A stream of keyed rows: `rows` made again every [`EVERY`] from the
/// ledger the stream holds, sent when they differ from the last sent.
fn keyed_stream<F>(web: Arc<Web>, rows: F) -> Sse<impl Stream<Item = Result<Event, Infallible>>>
where
    F: Fn(&Web, Option<&Ledger>) -> Vec<(String, String)> + Send + Sync + 'static,
{
    let rows = Arc::new(rows);
    let start = (web, String::new(), HeldLedger::default());
    let stream = stream::unfold(start, move |(web, mut sent, mut held)| {
        let rows = rows.clone();
        async move {
            loop {
                let made = rows(&web, held.current(&web));
                let json = serde_json::to_string(&made).unwrap_or_default();
                if json != sent {
                    sent = json.clone();
                    return Some((Ok(Event::default().data(json)), (web, sent, held)));
                }
                tokio::time::sleep(EVERY).await;
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

pub async fn jobs(
    State(web): State<Arc<Web>>,
    Query(q): Query<JobsQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // The rows' forms come back to the list the stream serves.
    let here = format!("/jobs?{}", q.params(q.page()));
    keyed_stream(web, move |web, ledger| {
        let ctx = Ctx::for_stream(web, &here);
        keyed(ledger, &job_rows(web, ledger, &ctx, &q))
    })
}

/// The overview's tables, each a stream of its rows.
type Rows = fn(&Web, &Ctx, Option<&jobwarden_ledger::Ledger>) -> Vec<(String, String)>;

/// The overview's table `rows`, whose forms come back to the overview.
fn overview_stream(
    web: Arc<Web>,
    rows: Rows,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    keyed_stream(web, move |web, ledger| {
        let ctx = Ctx::for_stream(web, "/");
        rows(web, &ctx, ledger)
    })
}

pub async fn health(
    State(web): State<Arc<Web>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    overview_stream(web, super::overview::health_rows)
}

pub async fn running(
    State(web): State<Arc<Web>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    overview_stream(web, super::overview::running_rows)
}

pub async fn queue(
    State(web): State<Arc<Web>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    overview_stream(web, super::overview::queue_rows)
}

pub async fn attention(
    State(web): State<Arc<Web>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    overview_stream(web, super::overview::attention_rows)
}

#[derive(Debug, Deserialize)]
pub struct LogQuery {
    /// The byte the page has the log up to.
    #[serde(default)]
    from: u64,
    /// The number of the next line.
    #[serde(default = "first_line")]
    line: u64,
    /// The state the page shows.
    #[serde(default)]
    state: String,
}

fn first_line() -> u64 {
    1
}

/// Where a log stream is.
struct Follow {
    web: Arc<Web>,
    id: JobId,
    at: u64,
    line: u64,
    /// The end of a line not yet ended.
    partial: Vec<u8>,
    state: String,
    /// The terminal state was sent: the log's rest, then the end.
    ended: bool,
}

pub async fn log(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let follow = JobId::parse(&id).ok().map(|id| Follow {
        web,
        id,
        at: q.from,
        line: q.line.max(1),
        partial: Vec::new(),
        state: q.state,
        ended: false,
    });
    let stream = stream::unfold(follow, |follow| async move {
        let mut f = follow?;
        loop {
            if let Some(event) = f.next_lines(f.ended) {
                return Some((Ok(event), Some(f)));
            }
            if f.ended {
                return None;
            }
            if let Some(event) = f.state_change() {
                return Some((Ok(event), Some(f)));
            }
            tokio::time::sleep(EVERY).await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

impl Follow {
    /// The log's new whole lines (every line, `all`: the job ended), as
    /// an event; `None` when there are none.
    fn next_lines(&mut self, all: bool) -> Option<Event> {
        let (chunk, len) = read_from(&self.web, &self.web.layout.job_log(&self.id), self.at);
        if len < self.at {
            // Replaced or truncated: from its start.
            self.at = 0;
            self.partial.clear();
            return None;
        }
        self.at += chunk.len() as u64;
        self.partial.extend_from_slice(&chunk);
        let cut = if all {
            self.partial.len()
        } else {
            self.partial.iter().rposition(|b| *b == b'\n')? + 1
        };
        if cut == 0 {
            return None;
        }
        let whole: Vec<u8> = self.partial.drain(..cut).collect();
        let (html, next) = super::ansi::lines(&String::from_utf8_lossy(&whole), self.line);
        self.line = next;
        Some(Event::default().data(html))
    }

    /// The job's state, when it differs from the one last shown.
    fn state_change(&mut self) -> Option<Event> {
        let rec = JobRecord::load_job(&self.web.layout, &self.id).ok()?;
        let now = rec.state.as_str();
        if now == self.state {
            return None;
        }
        self.state = now.to_owned();
        self.ended = rec.state.is_terminal();
        let data = serde_json::json!({
            "html": super::html::state(now),
            "terminal": self.ended,
        });
        Some(Event::default().event("state").data(data.to_string()))
    }
}

/// The log's bytes from `at` (at most [`CHUNK`]), and its length.
fn read_from(web: &Web, path: &std::path::Path, at: u64) -> (Vec<u8>, u64) {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = jobwarden_sys::fsio::open_file(web.layout.root(), path) else {
        return (Vec::new(), at);
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len <= at {
        return (Vec::new(), len);
    }
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(at)).is_ok() {
        let _ = f.take(CHUNK).read_to_end(&mut buf);
    }
    (buf, len)
}
