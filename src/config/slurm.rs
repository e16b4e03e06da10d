//! A profile's executor: `executor = "local"` (the default: the monitor
//! runs the command itself) or `"slurm"`, with `[profiles.*.slurm]`
//! saying how the job is submitted (`sbatch`'s options). The monitor still
//! supervises a Slurm job and writes its records (`monitor/slurm.rs`).

use std::path::PathBuf;
use std::time::Duration;

use super::raw::{Loose, RawProfile, RawSlurm};
use super::validate::Validator;

/// Where a profile's main command runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Executor {
    /// Here, under the monitor.
    #[default]
    Local,
    /// As a Slurm batch job.
    Slurm(SlurmOptions),
}

impl Executor {
    pub fn as_str(&self) -> &'static str {
        match self {
            Executor::Local => "local",
            Executor::Slurm(_) => "slurm",
        }
    }

    pub fn slurm(&self) -> Option<&SlurmOptions> {
        match self {
            Executor::Slurm(o) => Some(o),
            Executor::Local => None,
        }
    }
}

/// `[profiles.*.slurm]`: what `sbatch` is given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlurmOptions {
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Slurm's time limit; by default the profile's timeout and a minute,
    /// as a backstop (the monitor enforces the timeout itself).
    pub time_limit: Option<Duration>,
    pub cpus: Option<u32>,
    /// As `sbatch --mem` takes it: `8G`, `500M`.
    pub memory: Option<String>,
    /// More `sbatch` options, each one argument.
    pub sbatch_args: Vec<String>,
    /// Where the batch output and the wrapper's records go, on a
    /// filesystem the nodes share; by default the job's run folder.
    pub batch_dir: Option<PathBuf>,
}

/// The `sbatch` options jobwarden sets itself: a profile may not.
const OWN_OPTIONS: &[&str] = &[
    "--parsable",
    "--job-name",
    "-J",
    "--output",
    "-o",
    "--error",
    "-e",
    "--chdir",
    "-D",
    "--comment",
    "--wrap",
    "--export",
    "--open-mode",
    "--input",
    "-i",
    "--wait",
    "-W",
    "--requeue",
    "--no-requeue",
];

/// The executor of profile `name` (`key` prefixes its keys), inheriting
/// `base`'s when it says nothing.
pub(super) fn executor(
    v: &mut Validator,
    key: &dyn Fn(&str) -> String,
    p: &RawProfile,
    base: Option<&Executor>,
) -> Executor {
    let which = v.choice(
        &key("executor"),
        p.executor.clone(),
        &[("local", false), ("slurm", true)],
        "\"local\" or \"slurm\"",
    );
    let slurm = match which {
        Some(true) => true,
        Some(false) => false,
        None => matches!(base, Some(Executor::Slurm(_))),
    };
    if !slurm {
        if p.slurm.is_some() {
            v.fault(
                &key("slurm"),
                format!(
                    "{}: set, but the profile's executor is \"local\"; add executor = \"slurm\" or remove the table",
                    key("slurm")
                ),
            );
        }
        return Executor::Local;
    }
    if p.limits.is_some() {
        v.fault(
            &key("limits"),
            format!(
                "{}: limits apply to jobs run here; a Slurm job's are {} (cpus, memory, time_limit)",
                key("limits"),
                key("slurm")
            ),
        );
    }
    let options = match (&p.slurm, base.and_then(Executor::slurm)) {
        (Some(raw), _) => options(v, &key("slurm"), raw),
        (None, Some(inherited)) => inherited.clone(),
        (None, None) => SlurmOptions::default(),
    };
    Executor::Slurm(options)
}

fn options(v: &mut Validator, key: &str, raw: &RawSlurm) -> SlurmOptions {
    let k = |name: &str| format!("{key}.{name}");
    let word = |v: &mut Validator, name: &str, value: &Option<Loose<String>>| {
        let text = v.take(&k(name), value.clone(), "a string")?;
        if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            v.fault(
                &k(name),
                format!(
                    "{} = {text:?}: must be one word, as Slurm names it",
                    k(name)
                ),
            );
            return None;
        }
        Some(text)
    };
    let partition = word(v, "partition", &raw.partition);
    let account = word(v, "account", &raw.account);
    let memory = word(v, "memory", &raw.memory);
    if let Some(m) = &memory {
        let digits = m.trim_end_matches(['K', 'M', 'G', 'T']);
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || m.len() - digits.len() > 1
        {
            v.fault(
                &k("memory"),
                format!(
                    "{} = {m:?}: write it as sbatch --mem takes it, e.g. \"8G\" or \"500M\"",
                    k("memory")
                ),
            );
        }
    }
    let time_limit = v.dur(&k("time_limit"), raw.time_limit.clone(), true);
    let cpus = v
        .num(&k("cpus"), raw.cpus.clone(), 1, 100_000)
        .map(|n| n as u32);
    let sbatch_args = v
        .take(
            &k("sbatch_args"),
            raw.sbatch_args.clone(),
            "a list of strings",
        )
        .unwrap_or_default();
    for arg in &sbatch_args {
        let name = arg.split('=').next().unwrap_or(arg);
        if OWN_OPTIONS.contains(&name) {
            v.fault(
                &k("sbatch_args"),
                format!("{}: {arg:?} is set by jobwarden itself (it follows the job by its output, name and comment); remove it", k("sbatch_args")),
            );
        } else if !arg.starts_with('-') {
            v.fault(
                &k("sbatch_args"),
                format!("{}: {arg:?} is not an option; each entry is one sbatch option, like \"--qos=high\"", k("sbatch_args")),
            );
        }
    }
    let batch_dir = v.take(&k("batch_dir"), raw.batch_dir.clone(), "a path in quotes");
    if let Some(dir) = batch_dir.as_ref().filter(|d| !d.is_absolute()) {
        v.fault(
            &k("batch_dir"),
            format!(
                "{} = {:?}: not an absolute path; name a folder the cluster's nodes share, from /",
                k("batch_dir"),
                dir.display()
            ),
        );
    }
    SlurmOptions {
        partition,
        account,
        time_limit,
        cpus,
        memory,
        sbatch_args,
        batch_dir,
    }
}
