//! The harness's rig: a temporary root with a config, the real daemon
//! started on it, prompts and ABORT markers renamed into place, and waits
//! on files with deadlines.

#![allow(clippy::disallowed_methods)] // scratch files of the harness

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use jobwarden_model::layout::{Layout, PromptName};

/// A prompt's key.
pub fn prompt(project: &str, name: &str) -> PromptName {
    PromptName {
        project: project.to_owned(),
        name: name.to_owned(),
    }
}

/// The program the daemon runs as: the `jobwarden` next to this binary,
/// else this binary started under that name.
pub fn jobwarden() -> anyhow::Result<(PathBuf, bool)> {
    let me = std::env::current_exe().context("locating the harness binary")?;
    let sibling = me.with_file_name("jobwarden");
    if sibling.is_file() {
        Ok((sibling, false))
    } else {
        Ok((me, true))
    }
}

/// This binary, for the job helpers (`stamp`, `await-term`).
pub fn harness() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("locating the harness binary")
}

/// A temporary root and its config file.
pub struct Rig {
    _dir: tempfile::TempDir,
    pub base: PathBuf,
    pub root: PathBuf,
    /// Every path under the root comes from here, as in the daemon.
    pub layout: Layout,
    config: PathBuf,
    daemon: Option<Child>,
}

impl Rig {
    /// A fresh root whose config is `toml`, in which `@OUT@` stands for the
    /// folder where job helpers leave their stamps and `@HARNESS@` for this
    /// binary.
    pub fn new(toml: &str) -> anyhow::Result<Rig> {
        let dir = tempfile::Builder::new()
            .prefix("jobwarden-bench-")
            .tempdir()
            .context("creating a temporary root")?;
        let base = dir.path().to_path_buf();
        let root = base.join("root");
        let layout = Layout::new(root.clone());
        fs::create_dir_all(layout.inbox())?;
        let config = base.join("config.toml");
        let toml = toml
            .replace("@OUT@", &base.join("out").display().to_string())
            .replace("@HARNESS@", &harness()?.display().to_string());
        fs::write(&config, toml)?;
        fs::create_dir_all(base.join("out"))?;
        fs::create_dir_all(base.join("stage"))?;
        Ok(Rig {
            _dir: dir,
            base,
            root,
            layout,
            config,
            daemon: None,
        })
    }

    pub fn out(&self) -> PathBuf {
        self.base.join("out")
    }

    /// A `jobwarden` command on this root.
    pub fn command(&self, args: &[&str]) -> anyhow::Result<Command> {
        let (program, as_self) = jobwarden()?;
        let mut cmd = Command::new(program);
        if as_self {
            std::os::unix::process::CommandExt::arg0(&mut cmd, "jobwarden");
        }
        cmd.arg("--root")
            .arg(&self.root)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        Ok(cmd)
    }

    /// Start the daemon and wait until it says it is running.
    pub fn start(&mut self) -> anyhow::Result<u32> {
        let pid = self.spawn()?;
        self.wait_ready(pid)?;
        Ok(pid)
    }

    /// Start the daemon without waiting for it.
    pub fn spawn(&mut self) -> anyhow::Result<u32> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join("daemon.log"))?;
        let child = self
            .command(&["daemon"])?
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting the daemon")?;
        let pid = child.id();
        self.daemon = Some(child);
        Ok(pid)
    }

    /// Wait until the daemon `pid` says it is running.
    pub fn wait_ready(&self, pid: u32) -> anyhow::Result<()> {
        let json = self.layout.daemon_json();
        wait_for(Duration::from_secs(120), "the daemon to be ready", || {
            let v: serde_json::Value = serde_json::from_slice(&fs::read(&json).ok()?).ok()?;
            (v["pid"] == pid && v["phase"] == "running").then_some(())
        })
    }

    /// Run `jobwarden ARGS` on this root to its end; fail unless it
    /// exits with one of `ok` codes.
    pub fn run(&self, args: &[&str], ok: &[i32]) -> anyhow::Result<()> {
        let out = self
            .command(args)?
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("running jobwarden {}", args.join(" ")))?;
        if !out.status.code().is_some_and(|c| ok.contains(&c)) {
            bail!(
                "jobwarden {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Reap the daemon if it has exited (a stopped daemon is then
    /// forgotten: [`Rig::stop`] has nothing left to do).
    pub fn reap_if_exited(&mut self) {
        if let Some(child) = self.daemon.as_mut()
            && matches!(child.try_wait(), Ok(Some(_)))
        {
            self.daemon = None;
        }
    }

    /// SIGTERM the daemon and wait for it.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.daemon.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
            child.wait()?;
        }
        Ok(())
    }

    /// Write a prompt outside the inbox (not yet visible).
    pub fn stage(&self, project: &str, name: &str, body: &str) -> anyhow::Result<PathBuf> {
        let staged = self.base.join("stage").join(format!("{project}.{name}"));
        fs::write(&staged, body)?;
        Ok(staged)
    }

    /// Rename a staged prompt into the inbox (its folder created first).
    pub fn drop_staged(&self, staged: &Path, project: &str, name: &str) -> anyhow::Result<()> {
        let to = self.layout.waiting_prompt(&prompt(project, name));
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir)?;
        }
        fs::rename(staged, &to).with_context(|| format!("dropping {project}/{name}"))
    }

    /// Ask the job `id` to stop, as an operator's tool does: its `ABORT`
    /// marker written aside and renamed into place.
    pub fn abort(&self, id: &jobwarden_model::job::JobId) -> anyhow::Result<()> {
        let marker = self.layout.abort_marker(id);
        let tmp = marker.with_extension("tmp");
        fs::write(&tmp, "bench\n")?;
        fs::rename(&tmp, &marker).with_context(|| format!("renaming {}", marker.display()))
    }

    /// Has the job of `project/name` ended and moved its prompt on (it is
    /// neither waiting nor claimed any more)?
    pub fn settled(&self, project: &str, name: &str) -> bool {
        let p = prompt(project, name);
        !self.layout.running_prompt(&p).exists() && !self.layout.waiting_prompt(&p).exists()
    }

    /// Wait until every prompt of `names` in `project` has settled. Jobs
    /// end roughly in the order they were dropped, so each look goes on
    /// from the first one not yet settled and stops at the next that is
    /// not: the harness does not compete with the daemon for the CPU by
    /// looking at thousands of files every few milliseconds.
    pub fn wait_all_settled(
        &self,
        project: &str,
        names: &[String],
        deadline: Duration,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        let mut next = 0;
        loop {
            while next < names.len() && self.settled(project, &names[next]) {
                next += 1;
            }
            if next == names.len() {
                return Ok(());
            }
            if start.elapsed() > deadline {
                bail!(
                    "timed out after {deadline:?}: {} of {} jobs of {project} have not ended",
                    names.len() - next,
                    names.len()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Poll `cond` (every 200 µs at first, backing off to 5 ms) until it yields,
/// or fail naming `what`.
pub fn wait_for<T>(
    deadline: Duration,
    what: &str,
    mut cond: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    loop {
        if let Some(v) = cond() {
            return Ok(v);
        }
        if start.elapsed() > deadline {
            bail!("timed out after {deadline:?} waiting for {what}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// A number written by a job helper, once the file exists.
pub fn read_stamp(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in MiB.
pub fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    kb_field(&status, field).map(|kb| kb as f64 / 1024.0)
}

/// Resident set size of `pid` in MiB (`VmRSS`).
pub fn rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmRSS")
}

/// What a process's pages cost (`/proc/<pid>/smaps_rollup`), in MiB.
#[derive(Debug, Default, Clone, Copy)]
pub struct Memory {
    pub rss: f64,
    /// Its share of every page it maps (a page shared by n counts 1/n).
    pub pss: f64,
    /// Pages no other process maps (`Private_Clean` + `Private_Dirty`).
    pub private: f64,
}

/// `pid`'s memory from `/proc/<pid>/smaps_rollup`.
pub fn memory(pid: u32) -> Option<Memory> {
    let text = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let mib = |field: &str| kb_field(&text, field).map(|kb| kb as f64 / 1024.0);
    Some(Memory {
        rss: mib("Rss")?,
        pss: mib("Pss")?,
        private: mib("Private_Clean")? + mib("Private_Dirty")?,
    })
}

/// The number of `field:   123 kB` in a `/proc` text.
fn kb_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// CPU time `pid` has used (user + system), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}
