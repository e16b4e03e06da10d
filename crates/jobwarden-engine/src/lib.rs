//! jobwarden-engine: the operations on a root, one implementation each,
//! used by the daemon, the monitor, the CLI and the web page alike.
//!
//! - [`claim`] — an inbox file made a queued job (or rejected), exactly once.
//! - [`terminal`] — a job's end: terminal record, ledger row, then archive or requeue, resumable.
//! - [`retry`] — the retry policy (requeue, cooldowns), a retry request, a retry by hand.
//! - [`cancel`] — what has not started ended `cancelled`: a prompt in the inbox, a queued job.
//! - [`recover`] — the start-up reconcile, live monitors re-adopted, the start-up check.
//! - [`inbox`] — the inbox watched and scanned; a claimed prompt put back; queued jobs' ABORTs.
//! - [`shared_inbox`] — one inbox shared by several hosts' daemons: claim records, leases, sweeps.
//! - [`waiting`] — the prompts waiting in the inbox and what each waits for.
//! - [`pause`] — what is checked before a pause is written (a profile that exists).
//! - [`daemon_file`] — `daemon.json` as others read it: phase, heartbeat, queue, config in force.
//! - [`lookup`] — the CLI's `<job>` argument: an id, a prefix, a short id or a prompt's name.
//! - [`submit`] — a prompt dropped into the inbox the one way.
//! - [`gc`] — retention of run folders, archived prompts and artifacts.
//! - [`published`] — the reconcile of published work: merged, deleted, worktree gone.
//! - [`hooks`] — notices delivered to `[[notify]]` hooks, retried, recorded in the job's events.
//! - [`metrics`] — the Prometheus text exposition.
//! - [`slurm`] — Slurm as jobwarden drives it: the batch script, `slurm.json`, its client.
//! - [`proof`] — the proof that a process is a root's monitor or daemon.
//! - [`handover`] — what a daemon and its monitors say on the monitor's pipes.
//! - [`failure`] — the two error tiers (daemon, job), gathering the errors of the floors below.

pub mod cancel;
pub mod claim;
pub mod daemon_file;
pub mod failure;
pub mod gc;
pub mod handover;
pub mod hooks;
pub mod inbox;
pub mod lookup;
pub mod metrics;
pub mod pause;
pub mod proof;
pub mod published;
pub mod recover;
pub mod retry;
pub mod shared_inbox;
pub mod slurm;
pub mod submit;
pub mod terminal;
pub mod waiting;
