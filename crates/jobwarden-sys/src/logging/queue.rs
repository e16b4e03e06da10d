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
    /// The writer thread waits for a line: a line queued wakes it.
    writer_waits: bool,
    /// Callers of [`flush`] waiting: a line written wakes them.
    flushers: usize,
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
        write_now(queue, &line, 1);
        return;
    }
    if state.lines.len() >= state.capacity {
        state.dropped += 1;
        DROPPED_TOTAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    state.lines.push_back(line);
    // A busy writer takes the line when it is done; only a waiting one
    // is woken (a wake is a system call, one a line otherwise).
    let wake = state.writer_waits;
    drop(state);
    if wake {
        queue.changed.notify_all();
    }
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
        state.flushers += 1;
        state = queue
            .changed
            .wait_timeout(state, FLUSH_POLL)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        state.flushers -= 1;
    }
}

/// The writer thread: the lines waiting, in one write, blocking on stderr
/// as long as it must, outside the lock.
fn writer_loop(queue: &'static Queue) {
    loop {
        let (lines, count) = next_lines(queue);
        write_now(queue, &lines, count);
    }
}

/// Every line waiting, once there is one, as one buffer; how many.
fn next_lines(queue: &Queue) -> (Vec<u8>, u64) {
    let mut state = queue.lock();
    loop {
        if let Some(mut lines) = state.lines.pop_front() {
            let mut count = 1;
            while let Some(line) = state.lines.pop_front() {
                lines.extend_from_slice(&line);
                count += 1;
            }
            state.writing_since = Some(Instant::now());
            return (lines, count);
        }
        state.writer_waits = true;
        state = queue
            .changed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
        state.writer_waits = false;
    }
}

/// Lines dropped since the process started, for its metrics.
static DROPPED_TOTAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many log lines this process has dropped in all.
pub fn dropped_total() -> u64 {
    DROPPED_TOTAL.load(std::sync::atomic::Ordering::Relaxed)
}

/// Writes `lines` (`count` of them), counts them if lost, and after a
/// good write following losses logs how many were lost.
fn write_now(queue: &Queue, lines: &[u8], count: u64) {
    let written = std::io::stderr().lock().write_all(lines).is_ok();
    let mut state = queue.lock();
    state.writing_since = None;
    let report = if written {
        std::mem::take(&mut state.dropped)
    } else {
        state.dropped += count;
        DROPPED_TOTAL.fetch_add(count, std::sync::atomic::Ordering::Relaxed);
        0
    };
    let wake = state.flushers > 0;
    drop(state);
    if wake {
        queue.changed.notify_all();
    }
    if report > 0 {
        tracing::warn!(
            dropped = report,
            "{report} log line(s) dropped while stderr was closed or full"
        );
    }
}
