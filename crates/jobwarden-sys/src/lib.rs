//! jobwarden-sys: the machine, as jobwarden uses it. Knows no job, no
//! root's layout, no database: files, processes, clocks and logs.
//!
//! - [`error`] — an I/O error with the path it happened at.
//! - [`fsio`] — durable writes (atomic replace, rename without replace, locks);
//!   `beneath.rs` every open under a root, `read.rs` capped reads of what it opens, `batch.rs` group commit, `across.rs` a copy across filesystems.
//! - [`storage`] — is a folder accepting writes (full, read-only); a tmpfs for tests.
//! - [`clock`] — RFC 3339 millisecond timestamps; a point in time as an operator types it.
//! - [`procfs`] — facts about processes from `/proc`: start times, lock holders, descendants, CPU time.
//! - [`memory`] — this process's memory: its heaps, and its program's pages let go of once run.
//! - [`child`] — a child started without copying its parent, in a sandbox when asked;
//!   `enter.rs` the namespaces entered, `init.rs` the sandbox's first process (`jobwarden-init`).
//! - [`cgroup`] — a job's own cgroup v2 where a subtree is delegated: limits, OOM count, `cgroup.kill`.
//! - [`inotify`] — an inotify instance registered with the runtime.
//! - [`logging`] — the stderr log, text or JSON; `queue.rs` the one way to stderr, never blocking.
//! - [`git`] — git's commands run with a deadline, and what git says of a published branch.
//! - [`diagnostics`] — compiler and linter diagnostics read from a program's output.
//! - [`host`] — this machine's name.
//! - [`fault`] — fault-injection points for the test suite (debug builds only).

pub mod cgroup;
pub mod child;
pub mod clock;
pub mod diagnostics;
pub mod error;
pub mod fault;
pub mod fsio;
pub mod git;
pub mod host;
pub mod inotify;
pub mod logging;
pub mod memory;
pub mod procfs;
pub mod storage;
