//! `events.jsonl` (DESIGN §6): one JSON object a line with a per-job
//! monotonic `seq`, recovered from the file when a writer reopens it.
//!
//! It is also the job's durable journal: the lines that change the job's
//! record (`queued`, `monitor_started`, `slurm_submitted`, every `state`)
//! carry the whole record under `record` ([`EventLog::journal`]), written
//! whether events are on for the job or not, and made durable with
//! [`EventLog::sync`] at the job's durable points. `job.json` is the view
//! of the last of them ([`last_record`]); readers of the events never see
//! the copy.
//!
//! Writing an ordinary event is fail-soft: an event that cannot be written
//! is logged and the job goes on. Mostly one process writes a job's events (the daemon until
//! the monitor starts, then the monitor), but a restarted daemon notes
//! `adopted` in a live monitor's file: each append holds an `flock` on the
//! file, and if the file grew since this writer's last append, `seq` is
//! re-read from its tail first. One `fstat` per append when nobody else wrote.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio;

/// Declares [`Op`] with each variant's name in the file, and the list of all.
macro_rules! ops {
    ($($variant:ident => $name:literal,)*) => {
        /// What an event says happened: every op a line of `events.jsonl`
        /// can hold, in one list (docs/on-disk.md describes each). Writers
        /// name ops only through this type, and `events --op` accepts only
        /// these, so the list cannot drift from what is written.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Op {
            $($variant,)*
        }

        impl Op {
            /// Every op, in the order a job usually meets them.
            pub const ALL: &'static [Op] = &[$(Op::$variant,)*];

            /// The op's name in the file.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Op::$variant => $name,)*
                }
            }
        }
    };
}

ops! {
    Claimed => "claimed",
    Queued => "queued",
    MonitorStarted => "monitor_started",
    PrepareStarted => "prepare_started",
    Started => "started",
    SlurmSubmitted => "slurm_submitted",
    SlurmStarted => "slurm_started",
    PublishStarted => "publish_started",
    SpawnFailed => "spawn_failed",
    State => "state",
    AbortRequested => "abort_requested",
    Timeout => "timeout",
    Limits => "limits",
    Signal => "signal",
    LeftoversKilled => "leftovers_killed",
    OutputCapped => "output_capped",
    OutputLost => "output_lost",
    Exited => "exited",
    PhaseExited => "phase_exited",
    Published => "published",
    Reconciled => "reconciled",
    GitCheckFailed => "git_check_failed",
    Notified => "notified",
    NotifyFailed => "notify_failed",
    Archived => "archived",
    Requeued => "requeued",
    ArchiveFailed => "archive_failed",
    Adopted => "adopted",
    RetryRequested => "retry_requested",
    Acknowledged => "acknowledged",
    Priority => "priority",
    ChangedFiles => "changed_files",
    Paused => "paused",
    Resumed => "resumed",
}

/// The ops that record what was done to a job from outside it (its
/// inputs): the drop that was claimed, an abort or cancel, a retry, an
/// acknowledgement, a pause holding it and its end, its priority changed
/// by hand, what the reconcile found of its published work. `events
/// --inputs-only` shows these.
pub const INPUT_OPS: &[Op] = &[
    Op::Claimed,
    Op::AbortRequested,
    Op::RetryRequested,
    Op::Acknowledged,
    Op::Priority,
    Op::Paused,
    Op::Resumed,
    Op::Reconciled,
];

impl std::str::FromStr for Op {
    type Err = String;

    /// An op by its name; the error lists them all.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Op::ALL
            .iter()
            .copied()
            .find(|op| op.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Op::ALL.iter().map(|op| op.as_str()).collect();
                format!(
                    "{s:?} is not an event op; the ops are: {}",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much of the file's end is read to recover the last `seq`.
const TAIL_BYTES: u64 = 64 * 1024;

/// An append handle on one job's events.
#[derive(Debug)]
pub struct EventLog {
    root: PathBuf,
    path: PathBuf,
    file: Option<File>,
    next_seq: u64,
    /// The file's length after our last append; `None` until the file's
    /// tail was first read (at the first line written, under the lock).
    known_len: Option<u64>,
    /// The file's length when it was opened, until the first read of its
    /// tail takes it (a line appended since is found by the first append,
    /// which compares the length under the lock).
    opened_len: Option<u64>,
    /// Ordinary events are written; journal lines always are.
    enabled: bool,
    /// Lines held back since [`EventLog::hold`], written together.
    held: Option<Vec<Line>>,
}

/// A line not yet written: its `seq` is given when it is.
#[derive(Debug)]
struct Line {
    op: Op,
    ts: String,
    fields: Value,
    record: Option<Box<RawValue>>,
}

impl EventLog {
    /// Open `path` (under `root`) for appending, continuing after the last
    /// valid `seq`. With `enabled = false` only the journal's lines are
    /// written ([`EventLog::journal`]); every other append is a no-op. A
    /// file that is not a regular file (a FIFO, a symlink) is refused,
    /// never waited on: nothing is written by this writer, with a warning
    /// (the record is then made durable in `job.json` itself).
    ///
    /// Nothing is read here: the file's tail (its last `seq`, a torn last
    /// line) is read under the writers' lock when the first line is
    /// written or held, which needs the lock anyway. A handle opened for
    /// one line (the daemon's `archived`) costs one locked append.
    pub fn open(root: &Path, path: &Path, enabled: bool) -> Self {
        let mut log = EventLog {
            root: root.to_path_buf(),
            path: path.to_path_buf(),
            file: None,
            next_seq: 1,
            known_len: None,
            opened_len: None,
            enabled,
            held: None,
        };
        match fsio::open_append_len(root, path) {
            Ok((f, len)) => {
                log.file = Some(f);
                log.opened_len = Some(len);
                // An empty file has no tail to read: its first line
                // reads nothing, unless another writer appended first
                // (the length is compared under the lock).
                if len == 0 {
                    log.known_len = Some(0);
                }
            }
            Err(e) => tracing::warn!("events and journal disabled for this job: {e}"),
        }
        log
    }

    /// Reopen the file if its path no longer names the file this handle
    /// appends to (a job removed or replaced it), carrying `seq` on.
    pub fn reopen_if_replaced(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let Some(file) = self.file.as_ref() else {
            return;
        };
        let same = match (file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
            _ => false,
        };
        if !same {
            let (next, held) = (self.next_seq, self.held.take());
            *self = EventLog::open(&self.root, &self.path, self.enabled);
            self.next_seq = self.next_seq.max(next);
            self.held = held;
        }
    }

    /// Write ordinary events (`true`) or the journal's lines alone: for a
    /// handle opened before the record that says which was read.
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }

    /// [`last_record_after`], read through this handle, which learns from
    /// the same read where the file ends and its last `seq`: its first line
    /// then reads nothing again, unless another writer appended meanwhile
    /// (the length is compared under the writers' lock, as always).
    pub fn last_record_after<T: DeserializeOwned>(&mut self, after: u64) -> Option<(u64, T)> {
        let file = self.file.as_ref()?;
        let len = match self.opened_len.take() {
            Some(len) => len,
            None => file.metadata().ok()?.len(),
        };
        let mut learned = None;
        let found = record_in_file(file, &self.path, len, after, |tail| {
            // A torn end (a crash mid-line) is left to the first append,
            // which closes it; so is a tail with no line to read.
            if len == 0 {
                learned = Some(None);
            } else if tail.last() == Some(&b'\n') {
                learned = last_seq(tail).map(Some);
            }
        });
        if self.known_len.is_none()
            && let Some(last) = learned
        {
            self.known_len = Some(len);
            if let Some(last) = last {
                self.next_seq = self.next_seq.max(last.saturating_add(1));
            }
        }
        found
    }

    /// Append `{"seq", "op", "ts", ...fields}`. `fields` must be a JSON object.
    pub fn append(&mut self, op: Op, fields: Value) {
        if self.enabled {
            self.write(op, fields, None);
        }
    }

    /// Append a journal line: the event with the job's whole `record` as it
    /// is after it, written whether events are on or not. Returns the
    /// line's `seq`, `None` when it could not be written. Durable once
    /// [`EventLog::sync`] has returned.
    pub fn journal(&mut self, op: Op, fields: Value, record: Box<RawValue>) -> Option<u64> {
        self.write(op, fields, Some(record))
    }

    /// Hold the lines appended from now on, to write them in one `write`
    /// at the next [`EventLog::flush`] or [`EventLog::sync`] (or when this
    /// handle is dropped): a burst of lines a moment apart, such as a
    /// command's start (`limits`, `started`, its `state` line), costs one
    /// append, not one each. A line's `seq` is the one
    /// [`EventLog::journal`] returned, unless another writer appended in
    /// between (then it follows theirs). Never hold across a wait: the
    /// lines are seen only once written.
    pub fn hold(&mut self) {
        if self.held.is_none() {
            self.held = Some(Vec::new());
        }
    }

    /// Write the lines held since [`EventLog::hold`], and stop holding.
    /// False when there were some and they could not be written (a full
    /// disk, no journal): a journal line among them is then not the
    /// record, and the caller writes `job.json` instead.
    #[must_use = "a journal line held may not have been written"]
    pub fn flush(&mut self) -> bool {
        match self.held.take() {
            Some(lines) if !lines.is_empty() => self.write_lines(lines).is_some(),
            _ => true,
        }
    }

    /// Make every line written so far durable (`fdatasync`, or owed to an
    /// open group commit, `fsio::batch`), the held ones written first. An
    /// error when there is no journal to sync.
    pub fn sync(&mut self) -> Result<(), IoError> {
        if !self.flush() {
            return Err(IoError::new(
                "appending to",
                &self.path,
                std::io::Error::other("the lines held could not be written"),
            ));
        }
        match self.file.as_ref() {
            Some(file) => fsio::sync_open(file, &self.path),
            None => Err(IoError::new(
                "syncing",
                &self.path,
                std::io::Error::other("the journal could not be opened"),
            )),
        }
    }

    /// Reserve room for `len` more bytes of lines ([`fsio::reserve`]):
    /// false when the filesystem cannot or there is no journal (records
    /// then go to `job.json`), an error when the disk is full.
    pub fn reserve(&self, len: u64) -> Result<bool, IoError> {
        match self.file.as_ref() {
            Some(file) => fsio::reserve(file, &self.path, self.known_len, len),
            None => Ok(false),
        }
    }

    fn write(&mut self, op: Op, fields: Value, record: Option<Box<RawValue>>) -> Option<u64> {
        self.file.as_ref()?;
        if self.held.is_some() && self.known_len.is_none() {
            // A held line's seq is told now: read where the file ends.
            let file = self.file.as_mut()?;
            let _lock = FileLock::exclusive(file);
            let len = file.metadata().map(|m| m.len()).ok();
            self.catch_up(len);
        }
        let line = Line {
            op,
            ts: Timestamp::now().to_string(),
            fields,
            record,
        };
        match self.held.as_mut() {
            Some(held) => {
                held.push(line);
                let ahead = held.len().saturating_sub(1) as u64;
                Some(self.next_seq.saturating_add(ahead))
            }
            None => self.write_lines(vec![line]),
        }
    }

    /// Under the writers' lock, with the file's length `len` now: if it is
    /// not the length after our last append (another writer appended, or
    /// nothing was read yet), read the tail and continue after its last
    /// `seq`. True when the file ends in a torn line.
    fn catch_up(&mut self, len: Option<u64>) -> bool {
        let Some(file) = self.file.as_mut() else {
            return false;
        };
        if len == self.known_len || len == Some(0) {
            self.known_len = len;
            return false;
        }
        let tail = len.map_or_else(Vec::new, |len| tail_of(file, &self.path, len));
        self.next_seq =
            last_seq(&tail).map_or(self.next_seq, |s| s.saturating_add(1).max(self.next_seq));
        let torn = tail.last().is_some_and(|&b| b != b'\n');
        // A torn end is looked at again by the append that closes it (a
        // line held now is written later).
        self.known_len = if torn { None } else { len };
        torn
    }

    /// Append `lines` in one `write(2)` under the writers' lock; the first
    /// one's `seq`, `None` when they could not be written.
    fn write_lines(&mut self, lines: Vec<Line>) -> Option<u64> {
        let file = self.file.as_mut()?;
        let _lock = FileLock::exclusive(file);
        let len = file.metadata().map(|m| m.len()).ok();
        // A torn last line (a crash mid-write) is closed off first, so that
        // this one starts on a line of its own.
        let torn = self.catch_up(len);
        let len = len.or(self.known_len).unwrap_or(0);
        let file = self.file.as_mut()?;
        let first = self.next_seq;
        let mut text = String::new();
        if torn {
            text.push('\n');
        }
        let ops: Vec<Op> = lines.iter().map(|l| l.op).collect();
        for (n, line) in lines.into_iter().enumerate() {
            let mut obj = Map::new();
            obj.insert("seq".into(), json!(first.saturating_add(n as u64)));
            obj.insert("op".into(), json!(line.op.as_str()));
            obj.insert("ts".into(), json!(line.ts));
            // A field never replaces the event's own seq, op or time.
            if let Value::Object(extra) = line.fields {
                for (key, value) in extra {
                    obj.entry(key).or_insert(value);
                }
            }
            obj.remove(RECORD_KEY);
            let event = Value::Object(obj).to_string();
            match line.record {
                // The record as it was serialized, spliced in as the last
                // key: never a tree of values built and printed again.
                Some(record) => {
                    text.push_str(event.strip_suffix('}').unwrap_or(&event));
                    text.push_str(",\"");
                    text.push_str(RECORD_KEY);
                    text.push_str("\":");
                    text.push_str(record.get());
                    text.push('}');
                }
                None => text.push_str(&event),
            }
            text.push('\n');
        }
        // One write(2) on an O_APPEND file: lines never interleave.
        match file.write_all(text.as_bytes()) {
            Ok(()) => {
                self.next_seq = first.saturating_add(ops.len() as u64);
                self.known_len = Some(len + text.len() as u64);
                Some(first)
            }
            Err(e) => {
                let ops: Vec<&str> = ops.iter().map(|op| op.as_str()).collect();
                tracing::warn!(path = %self.path.display(), "writing events {ops:?}: {e}");
                // A part written (a full disk) is cut off again, so that
                // the next line starts on a line of its own; if it cannot
                // be, the next line written closes the torn one first.
                self.known_len = file.set_len(len).is_ok().then_some(len);
                None
            }
        }
    }
}

impl Drop for EventLog {
    /// Held lines are written, not lost, when the handle goes.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// An advisory `flock` held for one append; released on drop. Best effort:
/// if it cannot be taken the append goes ahead (events are fail-soft).
struct FileLock(std::os::fd::RawFd);

/// The longest an append waits for another writer's lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

impl FileLock {
    /// Take it, waiting at most [`LOCK_WAIT`]: a job can hold a lock on
    /// its own events file forever, and must not stop its monitor, the
    /// daemon or a command by it. Without the lock the append goes ahead.
    fn exclusive(file: &File) -> Self {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            // SAFETY: flock on a descriptor we own for the lock's lifetime.
            if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0
                || std::time::Instant::now() >= deadline
            {
                return FileLock(fd);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // SAFETY: the descriptor outlives this guard (borrowed from `file`).
        unsafe { libc::flock(self.0, libc::LOCK_UN) };
    }
}

/// The last [`TAIL_BYTES`] of the file's first `len` (empty if they cannot
/// be read).
fn tail_of(f: &File, path: &Path, len: u64) -> Vec<u8> {
    fsio::read_end(f, path, len, TAIL_BYTES).unwrap_or_default()
}

/// The key of a journal line's copy of the job's record.
pub const RECORD_KEY: &str = "record";

/// How much of the file's end is read for its last journal line: far more
/// than the few lines that follow one. The last [`JOURNAL_TAIL_FIRST`]
/// bytes are read first, which most often hold it.
const JOURNAL_TAIL_BYTES: u64 = 256 * 1024;
const JOURNAL_TAIL_FIRST: u64 = 16 * 1024;

/// The last journal line of the file under `root`: its `seq` and the
/// record it carries, read as `T`. `None` when there is none in the file's
/// last [`JOURNAL_TAIL_BYTES`] (or no file, or one that cannot be read), or
/// when the last one's record is not a `T`.
pub fn last_record<T: DeserializeOwned>(root: &Path, path: &Path) -> Option<(u64, T)> {
    last_record_after(root, path, 0)
}

/// [`last_record`], when the last journal line's `seq` is greater than
/// `after` (a reader holding the record up to `after` then parses nothing).
pub fn last_record_after<T: DeserializeOwned>(
    root: &Path,
    path: &Path,
    after: u64,
) -> Option<(u64, T)> {
    let (file, len) = fsio::open_file_len(root, path).ok()?;
    record_in_file(&file, path, len, after, |_| {})
}

/// The last journal line among the first `len` bytes of `file`, when its
/// `seq` is greater than `after`, its record read as `T`; `first` is
/// shown the last [`JOURNAL_TAIL_FIRST`] bytes, read first.
fn record_in_file<T: DeserializeOwned>(
    file: &File,
    path: &Path,
    len: u64,
    after: u64,
    first: impl FnOnce(&[u8]),
) -> Option<(u64, T)> {
    let tail = fsio::read_end(file, path, len, JOURNAL_TAIL_FIRST).ok()?;
    first(&tail);
    let longer;
    let mut found = last_record_in(&tail, len > JOURNAL_TAIL_FIRST);
    if found.is_none() && len > JOURNAL_TAIL_FIRST {
        longer = fsio::read_end(file, path, len, JOURNAL_TAIL_BYTES).ok()?;
        found = last_record_in(&longer, len > JOURNAL_TAIL_BYTES);
    }
    let (seq, record) = found.filter(|(seq, _)| *seq > after)?;
    Some((seq, serde_json::from_str(record.get()).ok()?))
}

/// What a reader of the journal's tail needs of a line: its `seq`, and its
/// copy of the record still as text, parsed only for the line returned.
#[derive(serde::Deserialize)]
struct TailLine<'a> {
    seq: u64,
    #[serde(borrow, default)]
    record: Option<&'a RawValue>,
}

/// The last journal line among `bytes`, whose first line is cut when
/// `cut`.
fn last_record_in(bytes: &[u8], cut: bool) -> Option<(u64, &RawValue)> {
    let mut lines = bytes.split(|&b| b == b'\n');
    if cut {
        lines.next();
    }
    lines.rev().find_map(|line| {
        let line: TailLine = serde_json::from_slice(line).ok()?;
        let record = line.record.filter(|r| r.get().starts_with('{'))?;
        Some((line.seq, record))
    })
}

/// An event as readers see it: without the journal's copy of the record.
fn shown(mut v: Value) -> Value {
    if let Some(obj) = v.as_object_mut() {
        obj.remove(RECORD_KEY);
    }
    v
}

/// The `seq` of the last parseable line. Malformed lines are skipped.
pub fn last_seq(tail: &[u8]) -> Option<u64> {
    tail.split(|&b| b == b'\n')
        .rev()
        .find_map(|line| serde_json::from_slice::<TailLine>(line).ok())
        .map(|line| line.seq)
}

/// The most of an `events.jsonl` a reader reads; the rest is reported as
/// cut, never read (a job can write its own events file).
pub const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// Read all parseable events of a file under `root`, skipping malformed lines.
pub fn read_all(root: &Path, path: &Path) -> Result<Vec<Value>, IoError> {
    read_counted(root, path).map(|read| read.events)
}

/// The parseable events among the last `limit` bytes of a file under
/// `root`: for what is written last (a job's end and what follows it)
/// in a file a job may have made large.
pub fn read_tail(root: &Path, path: &Path, limit: u64) -> Result<Vec<Value>, IoError> {
    let (bytes, len) = fsio::read_tail(root, path, limit)?;
    let mut lines = bytes.split(|&b| b == b'\n');
    if len > limit {
        // The first line read is most likely the end of one cut short.
        lines.next();
    }
    Ok(lines
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .filter(Value::is_object)
        .map(shown)
        .collect())
}

/// The events of a file and how many of its lines could not be read.
#[derive(Debug, Default)]
pub struct ReadEvents {
    /// Every line that is a JSON object, in file order.
    pub events: Vec<Value>,
    /// Non-blank lines that are not (a torn last line, a stray write).
    pub unreadable: usize,
    /// The file was longer than [`MAX_READ_BYTES`]; only its start was read.
    pub cut: bool,
}

/// Read all events of a file under `root` (opened safely, at most
/// [`MAX_READ_BYTES`]), counting the malformed lines it skips.
pub fn read_counted(root: &Path, path: &Path) -> Result<ReadEvents, IoError> {
    let (text, cut) = fsio::read_capped(root, path, MAX_READ_BYTES)?;
    let mut read = ReadEvents {
        cut,
        ..ReadEvents::default()
    };
    for line in text.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) if v.is_object() => read.events.push(shown(v)),
            _ => read.unreadable += 1,
        }
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).expect("raw")
    }

    /// `bytes` appended to the file at `p` as a job or a crash would leave
    /// them (a torn line, a stray write), past every writer's lock.
    fn append_raw(p: &Path, bytes: &[u8]) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(p)
            .and_then(|mut f| f.write_all(bytes))
            .expect("a raw append");
    }

    #[test]
    fn a_field_never_replaces_the_event_s_own_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        let mut log = EventLog::open(dir.path(), &p, true);
        log.append(
            Op::Claimed,
            json!({"op": null, "seq": 9, "ts": 0, "why": "x"}),
        );
        let events = read_all(dir.path(), &p).expect("read");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["op"], "claimed");
        assert_eq!(events[0]["seq"], 1);
        assert!(events[0]["ts"].is_string(), "{}", events[0]);
        assert_eq!(events[0]["why"], "x");
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a fixture
    fn a_forged_last_seq_or_a_lock_held_forever_stops_no_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        std::fs::write(&p, format!("{{\"seq\":{},\"op\":\"x\"}}\n", u64::MAX)).expect("forge");
        // Another open of the file holds its lock, as a job could, for good.
        let holder = std::fs::File::open(&p).expect("open");
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        let started = std::time::Instant::now();
        let mut log = EventLog::open(dir.path(), &p, true);
        log.append(Op::Claimed, json!({}));
        log.append(Op::Queued, json!({}));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let events = read_all(dir.path(), &p).expect("read");
        assert_eq!(events.len(), 3, "{events:?}");
        drop(holder);
    }

    #[test]
    fn held_lines_are_one_append_whose_seqs_follow_another_writers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        let mut log = EventLog::open(dir.path(), &p, true);
        log.append(Op::Claimed, json!({}));
        log.hold();
        log.append(Op::Limits, json!({}));
        let seq = log.journal(
            Op::State,
            json!({"to": "running"}),
            raw(json!({"state": "running"})),
        );
        assert_eq!(seq, Some(3), "the seq it will have");
        assert_eq!(read_all(dir.path(), &p).expect("read").len(), 1, "held");
        // Another writer appends meanwhile: the held lines follow it.
        EventLog::open(dir.path(), &p, true).append(Op::Adopted, json!({}));
        let before = std::fs::metadata(&p).expect("meta").len();
        assert!(log.flush(), "written");
        let events = read_all(dir.path(), &p).expect("read");
        let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
        let ops: Vec<&str> = events.iter().filter_map(|e| e["op"].as_str()).collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
        assert_eq!(ops, ["claimed", "adopted", "limits", "state"]);
        assert!(std::fs::metadata(&p).expect("meta").len() > before);
        let (seq, record): (u64, Value) = last_record(dir.path(), &p).expect("the journal line");
        assert_eq!((seq, record["state"].as_str()), (4, Some("running")));
        // Dropping a handle writes what it holds.
        log.hold();
        log.append(Op::Exited, json!({"code": 0}));
        drop(log);
        let events = read_all(dir.path(), &p).expect("read");
        assert_eq!(
            events.last().map(|e| e["op"].clone()),
            Some(json!("exited"))
        );
    }

    #[test]
    fn a_record_read_through_the_handle_leaves_it_knowing_the_end_and_missing_no_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        let mut first = EventLog::open(dir.path(), &p, true);
        first.journal(Op::Queued, json!({}), raw(json!({"state": "queued"})));
        first.append(Op::Claimed, json!({}));
        let mut log = EventLog::open(dir.path(), &p, true);
        let (seq, record): (u64, Value) = log.last_record_after(0).expect("the journal line");
        assert_eq!((seq, record["state"].as_str()), (1, Some("queued")));
        // Another writer appends after that read: the next line follows it.
        EventLog::open(dir.path(), &p, true).append(Op::Adopted, json!({}));
        let running = raw(json!({"state": "running"}));
        assert_eq!(log.journal(Op::State, json!({}), running), Some(4));
        let seqs = |p: &Path| -> Vec<u64> {
            let events = read_all(dir.path(), p).expect("read");
            events.iter().filter_map(|e| e["seq"].as_u64()).collect()
        };
        assert_eq!(seqs(&p), [1, 2, 3, 4]);
        // Nothing newer than asked: no record, and still the end learned.
        let mut after = EventLog::open(dir.path(), &p, true);
        assert!(after.last_record_after::<Value>(4).is_none());
        after.append(Op::Exited, json!({}));
        assert_eq!(seqs(&p), [1, 2, 3, 4, 5]);
        // A torn end the read saw is closed by the next line.
        append_raw(&p, b"{\"seq\":6,\"op\":\"sta");
        let mut torn = EventLog::open(dir.path(), &p, true);
        let (seq, _): (u64, Value) = torn.last_record_after(0).expect("the journal line");
        assert_eq!(seq, 4);
        torn.append(Op::Archived, json!({}));
        let read = read_counted(dir.path(), &p).expect("read");
        assert_eq!(read.unreadable, 1, "the torn line alone");
        let last = read.events.last().expect("a line");
        assert_eq!(
            (last["seq"].as_u64(), last["op"].as_str()),
            (Some(6), Some("archived"))
        );
    }

    #[test]
    fn seq_continues_after_reopen_and_skips_torn_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        let mut log = EventLog::open(dir.path(), &p, true);
        log.append(Op::Claimed, json!({}));
        log.append(Op::Queued, json!({"max_jobs": 4}));
        drop(log);
        append_raw(&p, b"{\"seq\": 3, \"op\": \"tor");
        let mut log = EventLog::open(dir.path(), &p, true);
        log.append(Op::Started, json!({"pid": 1}));
        let events = read_all(dir.path(), &p).expect("read");
        let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        assert_eq!(events[2]["op"], "started");
        assert_eq!(events[1]["max_jobs"], 4);
    }

    #[test]
    fn a_torn_end_is_closed_before_lines_held_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        EventLog::open(dir.path(), &p, true).append(Op::Claimed, json!({}));
        append_raw(&p, b"{\"seq\": 2, \"op\": \"cla");
        let mut log = EventLog::open(dir.path(), &p, true);
        log.hold();
        let seq = log.journal(Op::Queued, json!({}), raw(json!({"state": "queued"})));
        assert!(log.flush(), "written");
        let (found, _): (u64, Value) = last_record(dir.path(), &p).expect("the held line reads");
        assert_eq!(Some(found), seq);
    }

    #[test]
    fn unreadable_lines_are_counted_not_returned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        let mut log = EventLog::open(dir.path(), &p, true);
        log.append(Op::Claimed, json!({}));
        drop(log);
        append_raw(&p, b"\n[1]\n{\"seq\": 2, \"op\": \"st");
        let read = read_counted(dir.path(), &p).expect("read");
        assert_eq!(read.events.len(), 1);
        assert_eq!(read.unreadable, 2, "a non-object and a torn line");
        assert_eq!(read_all(dir.path(), &p).expect("read").len(), 1);
    }

    #[test]
    fn two_writers_never_share_a_seq() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        let mut monitor = EventLog::open(dir.path(), &p, true);
        monitor.append(Op::Started, json!({}));
        let mut daemon = EventLog::open(dir.path(), &p, true);
        daemon.append(Op::Adopted, json!({}));
        monitor.append(Op::Exited, json!({}));
        daemon.append(Op::AbortRequested, json!({}));
        let seqs: Vec<u64> = read_all(dir.path(), &p)
            .expect("read")
            .iter()
            .filter_map(|e| e["seq"].as_u64())
            .collect();
        assert_eq!(seqs, vec![1, 2, 3, 4]);
    }

    #[test]
    fn op_names_are_unique_and_parse_back() {
        let names: std::collections::BTreeSet<&str> =
            Op::ALL.iter().map(|op| op.as_str()).collect();
        assert_eq!(names.len(), Op::ALL.len());
        for op in Op::ALL {
            assert_eq!(op.as_str().parse::<Op>(), Ok(*op));
        }
        let err = "nope".parse::<Op>().expect_err("unknown");
        assert!(
            err.contains("\"nope\"") && err.contains("claimed, queued"),
            "{err}"
        );
    }

    #[test]
    fn on_disk_doc_lists_exactly_the_ops() {
        let doc = include_str!("../../../docs/on-disk.md");
        let section = doc
            .split("## events.jsonl")
            .nth(1)
            .and_then(|rest| rest.split("\n### ").next())
            .expect("docs/on-disk.md has an events.jsonl section");
        let documented: std::collections::BTreeSet<&str> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .collect();
        let known: std::collections::BTreeSet<&str> =
            Op::ALL.iter().map(|op| op.as_str()).collect();
        assert_eq!(
            documented, known,
            "docs/on-disk.md's table of ops and events::Op differ"
        );
    }

    #[test]
    fn a_disabled_log_writes_the_journal_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        let mut log = EventLog::open(dir.path(), &p, false);
        log.append(Op::Claimed, json!({}));
        assert_eq!(
            log.journal(Op::Queued, json!({}), raw(json!({"state": "queued"}))),
            Some(1)
        );
        log.sync().expect("synced");
        let events = read_all(dir.path(), &p).expect("read");
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["op"], "queued");
        assert!(
            events[0].get(RECORD_KEY).is_none(),
            "readers never see the copy"
        );
    }

    #[test]
    fn the_last_journal_line_is_found_behind_later_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("events.jsonl");
        assert_eq!(last_record::<Value>(dir.path(), &p), None, "no file");
        let mut log = EventLog::open(dir.path(), &p, true);
        log.journal(Op::Queued, json!({}), raw(json!({"state": "queued"})));
        log.journal(
            Op::State,
            json!({"record": 1}),
            raw(json!({"state": "running"})),
        );
        log.append(Op::Exited, json!({"record": {"state": "forged"}}));
        drop(log);
        append_raw(&p, b"{\"seq\": 4, \"record\": {\"state\": \"to");
        let (seq, record): (u64, Value) = last_record(dir.path(), &p).expect("found");
        assert_eq!(seq, 2);
        assert_eq!(record["state"], "running");
        // Behind more than the first tail read: found in the longer one.
        let mut log = EventLog::open(dir.path(), &p, true);
        for _ in 0..200 {
            log.append(Op::Notified, json!({"error": "x".repeat(100)}));
        }
        let (seq, record): (u64, Value) = last_record(dir.path(), &p).expect("found further back");
        assert_eq!(seq, 2);
        assert_eq!(record["state"], "running");
    }
}
