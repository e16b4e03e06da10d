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

/// The `sbatch` options jobwarden sets itself, or that would break what
/// it promises (a job run once, followed by its name and output): a
/// profile may not give them, in any spelling `sbatch` accepts (a long
/// option abbreviated, a short one with its value attached).
const OWN_LONG: &[(&str, &str)] = &[
    ("--parsable", "jobwarden reads the job id"),
    ("--job-name", "jobwarden follows the job by its name"),
    (
        "--output",
        "jobwarden copies the job's output from its own file",
    ),
    (
        "--error",
        "jobwarden copies the job's output from its own file",
    ),
    ("--chdir", "the job runs in its workdir"),
    ("--comment", "jobwarden sets it"),
    ("--wrap", "jobwarden submits its own batch script"),
    ("--export", "the job gets the profile's environment"),
    (
        "--open-mode",
        "jobwarden copies the job's output from its own file",
    ),
    ("--input", "the command reads its prompt"),
    ("--wait", "the monitor follows the job instead"),
    (
        "--requeue",
        "another attempt is the retry policy's to decide",
    ),
    ("--no-requeue", "jobwarden sets it"),
    ("--array", "it would run the command once per task"),
    ("--time", "use slurm.time_limit"),
    ("--test-only", "nothing would run"),
    (
        "--hold",
        "the job would wait for a release jobwarden never gives",
    ),
];
const OWN_SHORT: &[(&str, &str)] = &[
    ("-J", "--job-name"),
    ("-o", "--output"),
    ("-e", "--error"),
    ("-D", "--chdir"),
    ("-i", "--input"),
    ("-W", "--wait"),
    ("-a", "--array"),
    ("-t", "--time"),
    ("-H", "--hold"),
];

/// Why `arg` may not be among a profile's `sbatch_args`, if it may not.
fn refused(arg: &str) -> Option<String> {
    let name = arg.split('=').next().unwrap_or(arg);
    if let Some(long) = name.strip_prefix("--") {
        // getopt_long takes any unambiguous beginning of a long option.
        return OWN_LONG
            .iter()
            .find(|(own, _)| long.len() >= 2 && own[2..].starts_with(long))
            .map(|(own, why)| format!("{own}: {why}"));
    }
    OWN_SHORT
        .iter()
        .find(|(short, _)| arg.starts_with(short))
        .and_then(|(_, long)| OWN_LONG.iter().find(|(own, _)| own == long))
        .map(|(own, why)| format!("{own}: {why}"))
}

/// Variables that pick the cluster: the daemon's, never a profile's, so
/// that `sbatch` and the daemon's polls and cancels ask the same cluster.
const CLUSTER_VARS: &[&str] = &["SLURM_CONF", "SLURM_CLUSTERS"];

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

/// A Slurm profile's `env` may not pick the cluster: `sbatch` would ask
/// one cluster and the daemon's polls and cancels another.
pub(super) fn check_env(v: &mut Validator, key: &dyn Fn(&str) -> String, p: &super::Profile) {
    if p.executor.slurm().is_none() {
        return;
    }
    for var in CLUSTER_VARS.iter().filter(|var| p.env.contains_key(**var)) {
        v.fault(
            &key("env"),
            format!(
                "{}: {var} picks the Slurm cluster, which must be the daemon's (its polls and cancels ask it): set {var} in the daemon's environment instead (systemctl edit jobwarden: Environment={var}=...)",
                key("env")
            ),
        );
    }
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
        if let Some(why) = refused(arg) {
            v.fault(
                &k("sbatch_args"),
                format!(
                    "{}: {arg:?} is not allowed ({why}); remove it",
                    k("sbatch_args")
                ),
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
