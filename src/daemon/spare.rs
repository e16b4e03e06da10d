//! The spare monitor: one monitor process started before it is needed —
//! exec'd, its config read, its runtime built — and waiting on its stdin.
//! Starting a job then costs one line written to a pipe instead of a fork
//! and an exec on the claim path; a new spare is started right after.
//!
//! A spare is started with the daemon's config of the moment and retired
//! (its stdin closed, so it exits untouched) when the config is reloaded
//! and when the daemon stops. A spare that died while waiting is noticed
//! when it is handed a job (the write fails): the job gets a monitor
//! started the ordinary way. A spare that takes its job and then dies is
//! any monitor that dies: its exit arrives like theirs.

use std::io::Write;
use std::process::Stdio;

use tokio::process::{Child, Command};

use crate::job::JobId;
use crate::layout::Layout;

use super::notify;

/// How long after a spare was handed its job the next one is started.
pub(super) const READY_AFTER: std::time::Duration = std::time::Duration::from_millis(15);

/// The command that starts a monitor: of job `job`, or a spare (`None`).
/// It runs this program in its own session, so that it and its job outlive
/// the daemon, with the config handed over on its stdin.
pub(super) fn monitor_command(layout: &Layout, job: Option<&JobId>) -> Command {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("jobwarden")
        .arg("--log-format")
        .arg(crate::logging::format().as_str())
        .arg("--root")
        .arg(layout.root())
        .arg("monitor")
        .arg(job.map_or("--spare", JobId::as_str))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for var in notify::PROTOCOL_ENV {
        cmd.env_remove(var);
    }
    // SAFETY: setsid is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    cmd
}

/// Start a monitor for `job` (`None`: a spare) and hand it `config_text`;
/// the child, and its stdin still open.
pub(super) fn start(
    layout: &Layout,
    job: Option<&JobId>,
    config_text: &str,
) -> std::io::Result<(Child, std::fs::File)> {
    let mut child = monitor_command(layout, job).spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the monitor's stdin was not piped"))?;
    let mut pipe = std::fs::File::from(stdin.into_owned_fd()?);
    // Written before anything else can happen (a shutdown, a crash): a
    // monitor that does not receive the whole frame exits without touching
    // its job. It reads at once, so this blocking write of a few KiB never
    // waits long.
    if let Err(e) = pipe.write_all(&crate::config::encode_handover(config_text)) {
        tracing::warn!("handing the config to a monitor: {e}");
    }
    Ok((child, pipe))
}

/// A monitor waiting for its job.
pub(super) struct Spare {
    child: Child,
    stdin: std::fs::File,
}

impl Spare {
    pub(super) fn start(layout: &Layout, config_text: &str) -> std::io::Result<Spare> {
        let (child, stdin) = start(layout, None, config_text)?;
        tracing::debug!(pid = child.id(), "spare monitor started");
        Ok(Spare { child, stdin })
    }

    /// Hand it job `id`: from here it is that job's monitor. An error means
    /// the spare is gone (or going) and took nothing.
    pub(super) fn hand(mut self, id: &JobId) -> std::io::Result<Child> {
        self.stdin.write_all(format!("{id}\n").as_bytes())?;
        Ok(self.child)
    }
}
