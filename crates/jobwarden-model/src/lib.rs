//! jobwarden-model: the on-disk contract as types. Every name under a
//! root, what each file holds, and the config that says how jobs run.
//! It spawns nothing, opens no database and schedules nothing.
//!
//! - [`layout`] — every name under the root, and name validation; `inbox.rs`, `control.rs`,
//!   `sandbox.rs` the inbox's names, `control/`'s, and what a sandboxed job may write.
//! - [`job_id`] — a job's id (UUIDv7; what the CLI's prefixes match).
//! - [`state`] — a job's states and the one table of their transitions.
//! - [`job`] — `job.json` (`record.rs`), its Slurm part (`slurm.rs`), where its prompt is (`placed.rs`).
//! - [`events`] — `events.jsonl`: a job's sequence-numbered events, fail-soft; the one list of ops.
//! - [`front_matter`] — the optional `key: value` block at the top of a prompt.
//! - [`abort`] — the ABORT marker (written, read).
//! - [`priority`] — a queued job's priority changed by hand: the `PRIORITY` request.
//! - [`control`] — pause markers under `control/`; an operator's input noted in a job's events.
//! - [`limits`] — how many jobs run at once, set by hand under `control/`.
//! - [`config`] — the config file: resolved, read, every problem named at once, validated
//!   (profiles, routes, limits, hooks, executors), shown, diffed, handed to a monitor.
//! - [`placeholders`] — a job's placeholder values and its workdir, resolved the one way.

pub mod abort;
pub mod config;
pub mod control;
pub mod events;
pub mod front_matter;
pub mod job;
pub mod job_id;
pub mod layout;
pub mod limits;
pub mod placeholders;
pub mod priority;
pub mod state;
