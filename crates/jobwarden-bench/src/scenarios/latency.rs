//! Claim latency (a prompt renamed in → its job's process started), next
//! to the bare baseline of the same run, and abort latency (`ABORT`
//! renamed in → SIGTERM at the job).

#![allow(clippy::disallowed_methods)] // scratch files of the harness

use std::fs;
use std::time::Duration;

use super::bare::Bare;
use super::{LatencyTargets, MS, config, job_id, latency_figures};
use crate::monotonic_ns;
use crate::report::{Figure, quantile};
use crate::rig::{Rig, read_stamp, wait_for};

/// Drops per side (jobwarden, bare).
const CLAIM_SAMPLES: usize = 1000;
/// No sample may take longer than this (ms).
const OUTLIER_MS: f64 = 50.0;

/// Prompts renamed into the inbox one at a time, each after the previous
/// job has ended; the time until the job's process has started (it stamps
/// itself). Each drop is followed by a drop into the bare baseline, so
/// that both see the same machine.
pub fn claim_latency() -> anyhow::Result<Vec<Figure>> {
    let command = r#"["@HARNESS@", "stamp", "@OUT@/{name}.stamp"]"#;
    let mut rig = Rig::new(&config(1, command, ""))?;
    rig.start()?;
    let mut bare = Bare::start(&rig.base)?;
    let mut ours = Vec::with_capacity(CLAIM_SAMPLES);
    let mut theirs = Vec::with_capacity(CLAIM_SAMPLES);
    for i in 0..CLAIM_SAMPLES {
        ours.push(claim_sample(&rig, i)?);
        theirs.push(bare.sample(i)?);
    }
    bare.stop()?;
    rig.stop()?;
    Ok(claim_figures(ours, theirs))
}

/// One drop: from just before the rename to the job's own stamp (ms).
fn claim_sample(rig: &Rig, i: usize) -> anyhow::Result<f64> {
    let name = format!("c{i:05}");
    let staged = rig.stage("claim", &name, "x\n")?;
    let stamp = rig.out().join(format!("{name}.stamp"));
    let t0 = monotonic_ns();
    rig.drop_staged(&staged, "claim", &name)?;
    let started = wait_for(Duration::from_secs(30), "the job to start", || {
        read_stamp(&stamp)
    })?;
    // Let the job end before the next sample, so samples don't overlap.
    wait_for(Duration::from_secs(30), "the job to end", || {
        rig.settled("claim", &name).then_some(())
    })?;
    Ok(started.saturating_sub(t0) as f64 / MS)
}

fn claim_figures(mut ours: Vec<f64>, mut theirs: Vec<f64>) -> Vec<Figure> {
    const S: &str = "claim-latency";
    let targets = LatencyTargets {
        p50: 5.0,
        p99: 10.0,
    };
    let mut figures = latency_figures(S, "", &mut ours, Some(&targets));
    let over = ours.iter().filter(|ms| **ms > OUTLIER_MS).count();
    figures.push(Figure::at_most(
        S,
        "samples over 50 ms",
        over as f64,
        "count",
        0.0,
    ));
    figures.extend(latency_figures(S, "bare ", &mut theirs, None));
    let above = quantile(&ours, 0.5) - quantile(&theirs, 0.5);
    figures.push(Figure::at_most(S, "p50 above bare p50", above, "ms", 1.5));
    figures
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
        let marker = rig.layout.abort_marker(&job_id(&id)?);
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
    rig.stop()?;
    let targets = LatencyTargets { p50: 1.0, p99: 5.0 };
    Ok(latency_figures(
        "abort-latency",
        "",
        &mut samples,
        Some(&targets),
    ))
}
