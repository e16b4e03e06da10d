//! The way to stderr: every line this process writes there (log events and
//! the CLI's own messages) is queued for one writer thread, which alone
//! makes the blocking `write(2)` calls. A caller only takes a short lock
//! and appends: it never waits on stderr and never panics.
//!
//! Why a thread and not a non-blocking descriptor: `O_NONBLOCK` belongs to
//! the open file description, which fd 2 shares with the monitors, the
//! jobs' publish scripts, the shell or terminal that started us and anyone
//! else writing the same journald stream; setting it would make their
//! writes fail with `EAGAIN` (and a terminal left non-blocking breaks the
//! shell). A thread leaves the description alone and works the same for a
//! pipe, a socket, a terminal or a file.
//!
//! What is lost, and counted: a line that meets a closed reader (`EPIPE`)
//! or any other write error, and a line that finds [`CAPACITY`] lines
//! already waiting (a full pipe whose reader stalled: the writer thread is
//! stuck in one write and the queue fills). When a write works again the
//! log says once how many lines were dropped.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Lines that may wait for the writer; a line beyond them is dropped.
/// About 200 KiB of log: minutes of a busy daemon's lines, enough to ride
/// out a log reader's restart.
pub const CAPACITY: usize = 1024;

/// At exit, a write stuck this long (a reader that stopped reading) is
/// given up on rather than waited for.
const STUCK: Duration = Duration::from_secs(1);

/// How often a waiting [`flush`] looks again at a write in progress.
const FLUSH_POLL: Duration = Duration::from_millis(50);

#[derive(Default)]
struct State {
    lines: VecDeque<Vec<u8>>,
    /// [`CAPACITY`] (or the test suite's, see `fault.rs`).
    capacity: usize,
    /// Dropped since the last report (reported after the next good write).
    dropped: u64,
    /// When the line being written was taken from the queue.
    writing_since: Option<Instant>,
    /// False when no writer thread could be started: callers write
    /// themselves (errors still counted, never a panic).
    threaded: bool,
}

struct Queue {
    state: Mutex<State>,
    /// Signalled when a line is queued or written.
    changed: Condvar,
}

static QUEUE: OnceLock<Queue> = OnceLock::new();

fn queue() -> &'static Queue {
    QUEUE.get_or_init(start)
}

/// Creates the queue and its writer thread.
fn start() -> Queue {
    let spawned = std::thread::Builder::new()
        .name("stderr-writer".into())
        .spawn(|| writer_loop(queue()));
    Queue {
        state: Mutex::new(State {
            threaded: spawned.is_ok(),
            capacity: crate::fault::log_queue_capacity().unwrap_or(CAPACITY),
            ..State::default()
        }),
        changed: Condvar::new(),
    }
}

impl Queue {
    /// A poisoned lock only means some thread panicked while holding it;
    /// the queue itself is always consistent, so logging carries on.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Queues one complete line (its newline included; or a terminal's live
/// line, redrawn with `\r`) for stderr, or drops
/// and counts it when [`CAPACITY`] lines are already waiting.
pub fn push(line: Vec<u8>) {
    let queue = queue();
    let mut state = queue.lock();
    if !state.threaded {
        drop(state);
        write_now(queue, &line);
        return;
    }
    if state.lines.len() >= state.capacity {
        state.dropped += 1;
        DROPPED_TOTAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    state.lines.push_back(line);
    drop(state);
    queue.changed.notify_all();
}

/// Waits until every queued line is written, unless the writer is stuck
/// in one write for [`STUCK`] (a reader that stopped reading): for the
/// end of the process, so that its last lines are not lost.
pub fn flush() {
    // Nothing was ever queued: no writer thread to start just to find it idle.
    let Some(queue) = QUEUE.get() else {
        return;
    };
    let mut state = queue.lock();
    loop {
        let idle = state.lines.is_empty() && state.writing_since.is_none();
        let stuck = state.writing_since.is_some_and(|t| t.elapsed() >= STUCK);
        if idle || stuck || !state.threaded {
            return;
        }
        state = queue
            .changed
            .wait_timeout(state, FLUSH_POLL)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// The writer thread: one line at a time, blocking on stderr as long as
/// it must, outside the lock.
fn writer_loop(queue: &'static Queue) {
    loop {
        let line = next_line(queue);
        write_now(queue, &line);
    }
}

fn next_line(queue: &Queue) -> Vec<u8> {
    let mut state = queue.lock();
    loop {
        if let Some(line) = state.lines.pop_front() {
            state.writing_since = Some(Instant::now());
            return line;
        }
        state = queue
            .changed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// Lines dropped since the process started, for its metrics.
static DROPPED_TOTAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many log lines this process has dropped in all.
pub fn dropped_total() -> u64 {
    DROPPED_TOTAL.load(std::sync::atomic::Ordering::Relaxed)
}

/// Writes `line`, counts it if lost, and after a good write following
/// losses logs how many were lost.
fn write_now(queue: &Queue, line: &[u8]) {
    let written = std::io::stderr().lock().write_all(line).is_ok();
    let mut state = queue.lock();
    state.writing_since = None;
    let report = if written {
        std::mem::take(&mut state.dropped)
    } else {
        state.dropped += 1;
        DROPPED_TOTAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        0
    };
    drop(state);
    queue.changed.notify_all();
    if report > 0 {
        tracing::warn!(
            dropped = report,
            "{report} log line(s) dropped while stderr was closed or full"
        );
    }
}
