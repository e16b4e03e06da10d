//! Server-sent events: the job list's rows as they change (sent whole,
//! already escaped, when they differ from the last sent), and a job's log
//! as it grows (its new lines, as text the page appends).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Deserialize;

use super::Web;
use super::list::{JobsQuery, job_rows};
use jobwarden_model::job::JobId;

/// How often a stream looks again.
const EVERY: Duration = Duration::from_millis(500);

pub async fn jobs(
    State(web): State<Arc<Web>>,
    Query(q): Query<JobsQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let sent = String::new();
    let stream = stream::unfold((web, q, sent), |(web, q, mut sent)| async move {
        loop {
            let rows = job_rows(&web, &q);
            if rows != sent {
                sent = rows.clone();
                return Some((Ok(Event::default().data(rows)), (web, q, sent)));
            }
            tokio::time::sleep(EVERY).await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(Debug, Deserialize)]
pub struct LogQuery {
    /// The byte the page has the log up to.
    #[serde(default)]
    from: u64,
}

pub async fn log(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let id = JobId::parse(&id).ok();
    let stream = stream::unfold(
        (web, id, q.from, String::new()),
        |(web, id, mut at, mut partial)| async move {
            let id = id?;
            loop {
                let path = web.layout.job_log(&id);
                let (chunk, len) = read_from(&web, &path, at);
                if len < at {
                    // Replaced or truncated: from its start.
                    at = 0;
                    continue;
                }
                at += chunk.len() as u64;
                partial.push_str(&String::from_utf8_lossy(&chunk));
                if let Some(cut) = partial.rfind('\n') {
                    let lines: String = partial[..cut].to_owned();
                    partial = partial[cut + 1..].to_owned();
                    // One `data:` line each; the page gets them joined by newlines.
                    let event = Event::default().data(lines);
                    return Some((Ok(event), (web, Some(id), at, partial)));
                }
                tokio::time::sleep(EVERY).await;
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// The log's bytes from `at` (at most 256 KiB), and its length.
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
        let _ = f.take(256 << 10).read_to_end(&mut buf);
    }
    (buf, len)
}
