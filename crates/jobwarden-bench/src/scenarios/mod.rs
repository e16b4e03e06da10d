//! The scenarios, one module per concern; each scenario returns its
//! figures. Shared here: the config every scenario starts from, latency
//! figures, and reading the records the daemon leaves.

#![allow(clippy::disallowed_methods)] // scratch files of the harness

pub mod bare;
pub mod footprint;
pub mod latency;
pub mod load;
pub mod pueue;
pub mod slurm;
pub mod startup;
pub mod syscalls;

use std::path::PathBuf;

use anyhow::Context;
use jobwarden_model::job::{JobId, JobRecord};

use crate::report::{Figure, quantile};
use crate::rig::Rig;

/// Nanoseconds per millisecond.
pub const MS: f64 = 1e6;

/// `--no-sandbox`: the scenarios' jobs run without their sandbox, to
/// measure what it costs.
static NO_SANDBOX: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Run every scenario's jobs without their sandbox (`sandbox = false`).
pub fn without_sandbox() {
    NO_SANDBOX.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The globals every scenario's config starts with.
pub fn config(max_jobs: usize, command: &str, extra: &str) -> String {
    let sandbox = !NO_SANDBOX.load(std::sync::atomic::Ordering::Relaxed);
    format!(
        "max_jobs = {max_jobs}\nheartbeat_interval = \"5s\"\n\n[profiles.default]\ncommand = {command}\nmax_attempts = 1\nsandbox = {sandbox}\n{extra}\n"
    )
}

/// What a latency scenario promises: p50 and p99 at most these (ms).
pub struct LatencyTargets {
    pub p50: f64,
    pub p99: f64,
}

/// Count, p50, p90, p99 and max of `samples` (ms), p50 and p99 judged.
pub fn latency_figures(
    scenario: &'static str,
    prefix: &str,
    samples: &mut [f64],
    targets: Option<&LatencyTargets>,
) -> Vec<Figure> {
    samples.sort_by(f64::total_cmp);
    let judged = |name: &str, q: f64, target: Option<f64>| {
        let name = format!("{prefix}{name}");
        match target {
            Some(t) => Figure::at_most(scenario, &name, quantile(samples, q), "ms", t),
            None => Figure::info(scenario, &name, quantile(samples, q), "ms"),
        }
    };
    vec![
        Figure::info(
            scenario,
            &format!("{prefix}samples"),
            samples.len() as f64,
            "count",
        ),
        judged("p50", 0.50, targets.map(|t| t.p50)),
        judged("p90", 0.90, None),
        judged("p99", 0.99, targets.map(|t| t.p99)),
        judged("max", 1.0, None),
    ]
}

/// The value of an earlier figure of this run, if it was measured.
pub fn earlier(figures: &[Figure], scenario: &str, name: &str) -> Option<f64> {
    figures
        .iter()
        .find(|f| f.scenario == scenario && f.name == name)
        .map(|f| f.value)
}

/// A yes/no figure that must be yes.
pub fn must_hold(scenario: &'static str, name: &str, held: bool) -> Figure {
    Figure::at_least(scenario, name, if held { 1.0 } else { 0.0 }, "bool", 1.0)
}

/// Every job record under `runs/`, as the daemon left it.
pub fn records(rig: &Rig) -> anyhow::Result<Vec<JobRecord>> {
    let ids = rig.layout.job_ids().context("listing runs/")?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(record(rig, &id)?);
    }
    Ok(out)
}

/// One job's record, as every reader takes it: `job.json`, or its
/// journal's newer line (a young job's view is owed).
pub fn record(rig: &Rig, id: &JobId) -> anyhow::Result<JobRecord> {
    JobRecord::load_job(&rig.layout, id).with_context(|| format!("reading the record of job {id}"))
}

/// A job id the harness chose (front matter `job_id`).
pub fn job_id(s: &str) -> anyhow::Result<JobId> {
    JobId::parse(s).map_err(anyhow::Error::msg)
}

/// `program` as found on PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
