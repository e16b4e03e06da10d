//! The same claim-latency and throughput scenarios through pueue, when
//! `pueue` and `pueued` are on PATH (`cargo install pueue --locked`), in
//! the same run, with ratios to jobwarden's figures and the bare
//! baselines measured earlier in the run. pueued runs on a config, a
//! data folder and a socket of its own, in a temporary folder.
//!
//! pueue runs each task through `sh -c`, so its jobs cost one exec more
//! than jobwarden's; its start time is the same stamp helper's.

#![allow(clippy::disallowed_methods)] // scratch files of the harness

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::Value;

use super::{MS, earlier, latency_figures, which};
use crate::monotonic_ns;
use crate::report::{Figure, quantile};
use crate::rig::{self, read_stamp, wait_for};

const S: &str = "pueue";
/// Latency samples: each costs pueue's 300 ms loop tick or so.
const SAMPLES: usize = 200;
/// Trivial tasks of the throughput run, and how many run at once.
const TASKS: usize = 2000;
const PARALLEL: usize = 8;

/// Both scenarios through pueue; `so_far` holds this run's jobwarden
/// figures for the ratios.
pub fn pueue(so_far: &[Figure]) -> anyhow::Result<Vec<Figure>> {
    let (Some(client), Some(daemon)) = (which("pueue"), which("pueued")) else {
        eprintln!(
            "jobwarden-bench: pueue skipped: `pueue` and `pueued` are not both on PATH \
             (`cargo install pueue --locked` installs them)"
        );
        return Ok(vec![Figure::info(
            S,
            "skipped: not on PATH",
            0.0,
            "skipped",
        )]);
    };
    let mut pueue = Pueue::start(&client, &daemon)?;
    let mut samples = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        samples.push(pueue.latency_sample(i)?);
    }
    let mut figures = latency_figures(S, "add → started ", &mut samples, None);
    let p50 = quantile(&samples, 0.5);
    let rate = pueue.throughput()?;
    pueue.stop()?;
    figures.push(Figure::info(
        S,
        "tasks per second (8 at once)",
        rate,
        "jobs/s",
    ));
    figures.extend(ratios(so_far, p50, rate));
    Ok(figures)
}

/// pueue next to jobwarden and the bare baselines of this run.
fn ratios(so_far: &[Figure], p50: f64, rate: f64) -> Vec<Figure> {
    let mut figures = Vec::new();
    let mut missing = Vec::new();
    match earlier(so_far, "claim-latency", "p50") {
        Some(ours) => figures.push(Figure::info(S, "p50 / jobwarden p50", p50 / ours, "ratio")),
        None => missing.push("claim-latency"),
    }
    if let Some(bare) = earlier(so_far, "claim-latency", "bare p50") {
        figures.push(Figure::info(S, "p50 / bare p50", p50 / bare, "ratio"));
    }
    match earlier(so_far, "throughput", "jobs per second") {
        Some(ours) => figures.push(Figure::info(
            S,
            "rate / jobwarden rate",
            rate / ours,
            "ratio",
        )),
        None => missing.push("throughput"),
    }
    if let Some(bare) = earlier(so_far, "throughput", "bare spawn rate (8 at once)") {
        figures.push(Figure::info(S, "rate / bare rate", rate / bare, "ratio"));
    }
    if !missing.is_empty() {
        eprintln!(
            "jobwarden-bench: for pueue's ratios to jobwarden, run {} before pueue in the same run",
            missing.join(" and ")
        );
    }
    figures
}

/// A pueued of our own and the client's config for it.
struct Pueue {
    _dir: tempfile::TempDir,
    base: PathBuf,
    client: PathBuf,
    config: PathBuf,
    daemon: Option<Child>,
    /// The id pueue gives the next task (it counts from 0).
    next_id: usize,
}

impl Pueue {
    fn start(client: &Path, daemon: &Path) -> anyhow::Result<Pueue> {
        let dir = tempfile::Builder::new()
            .prefix("jobwarden-bench-pueue-")
            .tempdir()
            .context("creating pueue's temporary folder")?;
        let base = dir.path().to_path_buf();
        let config = base.join("pueue.yml");
        let socket = base.join("run").join("pueue.socket");
        fs::create_dir_all(base.join("run"))?;
        fs::create_dir_all(base.join("out"))?;
        fs::write(
            &config,
            format!(
                "shared:\n  pueue_directory: {:?}\n  runtime_directory: {:?}\n  \
                 use_unix_socket: true\n  unix_socket_path: {:?}\n",
                base.join("data"),
                base.join("run"),
                socket
            ),
        )?;
        let log = fs::File::create(base.join("pueued.log"))?;
        let child = Command::new(daemon)
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", daemon.display()))?;
        let pueue = Pueue {
            _dir: dir,
            base,
            client: client.to_path_buf(),
            config,
            daemon: Some(child),
            next_id: 0,
        };
        wait_for(Duration::from_secs(30), "pueued to listen", || {
            pueue.status().ok()
        })?;
        pueue.run(&["parallel", &PARALLEL.to_string()])?;
        Ok(pueue)
    }

    /// `pueue -c CONFIG ARGS`, to its end; its stdout.
    fn run(&self, args: &[&str]) -> anyhow::Result<Vec<u8>> {
        let out = Command::new(&self.client)
            .arg("-c")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running pueue {}", args.join(" ")))?;
        if !out.status.success() {
            bail!(
                "pueue {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(out.stdout)
    }

    /// `pueue add -- COMMAND`: the new task's id.
    fn add(&mut self, command: &[&str]) -> anyhow::Result<usize> {
        let mut args = vec!["add", "--"];
        args.extend_from_slice(command);
        self.run(&args)?;
        self.next_id += 1;
        Ok(self.next_id - 1)
    }

    /// Every task as `pueue status --json` shows it.
    fn status(&self) -> anyhow::Result<Value> {
        let out = self.run(&["status", "--json"])?;
        let v: Value = serde_json::from_slice(&out).context("parsing pueue status --json")?;
        Ok(v["tasks"].clone())
    }

    /// `pueue add` issued → the task's own start stamp (ms); then wait for
    /// pueue to see it done, so that samples don't overlap.
    fn latency_sample(&mut self, i: usize) -> anyhow::Result<f64> {
        let stamp = self.base.join("out").join(format!("p{i:04}.stamp"));
        let helper = rig::harness()?;
        let (helper, path) = (helper.to_string_lossy(), stamp.to_string_lossy());
        let t0 = monotonic_ns();
        let id = self.add(&[&helper, "stamp", &path])?;
        let started = wait_for(Duration::from_secs(60), "the pueue task to start", || {
            read_stamp(&stamp)
        })?;
        wait_for(Duration::from_secs(60), "the pueue task to end", || {
            let tasks = self.status().ok()?;
            let done = tasks[id.to_string()]["status"].get("Done").map(|_| ());
            if done.is_none() {
                // Each look is a client process and a whole state sent.
                std::thread::sleep(Duration::from_millis(20));
            }
            done
        })?;
        Ok(started.saturating_sub(t0) as f64 / MS)
    }

    /// 2,000 `true` tasks added while pueue's group is paused, then
    /// started: tasks per second from `pueue start` to the last task's end
    /// (pueue's own record). Fails unless every task succeeded once.
    fn throughput(&mut self) -> anyhow::Result<f64> {
        self.run(&["pause"])?;
        let first = self.next_id;
        for _ in 0..TASKS {
            self.add(&["true"])?;
        }
        let start_ms = epoch_ms();
        self.run(&["start"])?;
        let tasks = wait_for(Duration::from_secs(1800), "every pueue task to end", || {
            let tasks = self.status().ok()?;
            let done = (first..self.next_id)
                .filter(|id| tasks[id.to_string()]["status"].get("Done").is_some())
                .count();
            if done < TASKS {
                // The end times come from pueue's records: looking seldom
                // costs no precision and spares pueued serialising its
                // whole state for us while it works.
                std::thread::sleep(Duration::from_secs(2));
            }
            (done == TASKS).then_some(tasks)
        })?;
        let mut last = 0;
        for id in first..self.next_id {
            let done = &tasks[id.to_string()]["status"]["Done"];
            if done["result"] != "Success" {
                bail!("pueue task {id} did not succeed: {done}");
            }
            let end = done["end"].as_str().and_then(rfc3339_offset_ms);
            last = last.max(end.context("reading a pueue task's end time")?);
        }
        Ok(TASKS as f64 / (last.saturating_sub(start_ms).max(1) as f64 / 1000.0))
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.daemon.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
            child.wait()?;
        }
        Ok(())
    }
}

impl Drop for Pueue {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Epoch ms of an RFC 3339 time with a numeric offset or `Z`, as pueue
/// writes its local times (`2026-11-25T15:40:00.123456789+01:00`).
fn rfc3339_offset_ms(s: &str) -> Option<u64> {
    let (local, offset_s) = match s.strip_suffix('Z') {
        Some(local) => (local, 0i64),
        None => {
            let (local, off) = s.split_at(s.len().checked_sub(6)?);
            let sign = match off.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hours: i64 = off.get(1..3)?.parse().ok()?;
            let minutes: i64 = off.get(4..6)?.parse().ok()?;
            (local, sign * (hours * 3600 + minutes * 60))
        }
    };
    let t = humantime::parse_rfc3339_weak(&format!("{local}Z")).ok()?;
    let ms = t.duration_since(UNIX_EPOCH).ok()?.as_millis() as i64 - offset_s * 1000;
    u64::try_from(ms).ok()
}
