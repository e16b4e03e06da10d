//! `jobwarden reload [--json] [--timeout DUR]`: make the root's running
//! daemon reload its config and report what it did. The daemon is the
//! process proven to be this root's daemon (`proof::prove_daemon`: our
//! program, running `daemon`, holding the lock it opened at this root's
//! `daemon.lock`), never a pid only because a file names it; it is
//! signalled only once its `daemon.json` shows it can reload (an older
//! daemon would die of SIGHUP).
//! The answer is the daemon's own: the result it records in `daemon.json`
//! under a new reload number. Exit 0 when the config was applied, 2 when it
//! was refused (or no answer came in time), 1 when no daemon runs.
//!
//! Also what `status` shows of the config in force ([`ConfigView`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;

use crate::cli::{GlobalArgs, ReloadArgs};
use jobwarden_daemon::control::{self, ConfigState, ReloadResult, Verdict};
use jobwarden_daemon::state_file::{self, DaemonSeen, Phase};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::procfs::Proc;

use super::No;
use super::output::{alarm, fmt_ago, print_json, print_line};

/// How often `daemon.json` is read while waiting for the daemon.
const POLL: Duration = Duration::from_millis(20);

/// The largest config file whose digest `status` computes.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

pub fn run(global: &GlobalArgs, args: &ReloadArgs) -> anyhow::Result<ExitCode> {
    let loaded = super::load_lenient(global)?;
    let layout = loaded.layout;
    let deadline = Instant::now() + args.timeout;
    let daemon = daemon_proc(&layout)?;
    let pid = daemon.pid;
    let before = reloadable(&layout, daemon, deadline)?;
    let asked_at = Timestamp::now();
    // Proven again at the last moment: the same process, still the daemon.
    if let Err(why) = jobwarden_engine::proof::prove_daemon(pid, layout.root()).and_then(|p| {
        (p == daemon)
            .then_some(p)
            .ok_or_else(|| format!("process {pid} is another process now"))
    }) {
        return Err(No(format!("{why}; nothing was signalled")).into());
    }
    match kill(Pid::from_raw(pid), Signal::SIGHUP) {
        Ok(()) => {}
        Err(nix::errno::Errno::ESRCH) => {
            return Err(No(format!("the daemon (pid {pid}) is gone; nothing to reload")).into());
        }
        Err(e) => {
            return Err(e).with_context(|| format!("sending SIGHUP to the daemon (pid {pid})"));
        }
    }
    let result = answer(&layout, daemon, before, asked_at, deadline, args.timeout)?;
    let applied = result.result == Verdict::Applied;
    if args.json {
        print_json(&Answer {
            daemon_pid: pid,
            result: &result,
        })?;
    } else {
        print_human(&result)?;
    }
    Ok(if applied {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// `reload --json`: the daemon's pid and the reload's result.
#[derive(Serialize)]
struct Answer<'a> {
    daemon_pid: i32,
    #[serde(flatten)]
    result: &'a ReloadResult,
}

/// The root's running daemon, proven by the process itself
/// ([`jobwarden_engine::proof::prove_daemon`]): never a pid only because a file
/// (`daemon.lock`, `daemon.json`) names it.
fn daemon_proc(layout: &Layout) -> anyhow::Result<Proc> {
    jobwarden_daemon::lock::running_daemon(layout).map_err(|refused| {
        let root = layout.root().display();
        if refused.is_empty() {
            return No(format!(
                "no daemon runs on {root} (no process is proven to be its daemon); start it \
                 with `jobwarden daemon` or `systemctl start jobwarden`"
            ))
            .into();
        }
        No(format!(
            "no daemon runs on {root} that can be proven so; nothing was signalled: {}. \
             {} or {} name another process (a job can write them): if a daemon runs, \
             restart it (`systemctl restart jobwarden`) to take its lock again; else start it \
             with `jobwarden daemon` or `systemctl start jobwarden`",
            refused.join("; "),
            layout.daemon_lock().display(),
            layout.daemon_json().display()
        ))
        .into()
    })
}

/// The daemon's `daemon.json` once it is the proven daemon's and says it
/// can reload (a daemon still starting writes it shortly).
fn reloadable(layout: &Layout, daemon: Proc, deadline: Instant) -> anyhow::Result<ConfigState> {
    let pid = daemon.pid;
    loop {
        let seen = state_file::read(layout).map_err(anyhow::Error::msg)?;
        if let Some(seen) = seen.filter(|s| s.pid as i32 == pid) {
            if seen.phase == Phase::Stopping {
                anyhow::bail!(
                    "the daemon (pid {pid}) is stopping; its config is read again when it next starts"
                );
            }
            return seen.config.ok_or_else(|| {
                anyhow::anyhow!(
                    "the daemon (pid {pid}, jobwarden {}) cannot reload: SIGHUP would stop it; \
                     restart it to load the config",
                    seen.version
                )
            });
        }
        still_running(daemon)?;
        if Instant::now() >= deadline {
            anyhow::bail!(
                "the daemon (pid {pid}) has not written {} yet; nothing was signalled",
                layout.daemon_json().display()
            );
        }
        std::thread::sleep(POLL);
    }
}

/// The result of the reload asked for at `asked_at`: the first one
/// numbered after `before`'s that read the config since.
fn answer(
    layout: &Layout,
    daemon: Proc,
    before: ConfigState,
    asked_at: Timestamp,
    deadline: Instant,
    timeout: Duration,
) -> anyhow::Result<ReloadResult> {
    let pid = daemon.pid;
    loop {
        let seen: Option<DaemonSeen> = state_file::read(layout).ok().flatten();
        let last = seen
            .filter(|s| s.pid as i32 == pid)
            .and_then(|s| s.config)
            .and_then(|c| c.last_reload);
        if let Some(last) = last
            .filter(|l| l.generation > before.generation && l.at.epoch_ms() >= asked_at.epoch_ms())
        {
            return Ok(last);
        }
        still_running(daemon)?;
        if Instant::now() >= deadline {
            anyhow::bail!(
                "the daemon (pid {pid}) got SIGHUP but reported no reload within {}; \
                 see its log (journalctl -u jobwarden)",
                humantime::format_duration(timeout)
            );
        }
        std::thread::sleep(POLL);
    }
}

fn still_running(daemon: Proc) -> anyhow::Result<()> {
    if daemon.is_alive() {
        return Ok(());
    }
    anyhow::bail!(
        "the daemon (pid {}) stopped before it reported the reload",
        daemon.pid
    )
}

fn print_human(r: &ReloadResult) -> anyhow::Result<()> {
    let from = r
        .source
        .as_deref()
        .map_or("built-in defaults".to_owned(), |p| p.display().to_string());
    if r.result == Verdict::Refused {
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: reload #{} refused ({from}); the previous config stays in force:",
            r.generation
        ));
        for e in &r.errors {
            jobwarden_sys::logging::line(format_args!("  {e}"));
        }
        return Ok(());
    }
    if r.changes.is_empty() {
        print_line(format_args!(
            "reload #{} applied ({from}): no change",
            r.generation
        ))?;
    } else {
        print_line(format_args!("reload #{} applied ({from}):", r.generation))?;
        for c in &r.changes {
            print_line(format_args!("  {c}"))?;
        }
    }
    if !r.restart_needed.is_empty() {
        print_line("a restart is needed for:")?;
        for c in &r.restart_needed {
            print_line(format_args!("  {c}"))?;
        }
    }
    for w in &r.warnings {
        print_line(format_args!("warning: {w}"))?;
    }
    Ok(())
}

// -- status ----------------------------------------------------------------

/// The config part of `status` (`docs/status-json.md`).
#[derive(Debug, Serialize)]
pub struct ConfigView {
    /// The file the live daemon runs on (null: built-in defaults, or no
    /// live daemon that reports it).
    source: Option<PathBuf>,
    /// When the daemon read the config in force.
    loaded_at: Option<Timestamp>,
    /// The file on disk is not the text in force (null: unknown).
    changed_on_disk: Option<bool>,
    /// Reloads the live daemon served since it started.
    reloads: Option<u64>,
    /// The last of them.
    last_reload: Option<ReloadResult>,
    /// Every error of the config this command found on disk (it then used
    /// the built-in defaults to answer).
    errors: Vec<String>,
}

impl ConfigView {
    /// From the live daemon's `daemon.json` (`None` when none runs) and the
    /// config this command resolved (`path`, its `errors`).
    pub fn gather(live: Option<&DaemonSeen>, path: Option<&Path>, errors: Vec<String>) -> Self {
        let state = live.and_then(|s| s.config.as_ref());
        let changed_on_disk = state.map(|c| match &c.source {
            Some(source) => file_digest(source).as_deref() != Some(c.digest.as_str()),
            // On built-in defaults: a file has been written since.
            None => path.is_some(),
        });
        ConfigView {
            source: state.and_then(|c| c.source.clone()),
            loaded_at: state.map(|c| c.loaded_at),
            changed_on_disk,
            reloads: state.map(|c| c.generation),
            last_reload: state.and_then(|c| c.last_reload.clone()),
            errors,
        }
    }

    /// `status`'s lines for the config: `(label, text)`, nothing when all
    /// is well and no daemon runs.
    pub fn lines(&self) -> Vec<(&'static str, String)> {
        let now = Timestamp::now().epoch_ms();
        let mut out = Vec::new();
        if let Some(at) = self.loaded_at {
            let source = self
                .source
                .as_deref()
                .map_or("built-in defaults".to_owned(), |p| p.display().to_string());
            let reloads = match self.reloads {
                Some(n) if n > 0 => format!(", {n} reload(s) since start"),
                _ => String::new(),
            };
            out.push((
                "config",
                format!("{source}, loaded {}{reloads}", fmt_ago(at.epoch_ms(), now)),
            ));
        }
        let refused = self
            .last_reload
            .as_ref()
            .filter(|r| r.result == Verdict::Refused);
        if let Some(r) = refused {
            out.push((
                "",
                format!(
                    "reload #{} {} {}; the previous config stays in force:",
                    r.generation,
                    alarm("REFUSED"),
                    fmt_ago(r.at.epoch_ms(), now)
                ),
            ));
            out.extend(r.errors.iter().map(|e| ("", format!("  {e}"))));
        }
        let edited_since =
            refused.is_none_or(|r| r.source.as_deref().and_then(file_digest) != r.digest);
        if self.changed_on_disk == Some(true) {
            out.push((
                "",
                if edited_since {
                    "config changed on disk since load; run `jobwarden reload`".to_owned()
                } else {
                    "the config on disk is the one refused: fix it, then run `jobwarden reload`"
                        .to_owned()
                },
            ));
        }
        if let Some(r) = self
            .last_reload
            .as_ref()
            .filter(|r| r.result == Verdict::Applied)
        {
            out.extend(
                r.restart_needed
                    .iter()
                    .map(|k| ("", format!("restart needed for {k}"))),
            );
        }
        // Shown once: a refused reload already listed these.
        if !self.errors.is_empty() && edited_since {
            out.push((
                "",
                format!(
                    "the config on disk is {} (status used built-in defaults):",
                    alarm("INVALID")
                ),
            ));
            out.extend(self.errors.iter().map(|e| ("", format!("  {e}"))));
        }
        if out.first().is_some_and(|(label, _)| label.is_empty()) {
            out[0].0 = "config";
        }
        out
    }
}

/// `sha256:<hex>` of the file at `path`, if it can be read.
fn file_digest(path: &Path) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    // Never wait on a FIFO put where the config was.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES).read_to_end(&mut bytes).ok()?;
    Some(control::digest(&bytes))
}
