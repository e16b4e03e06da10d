//! Integration tests for `jobwarden`: the real binary (`CARGO_BIN_EXE_jobwarden`)
//! against throwaway roots, one module per topic. Shared plumbing (sandbox,
//! daemon handle, `wait_until`, job scripts) lives in `support/`.

// Tests build their fixtures with plain std writes; the daemon's own
// persistence rules (clippy.toml) do not apply to them.
#![allow(clippy::disallowed_methods)]
// Nor do the printing rules: a test's output goes to the harness.
#![allow(clippy::disallowed_macros)]

mod support;

mod abort;
mod after;
mod arrival;
mod backlog;
mod bad_input;
mod browser;
mod browser_dashboard;
mod changed_files;
mod cli;
mod completion;
mod concurrency;
mod config;
mod daemon;
mod dashboard;
mod docs;
mod durability;
mod env;
mod fairness;
mod faults;
mod gc;
mod hardening;
mod hardening_files;
mod hardening_signals;
mod history;
mod hooks;
mod inflight;
mod inspect;
mod install;
mod job_sandbox;
mod layers;
mod ledger;
mod ledger_damage;
mod ledger_keeps;
mod lifecycle;
mod limits;
mod lookup;
mod merged;
mod metrics;
mod monitors;
mod notify;
mod originals;
mod pause;
mod phases;
mod pipes;
mod queue_control;
mod races;
mod readme;
mod recovery;
mod reload;
mod routes;
mod setup_failures;
mod shared_inbox;
mod shutdown;
mod slurm;
mod start_times;
mod startup;
mod storage;
mod submit;
mod under_systemd;
mod untrusted;
mod vocabulary;
mod wait;
mod web;
mod witness;
mod worktree_e2e;
mod worktree_scripts;
