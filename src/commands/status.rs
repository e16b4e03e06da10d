//! `jobwarden status [--json]`: is the daemon alive (its lock, read from
//! `/proc/locks` without touching it, and `daemon.json`'s heartbeat), and
//! does the root accept writes (probed here, and as the daemon last saw
//! it). "Not running" is an answer, not an error: the exit status is 0
//! whenever the question could be answered.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::cli::{GlobalArgs, StatusArgs};
use crate::clock::Timestamp;
use crate::config::Config;
use crate::daemon::state_file::{self, DaemonSeen, Phase};
use crate::layout::Layout;
use crate::storage::{self, Condition};

use super::output::{fmt_ago, fmt_bytes, print_json};

/// A heartbeat older than this many intervals is stale.
const STALE_HEARTBEATS: u32 = 3;

pub fn run(global: &GlobalArgs, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    let status = Status::gather(&config, &layout);
    if args.json {
        print_json(&status)?;
    } else {
        print_human(&status)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Serialize)]
pub struct Status {
    root: String,
    version: &'static str,
    daemon: DaemonView,
    storage: StorageView,
}

#[derive(Debug, Serialize)]
struct DaemonView {
    alive: bool,
    /// The pid holding the lock, or the last one recorded.
    pid: Option<u32>,
    phase: Option<Phase>,
    started_at: Option<Timestamp>,
    heartbeat_at: Option<Timestamp>,
    /// Alive, but its heartbeat is older than three intervals (a wedged
    /// loop, or `daemon.json` cannot be written).
    heartbeat_stale: bool,
    version: Option<String>,
    host: Option<String>,
    watch: Option<String>,
    running: Option<usize>,
    queued: Option<usize>,
    /// Jobs whose end waits to be recorded (storage refused the write).
    unsettled: Option<usize>,
    /// Why `daemon.json` could not be used, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

#[derive(Debug, Serialize)]
struct StorageView {
    /// The worse of this command's probe and what the live daemon reported.
    condition: Condition,
    free_bytes: Option<u64>,
    free_inodes: Option<u64>,
    /// Since when the daemon has seen the condition, if it reported it.
    since: Option<Timestamp>,
    detail: Option<String>,
}

impl Status {
    fn gather(config: &Config, layout: &Layout) -> Status {
        let (seen, problem) = match state_file::read(layout) {
            Ok(seen) => (seen, None),
            Err(e) => (None, Some(e)),
        };
        let holder = crate::procfs::flock_holder(&layout.daemon_lock());
        let alive = match &holder {
            Ok(holder) => holder.is_some(),
            // No /proc/locks: trust a fresh heartbeat from a live pid.
            Err(_) => seen.as_ref().is_some_and(|s| {
                crate::procfs::is_running(s.pid as i32)
                    && !stale(s.heartbeat_at, config.heartbeat_interval)
            }),
        };
        let pid = holder
            .ok()
            .flatten()
            .map(|p| p as u32)
            .or(seen.as_ref().map(|s| s.pid));
        let daemon = DaemonView::new(alive, pid, seen.as_ref(), config, problem);
        let storage = StorageView::new(layout, alive.then_some(seen.as_ref()).flatten());
        Status {
            root: layout.root().display().to_string(),
            version: env!("CARGO_PKG_VERSION"),
            daemon,
            storage,
        }
    }
}

fn stale(heartbeat: Timestamp, interval: Duration) -> bool {
    heartbeat.age() > interval * STALE_HEARTBEATS
}

impl DaemonView {
    fn new(
        alive: bool,
        pid: Option<u32>,
        seen: Option<&DaemonSeen>,
        config: &Config,
        problem: Option<String>,
    ) -> Self {
        // Counts and phase only mean something while the daemon lives.
        let live = seen.filter(|_| alive);
        DaemonView {
            alive,
            pid,
            phase: seen.map(|s| if alive { s.phase } else { Phase::Stopped }),
            started_at: seen.map(|s| s.started_at),
            heartbeat_at: seen.map(|s| s.heartbeat_at),
            heartbeat_stale: alive
                && seen.is_none_or(|s| stale(s.heartbeat_at, config.heartbeat_interval)),
            version: seen.map(|s| s.version.clone()),
            host: seen.and_then(|s| s.host.clone()),
            watch: live.and_then(|s| s.watch.clone()),
            running: live.map(|s| s.running),
            queued: live.map(|s| s.queued),
            unsettled: live.map(|s| s.unsettled),
            problem,
        }
    }
}

impl StorageView {
    fn new(layout: &Layout, live: Option<&DaemonSeen>) -> Self {
        let probe = storage::probe(layout.root()).ok();
        let reported = live.and_then(|s| s.storage.clone()).filter(|h| !h.is_ok());
        let probed = probe.as_ref().map_or(Condition::Ok, |p| p.condition);
        let (condition, since, detail) = match reported {
            // The daemon saw a failing write the probe may not show (quota).
            Some(h) if probed == Condition::Ok => (h.condition, Some(h.since), h.detail),
            Some(h) if h.condition == probed => (probed, Some(h.since), h.detail),
            _ => (probed, None, None),
        };
        StorageView {
            condition,
            free_bytes: probe.as_ref().map(|p| p.free_bytes),
            free_inodes: probe
                .as_ref()
                .map(|p| p.free_inodes)
                .filter(|&n| n != u64::MAX),
            since,
            detail,
        }
    }
}

fn print_human(s: &Status) -> anyhow::Result<()> {
    use std::io::Write;
    let now = Timestamp::now().epoch_ms();
    let ago =
        |t: Option<Timestamp>| t.map_or_else(|| "never".to_owned(), |t| fmt_ago(t.epoch_ms(), now));
    let d = &s.daemon;
    let daemon = if d.alive {
        let pid = d.pid.map(|p| format!("pid {p}, ")).unwrap_or_default();
        let phase = d.phase.map_or("", |p| match p {
            Phase::Starting => ", starting",
            Phase::Stopping => ", stopping (waiting for running jobs)",
            Phase::Running | Phase::Stopped => "",
        });
        let stale = if d.heartbeat_stale { " (STALE)" } else { "" };
        format!(
            "running ({pid}heartbeat {}{stale}{phase})",
            ago(d.heartbeat_at)
        )
    } else if d.heartbeat_at.is_some() {
        format!("not running (last heartbeat {})", ago(d.heartbeat_at))
    } else {
        "not running (never started on this root)".to_owned()
    };
    let st = &s.storage;
    let free = st
        .free_bytes
        .map(|b| format!("{} free", fmt_bytes(b)))
        .unwrap_or_else(|| "free space unknown".to_owned());
    let storage = match st.condition {
        Condition::Ok => format!("ok, {free}"),
        bad => {
            let consequence = if d.alive {
                "claims and job starts wait until writes succeed"
            } else {
                "nothing can be claimed until writes succeed"
            };
            let since = st
                .since
                .map(|t| format!(" since {}", ago(Some(t))))
                .unwrap_or_default();
            let detail = st
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            format!(
                "{}{since}{detail} ({free}); {consequence}",
                if bad == Condition::Full {
                    "FULL"
                } else {
                    "READ-ONLY"
                }
            )
        }
    };
    let mut out = std::io::stdout().lock();
    let mut line = |k: &str, v: &str| writeln!(out, "{k:<9}{v}");
    line("daemon", &daemon)?;
    line("root", &format!("{} (jobwarden {})", s.root, s.version))?;
    line("storage", &storage)?;
    if let (Some(r), Some(q)) = (d.running, d.queued) {
        let unsettled = d
            .unsettled
            .filter(|&n| n > 0)
            .map(|n| format!(", {n} waiting to be recorded"))
            .unwrap_or_default();
        line("jobs", &format!("{r} running, {q} queued{unsettled}"))?;
    }
    if let Some(p) = &d.problem {
        line("warning", p)?;
    }
    Ok(())
}
