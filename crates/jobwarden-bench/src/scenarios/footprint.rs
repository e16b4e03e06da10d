//! Memory and quiet: the daemon's RSS once it has run 10,000 jobs, what
//! each running job costs in its monitor (1, 20 and 100 at once), and an
//! idle daemon with 10,000 finished jobs on disk.

use std::time::{Duration, Instant};

use anyhow::Context;

use super::{config, job_id, record};
use crate::fixtures;
use crate::report::Figure;
use crate::rig::{self, Rig};

/// Jobs run before the daemon's idle RSS is read.
const RUN_BEFORE: usize = 10_000;
/// Running jobs whose monitors are measured, one round each.
const RUNNING: [usize; 3] = [1, 20, 100];

/// The daemon runs 10,000 `true` jobs (8 at once), idles, and its RSS is
/// read; then 1, 20 and 100 jobs that sleep run at once, and the mean of
/// their monitors' PSS, private memory and RSS (`smaps_rollup`) is read.
pub fn footprint() -> anyhow::Result<Vec<Figure>> {
    const S: &str = "footprint";
    let extra =
        "max_jobs = 8\n\n[profiles.sleeper]\ncommand = [\"sleep\", \"600\"]\nmax_jobs = 128\n";
    let mut rig = Rig::new(&config(128, "[\"true\"]", extra))?;
    let pid = rig.start()?;
    let names: Vec<String> = (0..RUN_BEFORE).map(|i| format!("f{i:05}")).collect();
    for name in &names {
        let staged = rig.stage("fp", name, "x\n")?;
        rig.drop_staged(&staged, "fp", name)?;
    }
    rig.wait_all_settled("fp", &names, Duration::from_secs(3600))?;
    // Let the last ends and their timers pass before reading.
    std::thread::sleep(Duration::from_secs(3));
    let rss = rig::rss_mib(pid).context("the daemon's RSS")?;
    let hwm = rig::status_mib(pid, "VmHWM").context("the daemon's VmHWM")?;
    let mut figures = vec![
        Figure::at_most(S, "daemon RSS idle after 10,000 jobs", rss, "MiB", 10.0),
        Figure::info(S, "daemon peak RSS over them (VmHWM)", hwm, "MiB"),
    ];
    for n in RUNNING {
        figures.extend(monitors(&rig, n)?);
    }
    rig.stop()?;
    Ok(figures)
}

/// `n` jobs that sleep, running at once: the mean of their monitors'
/// memory; then they are aborted and waited for.
fn monitors(rig: &Rig, n: usize) -> anyhow::Result<Vec<Figure>> {
    const S: &str = "footprint";
    let project = format!("run{n}");
    let names: Vec<String> = (0..n).map(|i| format!("s{i:03}")).collect();
    let ids: Vec<String> = (0..n).map(|i| format!("bench-fp{n}-{i:03}")).collect();
    for (name, id) in names.iter().zip(&ids) {
        let body = format!("---\njob_id: {id}\nprofile: sleeper\n---\nx\n");
        let staged = rig.stage(&project, name, &body)?;
        rig.drop_staged(&staged, &project, name)?;
    }
    let measured = measure(rig, &ids);
    // Abort them whether or not the reading went well: jobs outlive the
    // daemon, and these would sleep on after the harness.
    for id in &ids {
        let aborted = job_id(id).and_then(|id| rig.abort(&id));
        if measured.is_ok() {
            aborted?;
        }
    }
    let total = measured?;
    rig.wait_all_settled(&project, &names, Duration::from_secs(300))?;
    let mean = |v: f64| v / n as f64;
    Ok(vec![
        Figure::at_most(
            S,
            &format!("monitor PSS, {n} running"),
            mean(total.pss),
            "MiB",
            1.0,
        ),
        Figure::at_most(
            S,
            &format!("monitor private, {n} running"),
            mean(total.private),
            "MiB",
            0.5,
        ),
        Figure::info(
            S,
            &format!("monitor RSS, {n} running"),
            mean(total.rss),
            "MiB",
        ),
    ])
}

/// The summed memory of the monitors of the jobs `ids`, once all run.
fn measure(rig: &Rig, ids: &[String]) -> anyhow::Result<rig::Memory> {
    let mut pids = Vec::with_capacity(ids.len());
    for id in ids {
        let id = job_id(id)?;
        let pid = rig::wait_for(Duration::from_secs(120), "the job to run", || {
            let rec = record(rig, &id).ok()?;
            let running = rec.state == jobwarden_model::job::JobState::Running && rec.pid.is_some();
            running.then_some(rec.monitor_pid).flatten()
        })?;
        pids.push(pid as u32);
    }
    // A monitor's pages settle once its job runs and it has heartbeaten.
    std::thread::sleep(Duration::from_secs(1));
    let mut total = rig::Memory::default();
    for pid in &pids {
        let m = rig::memory(*pid).with_context(|| format!("reading monitor {pid}'s memory"))?;
        total.rss += m.rss;
        total.pss += m.pss;
        total.private += m.private;
    }
    Ok(total)
}

/// An idle daemon with 10,000 finished jobs on disk: its start time, the
/// CPU it uses in 30 s and its RSS.
pub fn idle() -> anyhow::Result<Vec<Figure>> {
    const FINISHED: usize = 10_000;
    const WINDOW: Duration = Duration::from_secs(30);
    let mut rig = Rig::new(&config(4, "[\"true\"]", ""))?;
    fixtures::finished_jobs_on_disk(&rig.root, FINISHED)?;
    let t0 = Instant::now();
    let pid = rig.start()?;
    let start_ms = t0.elapsed().as_secs_f64() * 1000.0;
    std::thread::sleep(Duration::from_secs(2));
    let before = rig::cpu_ticks(pid).context("the daemon's CPU time")?;
    std::thread::sleep(WINDOW);
    let after = rig::cpu_ticks(pid).context("the daemon's CPU time")?;
    let cpu_ms = after.saturating_sub(before) as f64 * 1000.0 / rig::ticks_per_second() as f64;
    let rss = rig::rss_mib(pid).context("the daemon's RSS")?;
    rig.stop()?;
    Ok(vec![
        Figure::info("idle", "daemon start with 10,000 jobs", start_ms, "ms"),
        Figure::at_most("idle", "daemon CPU in 30 s idle", cpu_ms, "ms", 20.0),
        Figure::at_most("idle", "daemon RSS", rss, "MiB", 10.0),
    ])
}
