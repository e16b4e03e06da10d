//! jobwarden: a job-supervisor daemon. Operators and tools drop prompt files
//! (`*.prompt.md`) into an inbox; the daemon claims each exactly once by
//! atomic rename and runs a job for it under a per-job monitor process that
//! captures its output live, heartbeats its `job.json`, honours `ABORT`
//! markers and archives the prompt when the job ends. Jobs survive daemon
//! restarts. The contract is the on-disk layout (see `docs/`); the crates
//! below this one are its floors (`docs/architecture.md`).
//!
//! This crate is the binary: `main.rs` calls [`commands::main`] (parse,
//! start logging, run, map to an exit code), or, started as a sandboxed
//! job's init, `jobwarden_sys::child::init`; `bin/jobwarden-init.rs` is
//! that init as a small program of its own, which monitors run instead.
//!
//! - [`cli`] — clap types only.
//! - [`commands`] — one file per subcommand (`commands/history/`: one per `history` subcommand),
//!   the CLI's edge (environment, signals, printing), and what they share: `exit.rs` the one
//!   table of exit codes, `output/` the one table renderer and a job's text made harmless,
//!   `watch.rs` and `progress.rs` how the waiting commands sleep and what they say meanwhile.

pub mod cli;
pub mod commands;
