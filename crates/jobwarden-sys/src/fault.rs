//! Fault injection for the test suite. In debug builds only,
//! `JOBWARDEN_TEST_FAULT=<point>` makes the named point panic, once the
//! file named by `JOBWARDEN_TEST_FAULT_WHEN` exists (at once if unset).
//! Release builds compile every point to nothing.
//!
//! `JOBWARDEN_TEST_PAUSE=<point>` instead makes the named point wait
//! until the file named by `JOBWARDEN_TEST_PAUSE_UNTIL` exists (at most
//! 60 s): a test holds a process there to open a race window at will. On
//! arrival the point creates that name with `.reached` added, so that the
//! test knows the process is held there.
//!
//! Points: `daemon-tick` (the daemon loop's heartbeat tick);
//! `monitor-heartbeat` (a monitor's heartbeat while its job runs);
//! `monitor-exit` (a monitor whose job has ended, before it exits: its
//! end is durable in its journal, nothing else of it is done);
//! `monitor-started` (pause only: a monitor's start is durable, its
//! `monitor_started` line and run folder synced, and nothing of the job
//! has run); `daemon-claimed` (pause only: a group of claims was
//! committed, none of their monitors started yet);
//! `monitor-index` (a monitor whose job has run for a moment, before it
//! has the job index told so);
//! `abort-before-claim` (pause only: `jobwarden abort` has found a prompt
//! waiting in the inbox and is about to claim it to cancel it);
//! `startup-check` (pause only: the daemon's start-up check, before it lists
//! `runs/`); `ledger-full` (not a panic: while armed, every write to the
//! ledger by a process started with it fails and is rolled back, as on a
//! full disk, while files are still written).
//!
//! Knobs: `JOBWARDEN_TEST_LOG_QUEUE=<n>` holds the stderr queue to `n`
//! lines (`logging/queue.rs`), so that a test can overflow it with the
//! few lines a daemon logs. `JOBWARDEN_TEST_CLOCK_OFFSET=<file>`: the
//! milliseconds written in that file are added to the wall clock the
//! daemon's step watch reads (`clock::StepWatch`), so that a test can
//! step it without touching the machine's clock.

/// Panic here if the test suite asked for it (debug builds only).
#[inline]
pub fn point(name: &str) {
    if armed(name) {
        panic!("injected fault at {name}");
    }
}

/// Is the fault `name` asked for (`JOBWARDEN_TEST_FAULT`) and, if
/// `JOBWARDEN_TEST_FAULT_WHEN` names a file, does it exist now? Always
/// false in release builds.
#[inline]
pub fn armed(name: &str) -> bool {
    #[cfg(debug_assertions)]
    {
        asked(name)
            && std::env::var_os("JOBWARDEN_TEST_FAULT_WHEN")
                .is_none_or(|when| std::path::Path::new(&when).exists())
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = name;
        false
    }
}

/// Is the fault `name` asked for at all (armed or not yet)? Always false
/// in release builds.
#[inline]
pub fn asked(name: &str) -> bool {
    #[cfg(debug_assertions)]
    {
        std::env::var("JOBWARDEN_TEST_FAULT").is_ok_and(|v| v == name)
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = name;
        false
    }
}

/// Wait here if the test suite asked for it (debug builds only).
#[inline]
pub fn pause(name: &str) {
    #[cfg(debug_assertions)]
    {
        if std::env::var("JOBWARDEN_TEST_PAUSE").is_ok_and(|v| v == name) {
            let until = std::env::var_os("JOBWARDEN_TEST_PAUSE_UNTIL").unwrap_or_default();
            let mut reached = until.clone();
            reached.push(".reached");
            // A marker for the test outside any root (not a persistent write
            // of jobwarden's); best effort: a test that does not look for it
            // loses nothing.
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&reached);
            let start = std::time::Instant::now();
            while !std::path::Path::new(&until).exists()
                && start.elapsed() < std::time::Duration::from_secs(60)
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

/// The stderr queue's capacity the test suite asked for (debug builds only).
pub fn log_queue_capacity() -> Option<usize> {
    #[cfg(debug_assertions)]
    {
        std::env::var("JOBWARDEN_TEST_LOG_QUEUE")
            .ok()
            .and_then(|v| v.parse().ok())
    }
    #[cfg(not(debug_assertions))]
    None
}

/// Milliseconds the test suite adds to the wall clock the step watch reads
/// (debug builds only; 0 otherwise or when unset).
pub fn clock_offset_ms() -> i64 {
    #[cfg(debug_assertions)]
    {
        if let Some(path) = std::env::var_os("JOBWARDEN_TEST_CLOCK_OFFSET") {
            return std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
        }
    }
    0
}
