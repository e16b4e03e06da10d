//! jobwarden: a job-supervisor daemon. Operators and tools drop prompt files
//! (`*.prompt.md`) into an inbox; the daemon claims each exactly once by
//! atomic rename and runs a job for it under a per-job monitor process that
//! captures its output live, heartbeats its `job.json`, honours `ABORT`
//! markers and archives the prompt when the job ends. Jobs survive daemon
//! restarts. The contract is the on-disk layout (see `docs/`).
//!
//! # Layout
//!
//! - `main.rs` — calls [`commands::main`] (parse, start logging, run, map to an exit code),
//!   or, started as a sandboxed job's init, `jobwarden_sys::child::init`.
//! - `bin/jobwarden-bench/` — the benchmark harness (`jobwarden-bench`), which runs the real
//!   daemon (this binary, or itself in its place) against the performance promises.
//! - [`cli`] — clap types only.
//! - [`commands`] — one file per subcommand (`commands/history/`: one per `history`
//!   subcommand); the CLI edge (env, signals, printing); `commands/stdio.rs`: fds 0–2
//!   opened on `/dev/null` when started closed; `completions.rs`, `man.rs` and
//!   `cli_reference.rs` (hidden; `docs/cli-reference.md`): generated from the clap types;
//!   `commands/reload.rs`: `reload`, and the config part of `status`; `commands/waiting.rs`:
//!   prompts in the inbox as `jobs`, `show`, `logs` and `events` show them;
//!   `commands/cancel.rs`: `abort` of what has not started; `commands/queue_view.rs`: why
//!   queued jobs wait and what is paused, for `status` and `jobs`; `commands/exit.rs`: the one table of
//!   exit codes; `commands/watch.rs`: how the waiting commands sleep (inotify, re-check,
//!   poll); `commands/progress.rs`: what they say on stderr meanwhile;
//!   `commands/wait/`: `wait` (`scope.rs`: what `--project`/`--all` take in,
//!   `tracker.rs`: the followed jobs and their exit code);
//!   `commands/output/table.rs`: the one table renderer (terminal cells, colour);
//!   `commands/output/visible.rs`: what a job wrote, made harmless for a terminal;
//!   `commands/show/`: `show`'s facts and human form; `commands/args.rs`: `--since`/`--until`;
//!   `commands/notify.rs`: `notify test`; `commands/metrics.rs`: `metrics`;
//!   `commands/web.rs`: `web`.
//! - [`daemon`] — the daemon's loop: lock, reconcile, claim, schedule monitors;
//!   `daemon/start.rs` (the root made and checked, what is on disk reconciled before the
//!   first claim), `daemon/tick.rs` (the heartbeat tick, the clock watched, retention and
//!   the reconcile started on their timers), `daemon/lock.rs` (single instance, and the running daemon proven for `reload`), `daemon/owed_rows.rs` (ledger rows of ends the ledger did not take), `daemon/state_file.rs` (`daemon.json`),
//!   `daemon/ledger_state.rs` (its hold on `ledger.db`: reopened, checked, let go when damaged),
//!   `daemon/claims.rs` (what the watcher and rescans report, settling, cooldowns that
//!   defer a claim, retry requests, a claim's result),
//!   `daemon/inbox_watch.rs` (starting the watch, how often to rescan; the watch
//!   follows the folder at `inbox/`),
//!   `daemon/job_ends.rs` (jobs' ends reported or monitor exits, interrupted jobs and their
//!   orphans, claims held, queued aborts), `daemon/monitors.rs` (the monitors started, kept
//!   busy job after job; the idle ones retired), `daemon/startup_check.rs` (the start-up check: started after the
//!   first claims, its findings acted on by the loop), `daemon/notices.rs` (what the hooks are told, and
//!   when: a job's end, needs attention, cooldown, all done), `daemon/published_watch.rs` (the
//!   reconcile of published work: at start and every `reconcile_interval`, one pass at a
//!   time), `daemon/slurm_watch.rs` (one `squeue` for every Slurm job, written to
//!   `slurm.json` for their monitors), `daemon/control.rs` (reloading the
//!   config on request: SIGHUP),
//!   `daemon/schedule.rs` (which queued job starts next: pauses, limits of
//!   profiles and routes, one job per repository checkout) and `daemon/schedule/queue.rs`
//!   (the queue's order: priority, round robin over projects, claim order; parked jobs).
//! - [`monitor`] — the per-job process: `spawn.rs` (argv, env, the plan of a command),
//!   `sandbox.rs` (the job's sandbox: the folders a job may write, its pipes),
//!   `output.rs` (live capped log), `abort_watch.rs` (ABORT marker, watched on the
//!   monitor's one inotify instance),
//!   `contain.rs` (cgroup or process tree, killing everything a job started, limit verdicts),
//!   `stages.rs` (prepare, main command, publish: order and verdicts), `supervise.rs` (one
//!   command's supervision: its exit, heartbeats, ABORT and the timeout, the kill, the
//!   drain), `slurm.rs` (the
//!   main command as a Slurm batch job: submitted, followed, stopped, taken over by a new
//!   monitor) and `slurm/ending.rs` (its end: the batch script's record, else Slurm's word),
//!   outcome.
//! - [`web`] — `jobwarden web`, the local web page, its own process: `web/auth.rs` (the token,
//!   the session cookie, the CSRF token), `web/html.rs` (layout, escaping), `web/pages.rs`,
//!   `web/list.rs` (the job list and its filters), `web/charts.rs` (SVG), `web/actions.rs` (the POSTs, through the CLI's file contract), `web/live.rs` (server-sent
//!   events: the job list, a log as it grows).

pub mod cli;
pub mod commands;
pub mod daemon;
pub mod monitor;
pub mod web;
