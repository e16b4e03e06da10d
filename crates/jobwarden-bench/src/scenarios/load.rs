//! Many jobs at once: throughput of trivial jobs next to the bare spawn
//! rate of the same run, and a burst of prompts claimed while the daemon
//! is paused (nothing starts, everything waits).

#![allow(clippy::disallowed_methods)] // scratch files of the harness

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use super::{config, must_hold, records, which};
use crate::report::Figure;
use crate::rig::{self, Rig, prompt};

/// Trivial jobs of the throughput scenario, and how many run at once.
const JOBS: usize = 2000;
const PARALLEL: usize = 8;
/// Prompts of the burst.
const BURST: usize = 10_000;

/// 2,000 prompts running `true` with `max_jobs = 8`, dropped at once; and
/// the bare baseline: the same 2,000 `true` spawned 8 at a time by us.
pub fn throughput() -> anyhow::Result<Vec<Figure>> {
    const S: &str = "throughput";
    let truth = which("true").context("true is not on PATH")?;
    let bare = bare_spawn_rate(&truth, JOBS, PARALLEL)?;
    let mut rig = Rig::new(&config(PARALLEL, &format!("[{truth:?}]"), ""))?;
    let durable = durable_spawn_rate(&truth, JOBS, PARALLEL, &rig.base.join("durable-bare"))?;
    rig.start()?;
    let names = drop_all(&rig, "tp", JOBS)?;
    rig.wait_all_settled("tp", &names, Duration::from_secs(900))?;
    rig.stop()?;
    // From the first claim to the last terminal record, as the records say.
    let recs = records(&rig)?;
    let first = recs.iter().map(|r| r.created_at.epoch_ms()).min();
    let last = recs
        .iter()
        .filter_map(|r| r.finished_at)
        .map(|t| t.epoch_ms())
        .max();
    let span_ms = last
        .zip(first)
        .map_or(0, |(l, f)| l.saturating_sub(f))
        .max(1);
    let rate = JOBS as f64 / (span_ms as f64 / 1000.0);
    let distinct: HashSet<_> = recs.iter().map(|r| r.name.as_str()).collect();
    let ended = recs.iter().filter(|r| r.finished_at.is_some()).count();
    let ledger = rusqlite::Connection::open(rig.layout.ledger())?;
    let (rows, rows_distinct): (i64, i64) = ledger.query_row(
        "SELECT COUNT(*), COUNT(DISTINCT name) FROM executions",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let exactly_once = recs.len() == JOBS
        && distinct.len() == JOBS
        && ended == JOBS
        && rows == JOBS as i64
        && rows_distinct == JOBS as i64;
    Ok(vec![
        Figure::info(S, "bare spawn rate (8 at once)", bare, "spawns/s"),
        Figure::info(
            S,
            "bare, a durable record before and after",
            durable,
            "jobs/s",
        ),
        Figure::info(S, "jobs per second", rate, "jobs/s"),
        Figure::at_least(S, "ratio to the bare rate", rate / bare, "ratio", 0.33),
        must_hold(S, "ran exactly once (records, rows)", exactly_once),
    ])
}

/// Stage `n` prompts of `project`, then rename them all into the inbox.
fn drop_all(rig: &Rig, project: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let names: Vec<String> = (0..n).map(|i| format!("{project}{i:05}")).collect();
    let staged = names
        .iter()
        .map(|name| rig.stage(project, name, "x\n"))
        .collect::<Result<Vec<_>, _>>()?;
    for (s, name) in staged.iter().zip(&names) {
        rig.drop_staged(s, project, name)?;
    }
    Ok(names)
}

/// `/bin/true` started `total` times, `parallel` at a time, by us.
fn bare_spawn_rate(program: &Path, total: usize, parallel: usize) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut running: Vec<Child> = Vec::new();
    let mut started = 0;
    while started < total || !running.is_empty() {
        while started < total && running.len() < parallel {
            running.push(Command::new(program).stdin(Stdio::null()).spawn()?);
            started += 1;
        }
        let mut still = Vec::with_capacity(running.len());
        for mut child in running {
            if child.try_wait()?.is_none() {
                still.push(child);
            }
        }
        running = still;
        if running.len() == parallel {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// The least a supervisor that keeps its promises does per job, by us:
/// `total` jobs of `program`, `parallel` at a time, each in its own new
/// folder under `dir` (on the root's filesystem), with a record written
/// durably (a temporary file fsynced, renamed into place, the folder
/// fsynced) before the job starts and again after it ends. What the disk
/// allows, next to the spawn rate, which has no fsync at all.
fn durable_spawn_rate(
    program: &Path,
    total: usize,
    parallel: usize,
    dir: &Path,
) -> anyhow::Result<f64> {
    fs::create_dir_all(dir)?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..parallel)
            .map(|_| {
                s.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= total {
                            return Ok(());
                        }
                        let job = dir.join(format!("j{i:05}"));
                        fs::create_dir(&job)?;
                        let folder = fs::File::open(&job)?;
                        durable_record(&job, &folder, b"{\"state\":\"running\"}\n")?;
                        Command::new(program).stdin(Stdio::null()).status()?;
                        durable_record(&job, &folder, b"{\"state\":\"succeeded\"}\n")?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().map_err(|_| anyhow::anyhow!("a worker panicked"))?)
    })?;
    let rate = total as f64 / start.elapsed().as_secs_f64();
    fs::remove_dir_all(dir)?;
    Ok(rate)
}

/// `record.json` in `job` replaced durably by `bytes`.
fn durable_record(job: &Path, folder: &fs::File, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let tmp = job.join(".record.tmp");
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, job.join("record.json"))?;
    folder.sync_all()?;
    Ok(())
}

/// 10,000 prompts written in a staging folder, then renamed into the
/// inbox as fast as the harness can, while the daemon is paused: the
/// claim rate from the first rename to the last claim, every prompt
/// claimed once, and the daemon's peak RSS while they wait.
///
/// The clock is the wall clock (`CLOCK_REALTIME`), the one both sides
/// write: the harness reads it just before the first rename, the daemon
/// writes it as each record's `created_at` when it claims (milliseconds;
/// the burst takes seconds).
pub fn burst() -> anyhow::Result<Vec<Figure>> {
    const S: &str = "burst";
    let mut rig = Rig::new(&config(8, "[\"true\"]", ""))?;
    // Paused before it starts, so that nothing starts and all wait.
    rig.run(&["pause", "--reason", "burst benchmark"], &[0])?;
    let names: Vec<String> = (0..BURST).map(|i| format!("b{i:05}")).collect();
    let mut moves = Vec::with_capacity(BURST);
    for name in &names {
        let staged = rig.stage("burst", name, "x\n")?;
        moves.push((staged, rig.layout.waiting_prompt(&prompt("burst", name))));
    }
    fs::create_dir_all(rig.layout.inbox_folder("burst"))?;
    let pid = rig.start()?;
    let sampler = RssSampler::start(pid);
    let wall0 = epoch_ms();
    let t0 = Instant::now();
    for (from, to) in &moves {
        fs::rename(from, to).with_context(|| format!("dropping {}", to.display()))?;
    }
    let renamed_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let claimed = |name: &String| !rig.layout.waiting_prompt(&prompt("burst", name)).exists();
    let mut next = 0;
    rig::wait_for(
        Duration::from_secs(600),
        "every prompt to be claimed",
        || {
            while next < BURST && claimed(&names[next]) {
                next += 1;
            }
            (next == BURST && names.iter().all(claimed)).then_some(())
        },
    )?;
    let hwm = rig::status_mib(pid, "VmHWM").context("the daemon's VmHWM")?;
    let sampled = sampler.stop();
    let recs = records(&rig)?;
    rig.stop()?;
    let last = recs
        .iter()
        .map(|r| r.created_at.epoch_ms())
        .max()
        .unwrap_or(wall0);
    let rate = BURST as f64 / (last.saturating_sub(wall0).max(1) as f64 / 1000.0);
    let distinct: HashSet<_> = recs.iter().map(|r| r.name.as_str()).collect();
    let waiting = recs.iter().filter(|r| r.started_at.is_none()).count();
    let once = recs.len() == BURST && distinct.len() == BURST && waiting == BURST;
    Ok(vec![
        Figure::info(S, "harness renamed 10,000 in", renamed_ms, "ms"),
        Figure::at_least(S, "claims per second", rate, "claims/s", 1000.0),
        must_hold(S, "claimed exactly once, none started", once),
        Figure::info(S, "daemon RSS, highest sampled", sampled, "MiB"),
        Figure::at_most(S, "daemon peak RSS (VmHWM)", hwm, "MiB", 20.0),
    ])
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A thread that reads a process's `VmRSS` every 5 ms and keeps the most.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<f64>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut most: f64 = 0.0;
            while !flag.load(Ordering::Relaxed) {
                most = most.max(rig::rss_mib(pid).unwrap_or(0.0));
                std::thread::sleep(Duration::from_millis(5));
            }
            most
        });
        RssSampler { stop, thread }
    }

    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(f64::NAN)
    }
}
