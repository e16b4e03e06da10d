//! A long history behind the daemon and the CLI: how soon a prompt that
//! waited while the daemon was down starts, with none and with many
//! finished jobs on disk; and the query commands as whole processes.

#![allow(clippy::disallowed_methods)] // scratch files of the harness

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use super::{MS, config, job_id, record};
use crate::fixtures;
use crate::monotonic_ns;
use crate::report::{Figure, quantile};
use crate::rig::{Rig, read_stamp, wait_for};

/// Daemon starts measured on each root.
const STARTS: usize = 7;
/// Runs of each query command.
const RUNS: usize = 20;

/// Two roots, one empty and one with `history` finished jobs on disk
/// (run folders, archived prompts, index and ledger rows); on each, in
/// turns, a prompt is dropped while the daemon is down, and the time from
/// starting `jobwarden daemon` to the job's own start stamp is taken.
/// Then `status`, `jobs --limit 20` and `show <id>` as whole processes on
/// the long history, its daemon running.
pub fn startup(history: usize) -> anyhow::Result<Vec<Figure>> {
    const S: &str = "startup";
    let command = r#"["@HARNESS@", "stamp", "@OUT@/{name}.stamp"]"#;
    let mut empty = Rig::new(&config(4, command, ""))?;
    let mut full = Rig::new(&config(4, command, ""))?;
    let t0 = Instant::now();
    let some_id = fixtures::history_on_disk(&full.root, history)?;
    let generated = t0.elapsed().as_secs_f64();
    let (mut none_ms, mut many_ms) = (Vec::new(), Vec::new());
    for round in 0..STARTS {
        none_ms.push(start_to_job(&mut empty, round)?);
        many_ms.push(start_to_job(&mut full, round)?);
    }
    none_ms.sort_by(f64::total_cmp);
    many_ms.sort_by(f64::total_cmp);
    let (none, many) = (quantile(&none_ms, 0.5), quantile(&many_ms, 0.5));
    let mut figures = vec![
        Figure::info(S, "finished jobs on disk", history as f64, "count"),
        Figure::info(S, "history generated in", generated, "s"),
        Figure::info(S, "start → job, none finished (median)", none, "ms"),
        Figure::info(S, "start → job, long history (median)", many, "ms"),
        Figure::info(
            S,
            "start → job, long history (max)",
            quantile(&many_ms, 1.0),
            "ms",
        ),
        Figure::at_most(S, "long history minus none", many - none, "ms", 25.0),
    ];
    let mut commands = vec![
        ("status", vec!["status", "--json"]),
        ("jobs --limit 20", vec!["jobs", "--limit", "20"]),
    ];
    let id = some_id.map(|id| id.to_string());
    if let Some(id) = &id {
        commands.push(("show <id>", vec!["show", id.as_str()]));
    }
    full.start()?;
    figures.extend(process_medians(&full, S, &commands)?);
    full.stop()?;
    let t0 = Instant::now();
    fixtures::remove_history(&full.root)?;
    figures.push(Figure::info(
        S,
        "history removed in",
        t0.elapsed().as_secs_f64(),
        "s",
    ));
    Ok(figures)
}

/// Drop a prompt that has waited a minute while the daemon is down, start the daemon, and return
/// the time from the start to the job's stamp (ms); then let the job end
/// and stop the daemon.
fn start_to_job(rig: &mut Rig, round: usize) -> anyhow::Result<f64> {
    let name = format!("s{round}");
    let id = job_id(&format!("bench-boot-{round}"))?;
    let staged = rig.stage("boot", &name, &format!("---\njob_id: {id}\n---\nx\n"))?;
    // It has waited a while: a scan claims a file no younger than the
    // settle time at once (a younger one may still be being written).
    let waited = SystemTime::now() - Duration::from_secs(60);
    fs::File::options()
        .write(true)
        .open(&staged)
        .and_then(|f| f.set_modified(waited))
        .with_context(|| format!("backdating {}", staged.display()))?;
    rig.drop_staged(&staged, "boot", &name)?;
    let stamp = rig.out().join(format!("{name}.stamp"));
    let t0 = monotonic_ns();
    let pid = rig.spawn()?;
    let started = wait_for(Duration::from_secs(600), "the waiting job to start", || {
        read_stamp(&stamp)
    })?;
    rig.wait_ready(pid)?;
    let monitor = wait_for(Duration::from_secs(60), "the job to end", || {
        let rec = record(rig, &id).ok()?;
        rec.finished_at.and(rec.monitor_pid)
    })?;
    rig.stop()?;
    // Its monitor gone too (an idle monitor leaves when its daemon does),
    // so that the next start finds nothing live.
    wait_for(
        Duration::from_secs(60),
        "the job's monitor to leave",
        || {
            let monitor = nix::unistd::Pid::from_raw(monitor);
            nix::sys::signal::kill(monitor, None).is_err().then_some(())
        },
    )?;
    Ok(started.saturating_sub(t0) as f64 / MS)
}

/// Each command run `RUNS` times as a whole process: its median (ms),
/// judged against 20 ms.
fn process_medians(
    rig: &Rig,
    scenario: &'static str,
    commands: &[(&str, Vec<&str>)],
) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for (name, args) in commands {
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let start = Instant::now();
            let status = rig
                .command(args)?
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
            scenario,
            &format!("{name} (median of {RUNS})"),
            quantile(&times, 0.5),
            "ms",
            20.0,
        ));
    }
    Ok(figures)
}

/// `status`, `jobs --limit 20`, `history check` and `history stats` as
/// whole processes, with 100,000 finished jobs and 1,000,000 ledger rows.
pub fn queries() -> anyhow::Result<Vec<Figure>> {
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
    let commands = [
        ("status", vec!["status", "--json"]),
        ("jobs --limit 20", vec!["jobs", "--limit", "20"]),
        ("history check", vec!["history", "check", "p7", "n42"]),
        ("history stats", vec!["history", "stats", "--json"]),
    ];
    figures.extend(process_medians(&rig, "queries", &commands)?);
    Ok(figures)
}
