//! One function per scenario; each returns its figures.

#![allow(clippy::disallowed_methods)] // scratch files of the harness

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::report::{Figure, quantile};
use crate::rig::{self, Rig, read_stamp, wait_for};
use crate::{fixtures, monotonic_ns};

const MS: f64 = 1e6;

/// The globals every scenario's config starts with.
fn config(max_jobs: usize, command: &str, extra: &str) -> String {
    format!(
        "max_jobs = {max_jobs}\nheartbeat_interval = \"5s\"\n\n[profiles.default]\ncommand = {command}\nmax_attempts = 1\n{extra}\n"
    )
}

fn latency_figures(scenario: &'static str, mut samples: Vec<f64>) -> Vec<Figure> {
    samples.sort_by(f64::total_cmp);
    let n = samples.len() as f64;
    vec![
        Figure::info(scenario, "samples", n, "count"),
        Figure::at_most(scenario, "p50", quantile(&samples, 0.50), "ms", 5.0),
        Figure::info(scenario, "p90", quantile(&samples, 0.90), "ms"),
        Figure::at_most(scenario, "p99", quantile(&samples, 0.99), "ms", 25.0),
        Figure::info(scenario, "max", quantile(&samples, 1.0), "ms"),
    ]
}

/// Prompts renamed into the inbox one at a time; the time until the job's
/// process has started (it stamps itself).
pub fn claim_latency() -> anyhow::Result<Vec<Figure>> {
    const SAMPLES: usize = 500;
    let command = r#"["@HARNESS@", "stamp", "@OUT@/{name}.stamp"]"#;
    let mut rig = Rig::new(&config(1, command, ""))?;
    rig.start()?;
    let mut samples = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let name = format!("c{i:04}");
        let staged = rig.stage("claim", &name, "x\n")?;
        let stamp = rig.out().join(format!("{name}.stamp"));
        let t0 = monotonic_ns();
        rig.drop_staged(&staged, "claim", &name)?;
        let started = wait_for(Duration::from_secs(30), "the job to start", || {
            read_stamp(&stamp)
        })?;
        samples.push(started.saturating_sub(t0) as f64 / MS);
        // Let the job end before the next sample, so samples don't overlap.
        wait_for(Duration::from_secs(30), "the job to end", || {
            rig.settled("claim", &name).then_some(())
        })?;
    }
    Ok(latency_figures("claim-latency", samples))
}

/// A running job that stamps the arrival of SIGTERM; the time from the
/// ABORT marker's rename to the signal.
pub fn abort_latency() -> anyhow::Result<Vec<Figure>> {
    const SAMPLES: usize = 200;
    let command = r#"["@HARNESS@", "await-term", "@OUT@/{name}.ready", "@OUT@/{name}.term"]"#;
    let mut rig = Rig::new(&config(1, command, ""))?;
    rig.start()?;
    let mut samples = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let name = format!("a{i:04}");
        let id = format!("bench-abort-{i:04}");
        let staged = rig.stage("abort", &name, &format!("---\njob_id: {id}\n---\nx\n"))?;
        rig.drop_staged(&staged, "abort", &name)?;
        let ready = rig.out().join(format!("{name}.ready"));
        wait_for(Duration::from_secs(30), "the job to be ready", || {
            ready.exists().then_some(())
        })?;
        let job = jobwarden::job::JobId::parse(&id).map_err(anyhow::Error::msg)?;
        let marker = rig.layout.abort_marker(&job);
        let tmp = marker.with_extension("tmp");
        fs::write(&tmp, "bench\n")?;
        let term = rig.out().join(format!("{name}.term"));
        let t0 = monotonic_ns();
        fs::rename(&tmp, &marker)?;
        let got = wait_for(Duration::from_secs(30), "SIGTERM to arrive", || {
            read_stamp(&term)
        })?;
        samples.push(got.saturating_sub(t0) as f64 / MS);
        wait_for(Duration::from_secs(30), "the job to end", || {
            rig.settled("abort", &name).then_some(())
        })?;
    }
    Ok(latency_figures("abort-latency", samples))
}

/// 2,000 prompts running `true` with `max_jobs = 8`, dropped at once; and
/// the bare baseline: the same 2,000 `true` spawned 8 at a time by us.
pub fn throughput() -> anyhow::Result<Vec<Figure>> {
    const JOBS: usize = 2000;
    const PARALLEL: usize = 8;
    let truth = which("true")?;
    let bare = bare_spawn_rate(&truth, JOBS, PARALLEL)?;
    let mut rig = Rig::new(&config(PARALLEL, &format!("[{:?}]", truth), ""))?;
    rig.start()?;
    let staged: Vec<_> = (0..JOBS)
        .map(|i| rig.stage("tp", &format!("t{i:04}"), "x\n"))
        .collect::<Result<_, _>>()?;
    for (i, s) in staged.iter().enumerate() {
        rig.drop_staged(s, "tp", &format!("t{i:04}"))?;
    }
    wait_for(Duration::from_secs(900), "every job to end", || {
        let done = (0..JOBS)
            .filter(|i| rig.settled("tp", &format!("t{i:04}")))
            .count();
        (done >= JOBS).then_some(())
    })?;
    // From the first claim to the last terminal record, as the records say.
    let (mut first, mut last, mut records) = (u64::MAX, 0u64, 0usize);
    for id in rig.layout.job_ids()? {
        let v: serde_json::Value = serde_json::from_slice(&fs::read(rig.layout.job_json(&id))?)?;
        let ms = |k: &str| v[k].as_str().map(rfc3339_ms);
        if let (Some(Some(c)), Some(Some(f))) = (ms("created_at"), ms("finished_at")) {
            first = first.min(c);
            last = last.max(f);
            records += 1;
        }
    }
    let rate = JOBS as f64 / ((last.saturating_sub(first)).max(1) as f64 / 1000.0);
    let ledger = rusqlite::Connection::open(rig.layout.ledger())?;
    let (rows, distinct): (i64, i64) = ledger.query_row(
        "SELECT COUNT(*), COUNT(DISTINCT name) FROM executions",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let exactly_once = records == JOBS && rows == JOBS as i64 && distinct == JOBS as i64;
    Ok(vec![
        Figure::info(
            "throughput",
            "bare spawn rate (8 at once)",
            bare,
            "spawns/s",
        ),
        Figure::info("throughput", "jobs per second", rate, "jobs/s"),
        Figure::at_least(
            "throughput",
            "ratio to the bare rate",
            rate / bare,
            "ratio",
            0.25,
        ),
        Figure::at_least(
            "throughput",
            "ran exactly once (records, rows)",
            if exactly_once { 1.0 } else { 0.0 },
            "bool",
            1.0,
        ),
    ])
}

/// `/bin/true` started `total` times, `parallel` at a time, by us.
fn bare_spawn_rate(
    program: &std::path::Path,
    total: usize,
    parallel: usize,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut running: Vec<std::process::Child> = Vec::new();
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

/// An idle daemon with 10,000 finished jobs on disk: its RSS and the CPU
/// it uses in 30 s; and a monitor's RSS while its job runs.
pub fn idle() -> anyhow::Result<Vec<Figure>> {
    const FINISHED: usize = 10_000;
    const WINDOW: Duration = Duration::from_secs(30);
    let extra = "[profiles.sleeper]\ncommand = [\"sleep\", \"5\"]\n";
    let mut rig = Rig::new(&config(4, "[\"true\"]", extra))?;
    fixtures::finished_jobs_on_disk(&rig.root, FINISHED)?;
    let t0 = Instant::now();
    let pid = rig.start()?;
    let start_ms = t0.elapsed().as_secs_f64() * 1000.0;
    std::thread::sleep(Duration::from_secs(2));
    let before = rig::cpu_ticks(pid).context("the daemon's CPU time")?;
    std::thread::sleep(WINDOW);
    let after = rig::cpu_ticks(pid).context("the daemon's CPU time")?;
    let cpu_ms = (after - before) as f64 * 1000.0 / rig::ticks_per_second() as f64;
    let rss = rig::rss_bytes(pid).context("the daemon's RSS")? as f64 / (1024.0 * 1024.0);

    let staged = rig.stage(
        "idle",
        "sleepy",
        "---\njob_id: bench-sleepy\nprofile: sleeper\n---\nx\n",
    )?;
    rig.drop_staged(&staged, "idle", "sleepy")?;
    let sleepy = jobwarden::job::JobId::parse("bench-sleepy").map_err(anyhow::Error::msg)?;
    let record = rig.layout.job_json(&sleepy);
    let monitor = wait_for(Duration::from_secs(30), "the job to run", || {
        let v: serde_json::Value = serde_json::from_slice(&fs::read(&record).ok()?).ok()?;
        (v["state"] == "running")
            .then(|| v["monitor_pid"].as_u64())
            .flatten()
    })?;
    let monitor_rss =
        rig::rss_bytes(monitor as u32).context("the monitor's RSS")? as f64 / (1024.0 * 1024.0);
    rig.stop()?;
    Ok(vec![
        Figure::info("idle", "daemon start with 10,000 jobs", start_ms, "ms"),
        Figure::at_most("idle", "daemon CPU in 30 s idle", cpu_ms, "ms", 20.0),
        Figure::at_most("idle", "daemon RSS", rss, "MiB", 10.0),
        Figure::at_most("idle", "monitor RSS (job running)", monitor_rss, "MiB", 5.0),
    ])
}

/// `status`, `jobs --limit 20`, `history check` and `history stats` as
/// whole processes, with 100,000 finished jobs and 1,000,000 ledger rows.
pub fn queries() -> anyhow::Result<Vec<Figure>> {
    const RUNS: usize = 20;
    let rig = Rig::new(&config(4, "[\"true\"]", ""))?;
    let t0 = Instant::now();
    fixtures::long_history(&rig.layout.ledger(), 1_000_000, 100_000)?;
    let generated = t0.elapsed().as_secs_f64();
    let mut figures = vec![Figure::info(
        "queries",
        "history generated in",
        generated,
        "s",
    )];
    for (name, args) in [
        ("status", vec!["status", "--json"]),
        ("jobs --limit 20", vec!["jobs", "--limit", "20"]),
        ("history check", vec!["history", "check", "p7", "n42"]),
        ("history stats", vec!["history", "stats", "--json"]),
    ] {
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let start = Instant::now();
            let status = rig
                .command(&args)?
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            times.push(start.elapsed().as_secs_f64() * 1000.0);
            // 1 is a clean "no"; 3 is `status`'s "no daemon runs here".
            anyhow::ensure!(
                status.code().is_some_and(|c| c <= 1 || c == 3),
                "{name} failed: {status}"
            );
        }
        times.sort_by(f64::total_cmp);
        figures.push(Figure::at_most(
            "queries",
            &format!("{name} (median of {RUNS})"),
            quantile(&times, 0.5),
            "ms",
            20.0,
        ));
    }
    Ok(figures)
}

fn which(program: &str) -> anyhow::Result<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .with_context(|| format!("{program} is not on PATH"))
}

/// Epoch ms of an RFC 3339 UTC time as jobwarden writes them.
fn rfc3339_ms(s: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339(s).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64)
}
