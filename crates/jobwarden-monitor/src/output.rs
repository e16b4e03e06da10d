//! Live capture of a job's stdout and stderr into `job.log`: each chunk is
//! written as it arrives (nothing is buffered until exit), both streams into
//! one file in arrival order, capped at `max_log_bytes` with a visible
//! marker. Past the cap the pipes are still drained, so the job never
//! blocks on a full pipe.
//!
//! The job may remove or replace `job.log` (or its whole run folder): at
//! each restore pass the sink compares the file it writes with the one at
//! the path and, when they differ, opens the one at the path (safely,
//! through `fsio`) and goes on there, with the byte count and the cap
//! carried on and one line saying what the old file took with it.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

use jobwarden_model::config::format_size;
use jobwarden_sys::clock::Timestamp;

const CHUNK: usize = 16 * 1024;

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// The last bytes of one stream, for the ledger's artifacts. Holds at most
/// twice the cap between trims.
#[derive(Debug, Default)]
pub struct Tail {
    buf: Vec<u8>,
    total: u64,
}

impl Tail {
    fn push(&mut self, chunk: &[u8], cap: usize) {
        self.total += chunk.len() as u64;
        self.buf.extend_from_slice(chunk);
        if self.buf.len() > cap.saturating_mul(2) {
            self.buf.drain(..self.buf.len() - cap);
        }
    }

    /// The tail as text (invalid UTF-8 replaced), at most `cap` bytes.
    pub fn text(&self, cap: usize) -> String {
        let start = self.buf.len().saturating_sub(cap);
        String::from_utf8_lossy(&self.buf[start..]).into_owned()
    }

    /// Bytes the stream produced in all.
    pub fn total(&self) -> u64 {
        self.total
    }
}

/// The log file and what has been written to it.
#[derive(Debug)]
pub struct LogSink {
    file: File,
    cap: u64,
    /// Bytes written, marker included.
    pub bytes: u64,
    pub truncated: bool,
    pub last_output_at: Option<Timestamp>,
    pub stdout: Tail,
    pub stderr: Tail,
    /// Output that could not be written (disk full, read-only): how much,
    /// and the first error. A marker says so in the log once writes succeed.
    pub lost: Option<Lost>,
    /// The last byte written was not a newline: a note starts a new line.
    line_open: bool,
    /// The last attempt to reopen a replaced `job.log` failed (reported
    /// once, until one succeeds).
    reopen_failing: bool,
}

/// Output lost to failing writes of `job.log`.
#[derive(Debug, Clone)]
pub struct Lost {
    /// In all.
    pub bytes: u64,
    /// The first error.
    pub error: String,
    /// Lost since the log last said so.
    unmarked: u64,
}

/// Shared by the two pump tasks and the monitor's heartbeat. A std mutex:
/// it is held only for one `write`, never across an await.
pub type SharedSink = Arc<Mutex<LogSink>>;

impl LogSink {
    pub fn new(file: File, cap: u64) -> SharedSink {
        let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        LogSink::opened(file, bytes, cap)
    }

    /// [`LogSink::new`] of a file whose open found it `bytes` long.
    pub fn opened(file: File, bytes: u64, cap: u64) -> SharedSink {
        Arc::new(Mutex::new(LogSink {
            file,
            cap,
            bytes,
            truncated: false,
            last_output_at: None,
            stdout: Tail::default(),
            stderr: Tail::default(),
            lost: None,
            line_open: false,
            reopen_failing: false,
        }))
    }

    /// Append `chunk` from `stream`, honouring the cap; the stream's tail
    /// keeps its last `tail_cap` bytes whatever the cap.
    pub fn write(&mut self, stream: Stream, chunk: &[u8], tail_cap: usize) {
        self.last_output_at = Some(Timestamp::now());
        match stream {
            Stream::Stdout => self.stdout.push(chunk, tail_cap),
            Stream::Stderr => self.stderr.push(chunk, tail_cap),
        }
        if self.truncated {
            return;
        }
        let room = self.cap.saturating_sub(self.bytes) as usize;
        let (kept, over) = if chunk.len() > room {
            (&chunk[..room], true)
        } else {
            (chunk, false)
        };
        self.append(kept);
        if over {
            let marker = format!(
                "\n[jobwarden: log capped at {} (max_log_bytes); further output discarded]\n",
                format_size(self.cap)
            );
            self.append(marker.as_bytes());
            self.truncated = true;
        }
    }

    /// Write a line of jobwarden's own (signals sent, phase delimiters) into
    /// the log, so a reader of the log alone sees what happened.
    pub fn note(&mut self, text: &str) {
        let lead = if self.line_open { "\n" } else { "" };
        self.append(format!("{lead}[jobwarden: {text}]\n").as_bytes());
    }

    /// If the file at `path` (`job.log` under `root`) is no longer the one
    /// this sink writes (the job removed it, or its run folder, or put
    /// another file there), go on writing into the one at `path`, created
    /// if missing; a symlink, FIFO or other non-file there is refused and
    /// the output stays in the old file. The byte count and the cap go on
    /// across the switch; one line in the new file says how many bytes
    /// were left behind.
    pub fn reopen_if_replaced(&mut self, root: &Path, path: &Path) {
        // Opened (or created) through the root's handle, never following a
        // symlink: the identity compared is that of what a reader would open.
        let file = match jobwarden_sys::fsio::open_append(root, path) {
            Ok(file) => file,
            Err(e) => {
                if !std::mem::replace(&mut self.reopen_failing, true) {
                    tracing::warn!("{e}; the job's output goes on into the job.log it replaced");
                }
                return;
            }
        };
        if std::mem::take(&mut self.reopen_failing) {
            tracing::info!("{} can be written again", path.display());
        }
        if !replaced(&self.file, &file) {
            return;
        }
        tracing::warn!(
            "{} was removed or replaced by the job; its output goes on into a new one",
            path.display()
        );
        let before = self.bytes;
        self.file = file;
        self.line_open = false;
        self.note(&format!(
            "job.log was removed or replaced while the job ran (with its run folder, if that went too): \
             the {before} bytes of output written before this line were lost with it"
        ));
    }

    /// Hand over the tails so far and start new ones, so that each of a
    /// job's commands (prepare, main, publish) has tails of its own.
    pub fn take_tails(&mut self) -> (Tail, Tail) {
        (
            std::mem::take(&mut self.stdout),
            std::mem::take(&mut self.stderr),
        )
    }

    fn append(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if let Some(lost) = self.lost.as_mut().filter(|l| l.unmarked > 0) {
            let marker = format!(
                "\n[jobwarden: {} bytes of output were lost: {}]\n",
                lost.unmarked, lost.error
            );
            if self.file.write_all(marker.as_bytes()).is_err() {
                lost.bytes += bytes.len() as u64;
                lost.unmarked += bytes.len() as u64;
                return;
            }
            tracing::info!("job.log can be written again");
            lost.unmarked = 0;
            self.bytes += marker.len() as u64;
        }
        match self.file.write_all(bytes) {
            Ok(()) => {
                self.bytes += bytes.len() as u64;
                self.line_open = !bytes.ends_with(b"\n");
            }
            // The job goes on; the loss is reported once here, marked in
            // the log when writes succeed again, and noted at the job's end.
            Err(e) => match self.lost.as_mut() {
                Some(lost) => {
                    lost.bytes += bytes.len() as u64;
                    lost.unmarked += bytes.len() as u64;
                }
                None => {
                    tracing::warn!("writing job.log: {e}; output is lost until writes succeed");
                    self.lost = Some(Lost {
                        bytes: bytes.len() as u64,
                        error: e.to_string(),
                        unmarked: bytes.len() as u64,
                    });
                }
            },
        }
    }
}

/// Is `at_path` another file (device and inode) than `held`? When either
/// cannot be told, no: the sink stays where it is.
fn replaced(held: &File, at_path: &File) -> bool {
    match (held.metadata(), at_path.metadata()) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) != (b.dev(), b.ino()),
        _ => false,
    }
}

/// Lock the sink, tolerating a pump that panicked while holding it.
pub fn lock(sink: &SharedSink) -> MutexGuard<'_, LogSink> {
    sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Start copying the child's stdout and stderr into the sink.
pub fn pump_child(
    child: super::spawn::Started,
    sink: &SharedSink,
    tail_cap: usize,
) -> [Option<JoinHandle<()>>; 2] {
    // The read ends of two pipes, non-blocking already (`child::start`).
    let reader = |fd| tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd).ok();
    [
        reader(child.stdout).map(|s| pump(s, Stream::Stdout, sink.clone(), tail_cap)),
        reader(child.stderr).map(|s| pump(s, Stream::Stderr, sink.clone(), tail_cap)),
    ]
}

/// Copy `stream` into the sink until EOF.
pub fn pump<R: AsyncRead + Unpin + Send + 'static>(
    mut stream: R,
    which: Stream,
    sink: SharedSink,
    tail_cap: usize,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // Read into spare capacity, never zeroed: a job that prints little
        // leaves most of the buffer untouched, and so not memory.
        let mut buf = Vec::with_capacity(CHUNK);
        loop {
            buf.clear();
            match stream.read_buf(&mut buf).await {
                Ok(0) => return,
                Ok(_) => lock(&sink).write(which, &buf, tail_cap),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("reading job output: {e}");
                    return;
                }
            }
        }
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures
mod tests {
    use super::*;

    #[test]
    fn cap_keeps_the_head_and_adds_one_marker() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.log");
        let sink = LogSink::new(File::create(&path).expect("create"), 10);
        lock(&sink).write(Stream::Stdout, b"0123456", 4);
        lock(&sink).write(Stream::Stderr, b"789abc", 4);
        lock(&sink).write(Stream::Stdout, b"more", 4);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.starts_with("0123456789\n[jobwarden: log capped at 10"),
            "{text}"
        );
        assert_eq!(text.matches("log capped").count(), 1);
        let s = lock(&sink);
        assert!(s.truncated);
        assert_eq!(s.stdout.text(4), "more", "tails go on past the cap");
        assert_eq!(s.stdout.total(), 11);
        assert_eq!(s.stderr.text(4), "9abc");
        assert_eq!(s.bytes, text.len() as u64);
    }

    #[test]
    fn a_note_starts_its_own_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.log");
        let sink = LogSink::new(File::create(&path).expect("create"), 1 << 20);
        lock(&sink).note("first");
        lock(&sink).write(Stream::Stdout, b"no newline", 64);
        lock(&sink).note("second");
        lock(&sink).write(Stream::Stdout, b"line\n", 64);
        lock(&sink).note("third");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            "[jobwarden: first]\nno newline\n[jobwarden: second]\nline\n[jobwarden: third]\n"
        );
    }

    #[test]
    fn a_removed_log_is_reopened_with_the_count_and_cap_carried_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.log");
        let sink = LogSink::new(File::create(&path).expect("create"), 200);
        lock(&sink).write(Stream::Stdout, b"first\n", 64);
        lock(&sink).reopen_if_replaced(dir.path(), &path);
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "first\n");
        std::fs::remove_file(&path).expect("remove");
        lock(&sink).reopen_if_replaced(dir.path(), &path);
        lock(&sink).write(Stream::Stdout, &[b'x'; 300], 64);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.starts_with("[jobwarden: job.log was removed or replaced")
                && text.contains("the 6 bytes of output written before"),
            "{text}"
        );
        let s = lock(&sink);
        assert_eq!(s.bytes, 6 + text.len() as u64, "the count goes on");
        assert!(s.truncated, "the cap counts what the old file took");
        assert_eq!(text.matches("log capped").count(), 1);
    }

    #[test]
    fn taken_tails_start_afresh() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.log");
        let sink = LogSink::new(File::create(&path).expect("create"), 1 << 20);
        lock(&sink).write(Stream::Stdout, b"main out", 64);
        lock(&sink).write(Stream::Stderr, b"main err", 64);
        let (out, err) = lock(&sink).take_tails();
        assert_eq!(
            (out.text(64), err.text(64)),
            ("main out".into(), "main err".into())
        );
        lock(&sink).write(Stream::Stdout, b"publish", 64);
        let s = lock(&sink);
        assert_eq!(s.stdout.text(64), "publish");
        assert_eq!(s.stdout.total(), 7);
        assert_eq!(s.stderr.total(), 0);
    }
}
