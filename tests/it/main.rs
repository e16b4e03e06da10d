//! Integration tests for `jobwarden`: the real binary (`CARGO_BIN_EXE_jobwarden`)
//! against throwaway roots, one module per topic. Shared plumbing (sandbox,
//! daemon handle, `wait_until`, job scripts) lives in `support/`.

// Tests build their fixtures with plain std writes; the daemon's own
// persistence rules (clippy.toml) do not apply to them.
#![allow(clippy::disallowed_methods)]

mod support;

mod abort;
mod bad_input;
mod bench;
mod cli;
mod concurrency;
mod config;
mod daemon;
mod env;
mod faults;
mod gc;
mod hardening;
mod history;
mod inspect;
mod install;
mod ledger;
mod lifecycle;
mod notify;
mod phases;
mod races;
mod recovery;
mod routes;
mod shutdown;
mod storage;
mod submit;
mod worktree_e2e;
mod worktree_scripts;
