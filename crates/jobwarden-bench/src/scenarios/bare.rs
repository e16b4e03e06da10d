//! The bare baseline of claim latency (DESIGN §12): what the machine
//! itself needs to react to a dropped file and start a job. A thread of
//! the harness watches a folder with inotify; for each file renamed in it
//! writes one small file with fsync, then forks and execs the same stamp
//! helper the daemon's jobs run, and waits for it. Nothing else: no
//! parsing, no records, no monitor.

#![allow(clippy::disallowed_methods)] // scratch files of the harness

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::monotonic_ns;
use crate::rig::{self, read_stamp, wait_for};

/// The name whose arrival ends the watch.
const STOP: &str = "stop";

/// The watching thread and its folders.
pub struct Bare {
    watched: PathBuf,
    stage: PathBuf,
    out: PathBuf,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Bare {
    /// Start watching a new folder under `base` (on the rig's filesystem).
    pub fn start(base: &Path) -> anyhow::Result<Bare> {
        let watched = base.join("bare-inbox");
        let stage = base.join("bare-stage");
        let out = base.join("bare-out");
        for dir in [&watched, &stage, &out] {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).context("starting inotify")?;
        inotify
            .add_watch(&watched, AddWatchFlags::IN_MOVED_TO)
            .with_context(|| format!("watching {}", watched.display()))?;
        let helper = rig::harness()?;
        let (w_out, w_dir) = (out.clone(), watched.clone());
        let thread = std::thread::Builder::new()
            .name("bare-watch".into())
            .spawn(move || watch(&inotify, &w_dir, &w_out, &helper))
            .context("starting the bare watcher")?;
        Ok(Bare {
            watched,
            stage,
            out,
            thread: Some(thread),
        })
    }

    /// One drop: from just before the rename to the helper's own stamp (ms).
    pub fn sample(&mut self, i: usize) -> anyhow::Result<f64> {
        let name = format!("b{i:05}");
        let staged = self.stage.join(&name);
        fs::write(&staged, "x\n")?;
        let stamp = self.out.join(format!("{name}.stamp"));
        let t0 = monotonic_ns();
        fs::rename(&staged, self.watched.join(&name))?;
        let got = wait_for(Duration::from_secs(30), "the bare job to start", || {
            read_stamp(&stamp)
        });
        match got {
            Ok(started) => Ok(started.saturating_sub(t0) as f64 / super::MS),
            Err(e) => Err(self.stop().err().unwrap_or(e)),
        }
    }

    /// End the watch and say how it went.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        if !thread.is_finished() {
            let staged = self.stage.join(STOP);
            fs::write(&staged, "")?;
            fs::rename(&staged, self.watched.join(STOP))?;
        }
        match thread.join() {
            Ok(result) => result,
            Err(_) => bail!("the bare watcher panicked"),
        }
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// For each file renamed into `dir`: one fsynced write, then the stamp
/// helper forked, exec'd and waited for.
fn watch(inotify: &Inotify, dir: &Path, out: &Path, helper: &Path) -> anyhow::Result<()> {
    loop {
        for event in inotify.read_events().context("reading inotify events")? {
            let Some(name) = event.name.as_ref().and_then(|n| n.to_str()) else {
                continue;
            };
            if name == STOP {
                return Ok(());
            }
            let mut record = fs::File::create(out.join(format!("{name}.rec")))?;
            record.write_all(b"{\"state\":\"running\"}\n")?;
            record.sync_all()?;
            let status = Command::new(helper)
                .arg("stamp")
                .arg(out.join(format!("{name}.stamp")))
                .stdin(Stdio::null())
                .status()
                .context("starting the stamp helper")?;
            if !status.success() {
                bail!(
                    "the stamp helper failed for {}: {status}",
                    dir.join(name).display()
                );
            }
        }
    }
}
