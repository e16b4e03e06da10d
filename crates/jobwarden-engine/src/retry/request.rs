//! The retry request: how `jobwarden retry` tells the daemon that a prompt
//! it put back in the inbox is another attempt of an ended job.
//!
//! The CLI copies the archived prompt to a dot-named temporary file in the
//! prompt's inbox folder, writes `.<name>.retry.json` beside it naming that
//! file (device, inode, size and mtime, which a rename keeps), and only then
//! renames the copy to `<name>.prompt.md` without replacing anything. The archive keeps
//! its copy: it is the history.
//!
//! When the daemon considers `<name>.prompt.md` it honours the request if
//! 1. the request names this very file (a new drop of the same name is a
//!    different file, and is an ordinary fresh start), and
//! 2. no attempt of the prompt has finished since the request was made (a
//!    request left behind by a crash after its claim is inert once the
//!    retry itself has ended, even if that retry is requeued).
//!
//! An honoured request makes the claim attempt `attempt + 1` of the job it
//! names, with `retry_of` set; with `now` it also skips the cooldown. The
//! daemon removes the request once the prompt is claimed.
//!
//! `retry --now` of a prompt that already waits in the inbox (deferred by
//! its cooldown, after a requeue or a new drop) puts nothing back: it
//! writes a request naming the waiting file itself, with `now` ([`hasten`]).
//! The daemon looks at a deferred prompt again when its request appears. The ledger is not
//! touched: the request is a file, like the ABORT marker, so the CLI needs
//! no write access to the ledger and no daemon has to be running.

use std::fs::File;
use std::os::unix::fs::MetadataExt;

use nix::fcntl::Flock;

use serde::{Deserialize, Serialize};

use jobwarden_ledger::LastRun;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::{Layout, PromptName};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::{IoContext, IoError};
use jobwarden_sys::fsio::{self, Renamed};

/// Longest request file read.
const MAX_REQUEST_BYTES: u64 = 4096;

/// The content of `.<name>.retry.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// The ended job this is another attempt of.
    pub retry_of: JobId,
    /// That job's attempt number; the retry is `attempt + 1`.
    pub attempt: u32,
    /// Start without waiting for the prompt's cooldown.
    pub now: bool,
    pub requested_at: Timestamp,
    /// The file put back.
    pub file: FileIdentity,
}

/// A file told apart from a later one of the same name: an inode number
/// can be reused once the file is deleted, so its size and mtime count too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i128,
}

impl FileIdentity {
    fn of(meta: &std::fs::Metadata) -> Self {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

impl Request {
    /// The attempt a claim continues: `(retry_of, attempt)`.
    pub fn prior(&self) -> (JobId, u32) {
        (self.retry_of.clone(), self.attempt)
    }

    /// The same request (times are stored to the millisecond only).
    fn same(&self, other: &Request) -> bool {
        (&self.retry_of, self.attempt, self.file) == (&other.retry_of, other.attempt, other.file)
    }
}

/// What [`put_back`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutBack {
    /// `<name>.prompt.md` is in the inbox with its request beside it.
    Done,
    /// A file of that name appeared meanwhile; nothing was left behind.
    NameTaken,
}

/// Put `bytes` in the inbox as `prompt`'s waiting file, with a request that
/// makes its next claim attempt `attempt + 1` of `retry_of`.
pub fn put_back(
    layout: &Layout,
    prompt: &PromptName,
    bytes: &[u8],
    retry_of: &JobId,
    attempt: u32,
    now: bool,
) -> Result<PutBack, IoError> {
    let waiting = layout.waiting_prompt(prompt);
    if let Some(dir) = waiting.parent() {
        fsio::create_dirs(layout.root(), dir)?;
    }
    let unique = format!("{}-{}", std::process::id(), Timestamp::now().epoch_ms());
    let temp = layout.retry_temp(prompt, &unique);
    fsio::create_new_synced(layout.root(), &temp, bytes)?;
    let placed = std::fs::symlink_metadata(&temp)
        .ctx("inspecting", &temp)
        .and_then(|meta| {
            let request = Request {
                retry_of: retry_of.clone(),
                attempt,
                now,
                requested_at: Timestamp::now(),
                file: FileIdentity::of(&meta),
            };
            fsio::write_json_atomic(layout.root(), &layout.retry_request(prompt), &request)?;
            fsio::rename_noreplace(layout.root(), &temp, &waiting).map(|r| (r, request))
        });
    match placed {
        Ok((Renamed::Done, _)) => Ok(PutBack::Done),
        Ok((_, request)) => {
            let _ = std::fs::remove_file(&temp);
            clear_if(layout, prompt, &request);
            Ok(PutBack::NameTaken)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}

/// Lift the cooldown of `prompt`, which waits in the inbox: a request with
/// `now` naming the waiting file. A request already naming that file keeps
/// the attempt it continues; otherwise the claim continues `prior` (job,
/// attempt). `None` if no regular file waits (it was claimed meanwhile).
pub fn hasten(
    layout: &Layout,
    prompt: &PromptName,
    prior: (JobId, u32),
) -> Result<Option<Request>, IoError> {
    let waiting = layout.waiting_prompt(prompt);
    let meta = match std::fs::symlink_metadata(&waiting) {
        Ok(meta) if meta.is_file() => meta,
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(IoError::new("inspecting", &waiting, e)),
    };
    let file = FileIdentity::of(&meta);
    let (retry_of, attempt) = read(layout, prompt)
        .filter(|r| r.file == file)
        .map_or(prior, |r| r.prior());
    let request = Request {
        retry_of,
        attempt,
        now: true,
        requested_at: Timestamp::now(),
        file,
    };
    fsio::write_json_atomic(layout.root(), &layout.retry_request(prompt), &request)?;
    Ok(Some(request))
}

/// Wait for our turn: `jobwarden retry` holds this lock while it decides
/// whether a job may be retried and puts its prompt back, so that a second
/// retry racing it sees what the first left (a waiting prompt, a request,
/// the job marked as retried) and is refused instead of putting the prompt
/// back twice.
pub fn take_turn(layout: &Layout) -> Result<Flock<File>, IoError> {
    fsio::lock_wait(layout.root(), &layout.retry_lock())
}

/// `runs/<job>/retried.json`: a job whose prompt `jobwarden retry` put
/// back. Written once, never replaced: a job has at most one manual retry,
/// and the newest attempt is the one to retry next.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Retried {
    /// The attempt number the retry runs as.
    pub attempt: u32,
    pub requested_at: Timestamp,
}

/// Mark job `id` as retried (attempt `attempt + 1` put back). False if it
/// already was: the marker is never replaced.
pub fn mark_retried(layout: &Layout, id: &JobId, attempt: u32) -> Result<bool, IoError> {
    let path = layout.retried_marker(id);
    let marker = Retried {
        attempt: attempt + 1,
        requested_at: Timestamp::now(),
    };
    let mut bytes = serde_json::to_vec_pretty(&marker)
        .map_err(|e| IoError::new("serialising", &path, std::io::Error::other(e)))?;
    bytes.push(b'\n');
    fsio::create_new_atomic(layout.root(), &path, &bytes)
}

/// Was job `id` retried already? Its marker, if readable (an unreadable one
/// still says yes, without details).
pub fn retried(layout: &Layout, id: &JobId) -> Option<Option<Retried>> {
    let path = layout.retried_marker(id);
    match fsio::read_capped(layout.root(), &path, MAX_REQUEST_BYTES) {
        Ok((bytes, _)) => Some(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(_) => Some(None),
    }
}

/// A request waiting beside `prompt` that continues job `id`, if any.
pub fn pending_for(layout: &Layout, prompt: &PromptName, id: &JobId) -> Option<Request> {
    read(layout, prompt).filter(|r| &r.retry_of == id)
}

/// The request for the prompt file at `path`, if it holds (see the module
/// doc); `last` is the prompt's newest finished attempt. A request outlived
/// by a finished attempt is removed.
pub fn honoured(
    layout: &Layout,
    prompt: &PromptName,
    path: &std::path::Path,
    last: Option<&LastRun>,
) -> Option<Request> {
    match standing(layout, prompt, path, last)? {
        Ok(request) => Some(request),
        Err(outlived) => {
            tracing::info!(%prompt, retry_of = %outlived.retry_of, "a retry request outlived by a finished attempt is removed");
            clear_if(layout, prompt, &outlived);
            None
        }
    }
}

/// [`honoured`] for readers: the request that holds for the file at
/// `path`, changing nothing (an outlived request is left for the daemon).
pub fn holding(
    layout: &Layout,
    prompt: &PromptName,
    path: &std::path::Path,
    last: Option<&LastRun>,
) -> Option<Request> {
    standing(layout, prompt, path, last)?.ok()
}

/// The request naming the file at `path`: `Ok` if it holds, `Err` if a
/// finished attempt outlived it.
fn standing(
    layout: &Layout,
    prompt: &PromptName,
    path: &std::path::Path,
    last: Option<&LastRun>,
) -> Option<Result<Request, Request>> {
    let request = read(layout, prompt)?;
    let file = std::fs::symlink_metadata(path).ok()?;
    if FileIdentity::of(&file) != request.file {
        return None;
    }
    if last.is_some_and(|l| l.finished_at > request.requested_at.epoch_ms()) {
        return Some(Err(request));
    }
    Some(Ok(request))
}

/// Remove `prompt`'s request if it is still `request` (a newer one, written
/// by another `retry`, is left alone).
pub fn clear_if(layout: &Layout, prompt: &PromptName, request: &Request) {
    if read(layout, prompt).is_some_and(|r| r.same(request)) {
        let path = layout.retry_request(prompt);
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), "removing a used retry request: {e}");
        }
    }
}

/// `prompt`'s request, if there is a readable one.
fn read(layout: &Layout, prompt: &PromptName) -> Option<Request> {
    let path = layout.retry_request(prompt);
    let bytes = match fsio::read_capped(layout.root(), &path, MAX_REQUEST_BYTES) {
        Ok((bytes, false)) => bytes,
        Ok((_, true)) => {
            tracing::warn!(path = %path.display(), "retry request too large; ignored");
            return None;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("{e}; the retry request is ignored");
            return None;
        }
    };
    serde_json::from_slice(&bytes)
        .map_err(
            |e| tracing::warn!(path = %path.display(), "unreadable retry request ignored: {e}"),
        )
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobwarden_ledger::Outcome;

    fn setup() -> (tempfile::TempDir, Layout, PromptName) {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        let prompt = PromptName {
            project: "p".into(),
            name: "n".into(),
        };
        (dir, layout, prompt)
    }

    fn last_run(finished_at: u64) -> LastRun {
        LastRun {
            id: JobId::generate().to_string(),
            attempt: 1,
            outcome: Outcome::Failure,
            finished_at,
            requeued: false,
            profile: None,
        }
    }

    #[test]
    fn a_put_back_prompt_carries_its_request() {
        let (_d, layout, prompt) = setup();
        let id = JobId::generate();
        let done = put_back(&layout, &prompt, b"again\n", &id, 2, true).expect("put back");
        assert_eq!(done, PutBack::Done);
        let waiting = layout.waiting_prompt(&prompt);
        assert_eq!(std::fs::read(&waiting).expect("prompt"), b"again\n");
        let before = last_run(1);
        let request = honoured(&layout, &prompt, &waiting, Some(&before)).expect("honoured");
        assert_eq!(request.prior(), (id, 2));
        assert!(request.now);
        clear_if(&layout, &prompt, &request);
        assert!(!layout.retry_request(&prompt).exists());
        let left: Vec<_> = std::fs::read_dir(waiting.parent().expect("dir"))
            .expect("ls")
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left behind");
    }

    #[test]
    fn another_file_of_the_same_name_is_not_a_retry() {
        let (_d, layout, prompt) = setup();
        put_back(&layout, &prompt, b"x", &JobId::generate(), 1, false).expect("put back");
        let waiting = layout.waiting_prompt(&prompt);
        std::fs::remove_file(&waiting).expect("rm");
        jobwarden_sys::fsio::create_new_synced(layout.root(), &waiting, b"a new drop")
            .expect("drop");
        assert!(honoured(&layout, &prompt, &waiting, None).is_none());
        assert!(layout.retry_request(&prompt).exists(), "not ours to remove");
    }

    #[test]
    fn a_request_outlived_by_a_finished_attempt_is_inert_and_removed() {
        let (_d, layout, prompt) = setup();
        put_back(&layout, &prompt, b"x", &JobId::generate(), 1, false).expect("put back");
        let waiting = layout.waiting_prompt(&prompt);
        let later = last_run(Timestamp::now().epoch_ms() + 1000);
        assert!(honoured(&layout, &prompt, &waiting, Some(&later)).is_none());
        assert!(!layout.retry_request(&prompt).exists());
    }

    #[test]
    fn hastening_a_waiting_prompt_lifts_its_cooldown_and_keeps_its_attempt() {
        let (_d, layout, prompt) = setup();
        let waiting = layout.waiting_prompt(&prompt);
        std::fs::create_dir_all(waiting.parent().expect("dir")).expect("dir");
        jobwarden_sys::fsio::create_new_synced(layout.root(), &waiting, b"requeued").expect("drop");
        let job = JobId::generate();
        let made = hasten(&layout, &prompt, (job.clone(), 3)).expect("hasten");
        let request = honoured(&layout, &prompt, &waiting, Some(&last_run(1))).expect("honoured");
        assert!(request.now);
        assert_eq!(request.prior(), (job.clone(), 3));
        assert!(made.is_some_and(|m| m.same(&request)));
        // A second hasten (another job named) keeps what the first said.
        hasten(&layout, &prompt, (JobId::generate(), 7)).expect("again");
        let again = honoured(&layout, &prompt, &waiting, None).expect("honoured");
        assert_eq!(again.prior(), (job, 3));
        std::fs::remove_file(&waiting).expect("claimed");
        let gone = hasten(&layout, &prompt, (JobId::generate(), 1)).expect("gone");
        assert!(gone.is_none());
    }

    #[test]
    fn a_taken_name_is_never_replaced() {
        let (_d, layout, prompt) = setup();
        let waiting = layout.waiting_prompt(&prompt);
        std::fs::create_dir_all(waiting.parent().expect("dir")).expect("dir");
        jobwarden_sys::fsio::create_new_synced(layout.root(), &waiting, b"already here")
            .expect("drop");
        let r = put_back(&layout, &prompt, b"x", &JobId::generate(), 1, false).expect("put back");
        assert_eq!(r, PutBack::NameTaken);
        assert_eq!(std::fs::read(&waiting).expect("read"), b"already here");
        assert!(!layout.retry_request(&prompt).exists());
        let left = std::fs::read_dir(waiting.parent().expect("dir"))
            .expect("ls")
            .count();
        assert_eq!(left, 1, "nothing left behind");
    }
}
