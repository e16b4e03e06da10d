//! Slurm latency: a prompt renamed in → its job's command started on a
//! Slurm node (it stamps itself), next to a bare `sbatch` of the same
//! command in the same run. Runs against the cluster `SLURM_CONF` names
//! (or Slurm's default config); a single-node cluster on the loopback is
//! enough (docs/BENCHMARKS.md says how one was brought up).

#![allow(clippy::disallowed_methods)] // scratch files of the harness

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use super::{MS, config, latency_figures};
use crate::monotonic_ns;
use crate::report::{Figure, quantile};
use crate::rig::{Rig, read_stamp, wait_for};

/// Drops per side (jobwarden, bare `sbatch`).
const SAMPLES: usize = 50;

pub fn slurm_latency() -> anyhow::Result<Vec<Figure>> {
    let ping = Command::new("scontrol")
        .arg("ping")
        .output()
        .context("running scontrol (is Slurm's client installed?)")?;
    let said = String::from_utf8_lossy(&ping.stdout);
    if !said.contains("UP") {
        anyhow::bail!(
            "no Slurm controller answers (scontrol ping: {}); set SLURM_CONF to a cluster's slurm.conf",
            said.trim()
        );
    }
    let command = r#"["@HARNESS@", "stamp", "@OUT@/{name}.stamp"]"#;
    let extra = "executor = \"slurm\"\n";
    let toml = format!(
        "slurm_poll_interval = \"2s\"\n{}",
        config(1, command, extra)
    );
    let mut rig = Rig::new(&toml)?;
    rig.start()?;
    let harness = std::env::current_exe()?;
    let mut ours = Vec::with_capacity(SAMPLES);
    let mut theirs = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        ours.push(sample(&rig, i)?);
        theirs.push(bare(&rig, &harness, i)?);
    }
    rig.stop()?;
    const S: &str = "slurm-latency";
    let mut figures = latency_figures(S, "", &mut ours, None);
    figures.extend(latency_figures(S, "bare sbatch ", &mut theirs, None));
    let above = quantile(&ours, 0.5) - quantile(&theirs, 0.5);
    figures.push(Figure::info(S, "p50 above bare sbatch p50", above, "ms"));
    Ok(figures)
}

/// One drop: from just before the rename to the command's own stamp on
/// the node (ms); the job's end waited for before the next.
fn sample(rig: &Rig, i: usize) -> anyhow::Result<f64> {
    let name = format!("s{i:03}");
    let staged = rig.stage("slurm", &name, "x\n")?;
    let stamp = rig.out().join(format!("{name}.stamp"));
    let t0 = monotonic_ns();
    rig.drop_staged(&staged, "slurm", &name)?;
    let started = wait_for(Duration::from_secs(120), "the Slurm job to start", || {
        read_stamp(&stamp)
    })?;
    wait_for(Duration::from_secs(120), "the job to end", || {
        rig.settled("slurm", &name).then_some(())
    })?;
    Ok(started.saturating_sub(t0) as f64 / MS)
}

/// The same command through a bare `sbatch --wrap`: from just before
/// `sbatch` to its stamp (ms).
fn bare(rig: &Rig, harness: &std::path::Path, i: usize) -> anyhow::Result<f64> {
    let stamp = rig.out().join(format!("bare{i:03}.stamp"));
    let wrap = format!("{} stamp {}", harness.display(), stamp.display());
    let t0 = monotonic_ns();
    let status = Command::new("sbatch")
        .args(["--parsable", "--output=/dev/null", "--wrap", &wrap])
        .stdout(Stdio::null())
        .status()
        .context("running sbatch")?;
    if !status.success() {
        anyhow::bail!("sbatch failed ({status})");
    }
    let started = wait_for(Duration::from_secs(120), "the bare job to start", || {
        read_stamp(&stamp)
    })?;
    Ok(started.saturating_sub(t0) as f64 / MS)
}
