//! The effective configuration as TOML (`config show`): every default filled
//! in, in the shape a config file is written.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::{Config, PromptVia, ShownLimits, ShutdownPolicy, Template, WatchMode, format_size};

#[derive(Serialize)]
struct ShownConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    root: Option<&'a Path>,
    max_jobs: usize,
    heartbeat_interval: String,
    rescan_interval: String,
    settle: String,
    abort_grace: String,
    max_prompt_bytes: String,
    max_log_bytes: String,
    shutdown: ShutdownPolicy,
    drain_timeout: String,
    watch: WatchMode,
    events: bool,
    max_interrupts: u32,
    artifact_tail_bytes: String,
    keep_runs: usize,
    keep_days: u32,
    keep_artifacts: usize,
    gc_interval: String,
    reconcile_interval: String,
    slurm_poll_interval: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_inbox: Option<ShownSharedInbox<'a>>,
    profiles: BTreeMap<&'a str, ShownProfile<'a>>,
    #[serde(rename = "route", skip_serializing_if = "Vec::is_empty")]
    routes: Vec<ShownRoute<'a>>,
}

#[derive(Serialize)]
struct ShownSharedInbox<'a> {
    host: &'a str,
    lease: String,
}

#[derive(Serialize)]
struct ShownRoute<'a> {
    #[serde(rename = "match")]
    pattern: &'a str,
    profile: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    workdir: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_jobs: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_workdir: Option<bool>,
}

#[derive(Serialize)]
struct ShownGit<'a> {
    repo: &'a str,
    branch: &'a str,
    target: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    worktree: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fetch: Option<&'a str>,
}

#[derive(Serialize)]
struct ShownPhase<'a> {
    command: Vec<&'a str>,
    timeout: String,
}

#[derive(Serialize)]
struct ShownProfile<'a> {
    command: Vec<&'a str>,
    prompt_via: PromptVia,
    workdir: &'a str,
    timeout: String,
    env: &'a BTreeMap<String, String>,
    env_passthrough: &'a [String],
    max_attempts: u32,
    cooldown: String,
    rate_limit: ShownRateLimit<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_output: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prepare: Option<ShownPhase<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    publish: Option<ShownPhase<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<ShownLimits>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_jobs: Option<usize>,
    shared_workdir: bool,
    sandbox: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    git: Option<ShownGit<'a>>,
    executor: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    slurm: Option<ShownSlurm<'a>>,
}

#[derive(Serialize)]
struct ShownSlurm<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    account: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_limit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpus: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<&'a str>,
    sbatch_args: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_dir: Option<&'a Path>,
}

#[derive(Serialize)]
struct ShownRateLimit<'a> {
    exit_codes: &'a [i32],
    patterns: Vec<&'a str>,
    cooldown: String,
}

impl Config {
    /// The effective configuration as TOML, every default filled in.
    pub fn to_toml(&self) -> String {
        let dur = |d: Duration| humantime::format_duration(d).to_string();
        let shown = ShownConfig {
            root: self.root.as_deref(),
            max_jobs: self.max_jobs,
            heartbeat_interval: dur(self.heartbeat_interval),
            rescan_interval: dur(self.rescan_interval),
            settle: dur(self.settle),
            abort_grace: dur(self.abort_grace),
            max_prompt_bytes: format_size(self.max_prompt_bytes),
            max_log_bytes: format_size(self.max_log_bytes),
            shutdown: self.shutdown,
            drain_timeout: dur(self.drain_timeout),
            watch: self.watch,
            events: self.events,
            max_interrupts: self.max_interrupts,
            artifact_tail_bytes: format_size(self.artifact_tail_bytes),
            keep_runs: self.retention.keep_runs,
            keep_days: self.retention.keep_days,
            keep_artifacts: self.retention.keep_artifacts,
            gc_interval: dur(self.retention.gc_interval),
            reconcile_interval: dur(self.reconcile_interval),
            slurm_poll_interval: dur(self.slurm_poll_interval),
            shared_inbox: self.shared_inbox.as_ref().map(|s| ShownSharedInbox {
                host: &s.host,
                lease: dur(s.lease),
            }),
            profiles: self
                .profiles
                .iter()
                .map(|(n, p)| {
                    let shown = ShownProfile {
                        command: p.command.iter().map(Template::source).collect(),
                        prompt_via: p.prompt_via,
                        workdir: p.workdir.source(),
                        timeout: dur(p.timeout),
                        env: &p.env,
                        env_passthrough: &p.env_passthrough,
                        max_attempts: p.max_attempts,
                        cooldown: dur(p.cooldown),
                        rate_limit: ShownRateLimit {
                            exit_codes: &p.rate_limit.exit_codes,
                            patterns: p.rate_limit.patterns.sources().collect(),
                            cooldown: dur(p.rate_limit.cooldown),
                        },
                        keep_output: p.keep_output.map(format_size),
                        prepare: p.prepare.as_ref().map(|ph| ShownPhase {
                            command: ph.command.iter().map(Template::source).collect(),
                            timeout: dur(ph.timeout),
                        }),
                        publish: p.publish.as_ref().map(|ph| ShownPhase {
                            command: ph.command.iter().map(Template::source).collect(),
                            timeout: dur(ph.timeout),
                        }),
                        limits: p.limits.any().then(|| p.limits.shown()),
                        max_jobs: p.max_jobs,
                        shared_workdir: p.shared_workdir,
                        sandbox: p.sandbox,
                        git: p.git.as_ref().map(|g| ShownGit {
                            repo: g.repo.source(),
                            branch: g.branch.source(),
                            target: g.target.source(),
                            worktree: g.worktree.as_ref().map(Template::source),
                            fetch: g.fetch.as_deref(),
                        }),
                        executor: p.executor.as_str(),
                        slurm: p.executor.slurm().map(|s| ShownSlurm {
                            partition: s.partition.as_deref(),
                            account: s.account.as_deref(),
                            time_limit: s.time_limit.map(dur),
                            cpus: s.cpus,
                            memory: s.memory.as_deref(),
                            sbatch_args: &s.sbatch_args,
                            batch_dir: s.batch_dir.as_deref(),
                        }),
                    };
                    (n.as_str(), shown)
                })
                .collect(),
            routes: self
                .routes
                .iter()
                .map(|r| ShownRoute {
                    pattern: r.pattern.source(),
                    profile: &r.profile,
                    workdir: r.workdir.as_ref().map(Template::source),
                    env: r
                        .env
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.source()))
                        .collect(),
                    max_jobs: r.max_jobs,
                    shared_workdir: r.shared_workdir,
                })
                .collect(),
        };
        toml::to_string(&shown).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}
