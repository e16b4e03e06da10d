//! The monitors this daemon started, kept busy: a monitor that has ended
//! its job says so on its stdout and waits for the next one on its stdin
//! (the lines of `handover.rs`), so that starting a job costs a
//! line written to a pipe instead of a fork and an exec of the monitor,
//! whose pages and runtime are already warm.
//!
//! - A job goes to the idle monitor that ended a job last (the warmest);
//!   with none idle, to a new monitor (`monitor --spare`, handed the id at
//!   once). One monitor is kept idle ahead of need: after a handover took
//!   the last one, a new one is started [`READY_AFTER`] later.
//! - A monitor serves at most [`JOBS_PER_MONITOR`] jobs, and monitors idle
//!   for over [`IDLE_LIMIT`] are retired but one: retiring closes its
//!   stdin, and it exits untouched. So are the idle ones when the config is
//!   reloaded (busy ones, which hold the old config, when their job ends)
//!   and when the daemon stops.
//! - Each monitor's reports and its exit arrive as [`Report`]s, in the
//!   order it made them. A monitor that dies while idle took nothing; one
//!   that dies with a job is that job's monitor gone (`job_ends.rs`); one
//!   whose stdin write fails is gone or going, and the job goes to another.
//!
//! A monitor runs this program in its own session, so that it and its job
//! outlive the daemon; a monitor whose daemon is gone ends after its job
//! (its report finds no reader, or its stdin ends).

use std::collections::HashMap;
use std::io::Write;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use jobwarden_engine::handover::{self, Said};
use jobwarden_engine::terminal::Handed;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::Layout;

use super::notify;

/// The descriptor limit the daemon started with, before it raised its own
/// (set by [`raise_fd_limit`]); monitors, and so jobs, get this one.
static FD_LIMIT_AT_START: std::sync::OnceLock<Option<jobwarden_sys::procfs::FdLimit>> =
    std::sync::OnceLock::new();

/// Raise the daemon's descriptor limit (see [`jobwarden_sys::procfs::raise_fd_limit`]),
/// once, remembering the one its monitors are given.
pub(super) fn raise_fd_limit() {
    FD_LIMIT_AT_START.get_or_init(jobwarden_sys::procfs::raise_fd_limit);
}

/// How long after the last idle monitor was handed a job the next one is
/// started: at once, its exec would take a core from the monitor that is
/// starting its job right then.
pub(super) const READY_AFTER: Duration = Duration::from_millis(15);

/// Jobs one monitor serves before it is retired (what a long life might
/// leave in its heap is given back with the process).
const JOBS_PER_MONITOR: u32 = 500;

/// How long a monitor may wait for a job, beyond the one kept ready.
const IDLE_LIMIT: Duration = Duration::from_secs(10);

/// What a monitor said, or that it exited.
#[derive(Debug)]
pub(super) enum Report {
    /// Its job has run for a moment: the job index is the daemon's to tell.
    Running(MonitorKey, String),
    /// Its job ended, wholly recorded, or recorded in `job.json` with the
    /// rest handed over: the monitor waits for the next.
    Ended(MonitorKey, String, Option<Handed>),
    /// The process exited (its stdout closed first).
    Exited(MonitorKey, std::io::Result<ExitStatus>),
}

impl Report {
    /// An end whose monitor recorded it in `job.json` and handed the rest
    /// over: the daemon's part (the row, the prompt's move) is recoverable
    /// from the record alone.
    pub(super) fn is_handed_end(&self) -> bool {
        matches!(self, Report::Ended(_, _, Some(_)))
    }
}

/// One monitor of this daemon's, for as long as it lives.
pub(super) type MonitorKey = u64;

struct Monitor {
    /// `None` once retired: it exits at the end of its current job.
    stdin: Option<std::fs::File>,
    job: Option<JobId>,
    served: u32,
    /// The config it holds, by [`Pool::generation`].
    generation: u64,
    idle_since: Instant,
}

pub(super) struct Pool {
    monitors: HashMap<MonitorKey, Monitor>,
    /// Idle monitors, the one idle longest first.
    idle: Vec<MonitorKey>,
    next_key: MonitorKey,
    /// Bumped at each reload: monitors of an older one are not reused.
    generation: u64,
    reports: mpsc::UnboundedReceiver<Report>,
    sender: mpsc::UnboundedSender<Report>,
    /// Each monitor's reader of its stdout and waiter of its exit.
    readers: JoinSet<()>,
    /// May jobs' cgroups have controllers? Not when the daemon moved
    /// itself into its cgroup leaf (see `cgroup.rs`).
    pub(super) cgroup_controllers: bool,
}

impl Pool {
    pub(super) fn new() -> Self {
        let (sender, reports) = mpsc::unbounded_channel();
        Pool {
            monitors: HashMap::new(),
            idle: Vec::new(),
            next_key: 0,
            generation: 0,
            reports,
            sender,
            readers: JoinSet::new(),
            cgroup_controllers: true,
        }
    }

    /// The next report of any monitor.
    pub(super) async fn next(&mut self) -> Report {
        // Never `None`: the pool holds a sender.
        match self.reports.recv().await {
            Some(report) => report,
            None => std::future::pending().await,
        }
    }

    /// A report that has already arrived, if any.
    pub(super) fn try_next(&mut self) -> Option<Report> {
        self.reports.try_recv().ok()
    }

    pub(super) fn has_idle(&self) -> bool {
        !self.idle.is_empty()
    }

    /// Start a monitor that waits for a job, with `config_text`.
    pub(super) fn start(
        &mut self,
        layout: &Layout,
        config_text: &str,
    ) -> std::io::Result<MonitorKey> {
        let mut child = monitor_command(layout, self.cgroup_controllers).spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the monitor's stdin was not piped"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("the monitor's stdout was not piped"))?;
        let mut stdin = std::fs::File::from(stdin.into_owned_fd()?);
        // Written before anything else can happen (a shutdown, a crash): a
        // monitor that does not receive the whole frame exits without
        // touching any job. It reads at once, so this blocking write of a
        // few KiB never waits long.
        if let Err(e) = stdin.write_all(&jobwarden_model::config::encode_handover(config_text)) {
            tracing::warn!("handing the config to a monitor: {e}");
        }
        let key = self.next_key;
        self.next_key += 1;
        tracing::debug!(pid = child.id(), "monitor started");
        let sender = self.sender.clone();
        self.readers.spawn(read_reports(key, child, stdout, sender));
        self.monitors.insert(
            key,
            Monitor {
                stdin: Some(stdin),
                job: None,
                served: 0,
                generation: self.generation,
                idle_since: Instant::now(),
            },
        );
        self.idle.push(key);
        Ok(key)
    }

    /// Hand job `id` to the idle monitor that ended a job last. False if
    /// no idle monitor took it (none is idle, or each one tried is gone).
    pub(super) fn hand(&mut self, id: &JobId) -> bool {
        while let Some(key) = self.idle.pop() {
            let Some(m) = self.monitors.get_mut(&key) else {
                continue;
            };
            let Some(stdin) = m.stdin.as_mut() else {
                continue;
            };
            match stdin.write_all(format!("{id}\n").as_bytes()) {
                Ok(()) => {
                    m.job = Some(id.clone());
                    return true;
                }
                Err(e) => {
                    tracing::info!(job = %id, "an idle monitor is gone ({e}); trying another");
                    m.stdin = None;
                }
            }
        }
        false
    }

    /// Monitor `key` ended job `id`: it is idle now, or retired. The job,
    /// if it was the one the monitor had.
    pub(super) fn ended(&mut self, key: MonitorKey, id: &str, stopping: bool) -> Option<JobId> {
        let m = self.monitors.get_mut(&key)?;
        if m.job.as_ref().is_none_or(|j| j.as_str() != id) {
            tracing::warn!(
                job = id,
                "a monitor reported the end of a job it was not handed; ignored"
            );
            return None;
        }
        let job = m.job.take();
        m.served += 1;
        m.idle_since = Instant::now();
        let keep = !stopping
            && m.stdin.is_some()
            && m.generation == self.generation
            && m.served < JOBS_PER_MONITOR;
        if keep {
            self.idle.push(key);
        } else {
            m.stdin = None;
        }
        job
    }

    /// The job monitor `key` serves, if it is `id` (a report about any
    /// other job is not trusted).
    pub(super) fn serves(&self, key: MonitorKey, id: &str) -> Option<&JobId> {
        let job = self.monitors.get(&key)?.job.as_ref();
        job.filter(|j| j.as_str() == id)
    }

    /// Monitor `key` exited: the job it had, if any.
    pub(super) fn exited(&mut self, key: MonitorKey) -> Option<JobId> {
        self.idle.retain(|k| *k != key);
        self.monitors.remove(&key).and_then(|m| m.job)
    }

    /// Retire every idle monitor; with `reload`, busy ones too, at the end
    /// of their job (they hold the config being replaced).
    pub(super) fn retire_idle(&mut self, reload: bool) {
        if reload {
            self.generation += 1;
        }
        for key in self.idle.drain(..) {
            if let Some(m) = self.monitors.get_mut(&key) {
                m.stdin = None;
            }
        }
    }

    /// Retire the monitors idle for over [`IDLE_LIMIT`], keeping the one
    /// that ended a job last.
    pub(super) fn retire_long_idle(&mut self) {
        let Some(keep) = self.idle.last().copied() else {
            return;
        };
        let monitors = &mut self.monitors;
        self.idle.retain(|key| {
            let Some(m) = monitors.get_mut(key) else {
                return false;
            };
            if *key == keep || m.idle_since.elapsed() < IDLE_LIMIT {
                return true;
            }
            m.stdin = None;
            false
        });
    }
}

/// Forward monitor `key`'s reports, then its exit.
async fn read_reports(
    key: MonitorKey,
    mut child: Child,
    stdout: ChildStdout,
    sender: mpsc::UnboundedSender<Report>,
) {
    let mut lines = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut lines)
            .take(handover::REPORT_MAX)
            .read_until(b'\n', &mut line)
            .await;
        if matches!(read, Ok(0) | Err(_)) {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let report = match handover::parse_report(text.trim_end_matches('\n')) {
            Some(Said::Running(id)) => Report::Running(key, id.to_owned()),
            Some(Said::Ended(id, handed)) => Report::Ended(key, id.to_owned(), handed),
            None => {
                let shown: String = text.chars().take(200).collect();
                tracing::warn!(report = %shown.trim_end(), "a monitor said something that is not a report; ignored");
                continue;
            }
        };
        if sender.send(report).is_err() {
            return;
        }
    }
    let status = child.wait().await;
    let _ = sender.send(Report::Exited(key, status));
}

/// The command that starts a monitor that waits for its jobs on stdin. It
/// runs this program in its own session, so that it and its job outlive
/// the daemon, with the config handed over on its stdin.
fn monitor_command(layout: &Layout, cgroup_controllers: bool) -> Command {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("jobwarden")
        .arg("--log-format")
        .arg(jobwarden_sys::logging::format().as_str())
        .arg("--root")
        .arg(layout.root())
        .arg("monitor")
        .arg("--spare")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for var in notify::PROTOCOL_ENV {
        cmd.env_remove(var);
    }
    if cgroup_controllers {
        cmd.env_remove(jobwarden_sys::cgroup::NO_CONTROLLERS_ENV);
    } else {
        cmd.env(jobwarden_sys::cgroup::NO_CONTROLLERS_ENV, "1");
    }
    let limit = FD_LIMIT_AT_START.get().copied().flatten();
    // SAFETY: setsid and setrlimit are async-signal-safe and touch no
    // memory of ours.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(limit) = limit {
                jobwarden_sys::procfs::restore_fd_limit(limit)?;
            }
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    cmd
}
