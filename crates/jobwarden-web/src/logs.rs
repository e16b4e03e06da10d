//! A job's log as the pages read it: its tail (the end, where the error
//! is, never its beginning cut mid-line), its last line for the overview,
//! and the whole of it, raw, for download. Opened beneath the root like
//! every file a job may have replaced (`fsio::open_file`).

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Web;
use super::html::Ctx;
use jobwarden_model::job::JobId;

/// The most of a log a job page shows.
pub const SHOWN: u64 = 256 << 10;

/// The end of a log.
pub struct Tail {
    /// The text shown: whole lines (and, once the job ended, its last
    /// unended one).
    pub text: String,
    /// The number of its first line.
    pub first_line: u64,
    /// Bytes before it, not shown.
    pub skipped: u64,
    /// The byte after it: where following the log goes on from.
    pub end: u64,
}

/// The last `max` bytes of job `id`'s log at most, from the start of a
/// line; `whole_lines`: without an unended last line (the job runs on,
/// and the live stream sends it once it ends).
pub fn tail(web: &Web, id: &JobId, max: u64, whole_lines: bool) -> Tail {
    let empty = Tail {
        text: String::new(),
        first_line: 1,
        skipped: 0,
        end: 0,
    };
    let Ok(mut f) = jobwarden_sys::fsio::open_file(web.layout.root(), &web.layout.job_log(id))
    else {
        return empty;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut start = len.saturating_sub(max);
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(start)).is_err()
        || f.by_ref().take(max).read_to_end(&mut bytes).is_err()
    {
        return empty;
    }
    if start > 0 {
        // From the first whole line.
        let cut = bytes
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        bytes.drain(..cut);
        start += cut as u64;
    }
    if whole_lines {
        let keep = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        bytes.truncate(keep);
    }
    Tail {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        first_line: 1 + lines_before(&mut f, start),
        skipped: start,
        end: start + bytes.len() as u64,
    }
}

/// How many lines end before byte `end` of `f`.
fn lines_before(f: &mut std::fs::File, end: u64) -> u64 {
    if end == 0 || f.seek(SeekFrom::Start(0)).is_err() {
        return 0;
    }
    let mut left = end;
    let mut count = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        match f.read(&mut buf[..want]) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                count += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
                left -= n as u64;
            }
        }
    }
    count
}

/// The last line of job `id`'s log with text in it, as HTML.
pub fn last_line(web: &Web, id: &JobId) -> String {
    let tail = tail(web, id, 4096, false);
    super::ansi::last_line(&tail.text)
}

/// `/jobs/{id}/log`: the whole log, raw, as plain text.
pub async fn raw(State(web): State<Arc<Web>>, ctx: Ctx, Path(id): Path<String>) -> Response {
    let not_found = |why: &str| super::pages::refused(&ctx, StatusCode::NOT_FOUND, why, "/jobs");
    let Ok(id) = JobId::parse(&id) else {
        return not_found("no such job");
    };
    let path = web.layout.job_log(&id);
    let file = match jobwarden_sys::fsio::open_file(web.layout.root(), &path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return not_found("this job has no log (yet)");
        }
        Err(_) => return not_found("this job's log cannot be read"),
    };
    let file = tokio::fs::File::from_std(file);
    let stream = futures_util::stream::unfold(file, |mut file| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 64 << 10];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(buf), file))
            }
            Err(e) => Some((Err(e), file)),
        }
    });
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("inline; filename=\"{}.log\"", id.as_str()),
            ),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}
