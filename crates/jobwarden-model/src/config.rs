//! Configuration: where the root and the config file are (DESIGN §2), the
//! raw TOML shape (unknown keys rejected by name), and its validation, once,
//! into typed values ([`Config`]). Nothing downstream parses a string again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod diff;
mod env_retention;
pub use env_retention::RetentionEnv;
mod handover;
mod limits;
pub mod notify;
mod preflight;
mod profile;
mod rate_limit;
pub use rate_limit::Patterns;
mod raw;
mod resolve;
pub use resolve::{config_path, load, read_file, resolve_root};
mod route;
mod shared;
pub use shared::SharedInbox;
mod show;
mod slurm;
pub use slurm::{Executor, SlurmOptions};
mod template;
mod validate;

pub use diff::changes;
pub use env_retention::apply as apply_env;
pub use handover::{decode_handover, encode_handover, read_handover};
pub use limits::{Limits, ShownLimits};
pub use preflight::{Findings, preflight};
pub use route::{Route, RoutePattern};
pub use template::{Template, Vars, vars};

/// The profile used when nothing selects another.
pub const DEFAULT_PROFILE: &str = "default";

/// The built-in default profile's command: a demo that needs nothing
/// installed and shows the prompt reached the job. A real deployment sets
/// `[profiles.default] command` (see `config/config.toml`).
const DEMO_COMMAND: [&str; 3] = [
    "sh",
    "-c",
    "echo 'jobwarden demo profile: no agent is configured, so the prompt is echoed back:'; cat",
];

/// Upper bounds of sizes: far beyond any sane setting, well below where
/// size arithmetic could overflow. A prompt is read into memory, hence its cap.
const MAX_PROMPT_BYTES: u64 = 64 << 20;
const MAX_LOG_BYTES: u64 = 1 << 40;

/// The environment a config is resolved in, captured once at the CLI edge so
/// that resolution is a pure function (and testable).
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub jobwarden_home: Option<PathBuf>,
    pub jobwarden_config: Option<PathBuf>,
    pub xdg_config_home: Option<PathBuf>,
    pub xdg_data_home: Option<PathBuf>,
    pub home: Option<PathBuf>,
    pub is_root: bool,
    /// `JOBWARDEN_KEEP_*`: retention for this process (`env_retention.rs`).
    pub retention: RetentionEnv,
}

impl Env {
    pub fn from_process() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Env {
            jobwarden_home: var("JOBWARDEN_HOME"),
            jobwarden_config: var("JOBWARDEN_CONFIG"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            xdg_data_home: var("XDG_DATA_HOME"),
            home: var("HOME"),
            is_root: nix::unistd::geteuid().is_root(),
            retention: RetentionEnv::from_process(),
        }
    }
}

/// What the command line chose: `--config` and `--root` (`None` when not
/// given). With [`Env`], everything resolution reads; plain values, so that
/// config knows nothing of the CLI, and the daemon can resolve again on a
/// reload exactly as it did at start.
#[derive(Debug, Clone, Default)]
pub struct Choices {
    pub config: Option<PathBuf>,
    pub root: Option<PathBuf>,
}

/// One fault of a configuration: the key at fault (`profiles.review.timeout`,
/// `route[0].workdir`; empty for the file as a whole) and what is wrong,
/// naming the key and the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub key: String,
    pub message: String,
}

/// A configuration that cannot be used: the file (or "built-in defaults")
/// and every problem found in it.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub origin: String,
    pub problems: Vec<Problem>,
}

impl ConfigError {
    /// Each problem as its own line, naming the file (for `status` and a
    /// refused reload, which list them one by one).
    pub fn messages(&self) -> Vec<String> {
        self.problems
            .iter()
            .map(|p| format!("config {}: {}", self.origin, p.message))
            .collect()
    }

    /// An error that is about the file as a whole (or the root), not a key.
    pub fn whole(origin: impl Into<String>, message: String) -> Self {
        ConfigError {
            origin: origin.into(),
            problems: vec![Problem {
                key: String::new(),
                message,
            }],
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.problems.as_slice() {
            [one] => write!(f, "config {}: {}", self.origin, one.message),
            all => {
                write!(f, "config {}: {} problems:", self.origin, all.len())?;
                for p in all {
                    write!(f, "\n  {}", p.message)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// Where the effective configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    BuiltIn,
    /// Handed to a monitor by its daemon.
    Inherited,
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::File(p) => write!(f, "{}", p.display()),
            ConfigSource::BuiltIn => f.write_str("built-in defaults (no config file)"),
            ConfigSource::Inherited => f.write_str("configuration handed over by the daemon"),
        }
    }
}

/// What to do with running jobs when the daemon stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShutdownPolicy {
    /// Leave monitors running; a restarted daemon re-adopts them.
    Detach,
    /// Wait for running jobs to end (at most `drain_timeout`), start no more.
    Drain,
    /// Abort running jobs (reason `shutdown`) and wait for them to end.
    Abort,
}

/// How the daemon learns of new prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchMode {
    /// inotify, plus rescans as a safety net.
    Inotify,
    /// Rescans only, every `rescan_interval` (for inboxes on filesystems
    /// where inotify sees nothing, such as network mounts).
    Rescan,
}

/// How the prompt reaches the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptVia {
    /// The prompt file is the command's stdin.
    Stdin,
    /// The prompt text is appended as the last argument; stdin is /dev/null.
    Arg,
    /// The command gets the prompt's path (`{prompt_file}`, appended when the
    /// command does not use it); stdin is /dev/null.
    File,
}

/// One validated profile.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub command: Vec<Template>,
    pub prompt_via: PromptVia,
    pub workdir: Template,
    pub timeout: Duration,
    pub env: BTreeMap<String, String>,
    pub env_passthrough: Vec<String>,
    /// Attempts in all, the first included (1: no automatic retry).
    pub max_attempts: u32,
    /// How long a `failure` or `timeout` defers the prompt's next claim.
    pub cooldown: Duration,
    pub rate_limit: RateLimit,
    /// Its main command's stdout and stderr kept for the ledger, each up to
    /// this many bytes (`keep_output = "8MiB"`): an output no longer is
    /// kept whole. `None`: the last `artifact_tail_bytes` only.
    pub keep_output: Option<u64>,
    /// Runs before the main command (cwd: the run folder), e.g. to create
    /// the workdir as a git worktree.
    pub prepare: Option<Phase>,
    /// Runs after the main command succeeded (cwd: the workdir), e.g. to
    /// commit, push and open a pull request; its last non-empty stdout line
    /// is the job's `result_ref`.
    pub publish: Option<Phase>,
    /// Resource limits on the job's processes (and its cgroup).
    pub limits: Limits,
    /// At most this many of its jobs run at once (besides `max_jobs`).
    pub max_jobs: Option<usize>,
    /// Its jobs may run beside other jobs in the same workdir (by default
    /// jobs sharing a workdir that is not their own run one at a time).
    pub shared_workdir: bool,
    /// The local hours its jobs may start in (`window = "22:00-06:00"`, or
    /// a list); empty: any time. A job running when one closes goes on.
    pub windows: Vec<jobwarden_sys::clock::Window>,
    /// Its jobs' local commands run in a sandbox of their own (the root
    /// read-only but for their workdir, `affected` and the inbox; their own
    /// pid namespace): see `monitor::sandbox`. On by default.
    pub sandbox: bool,
    /// Where its jobs' published work lives in git (`[profiles.*.git]`):
    /// what the reconcile watches until it is merged.
    pub git: Option<GitTemplates>,
    /// Where its main command runs (`executor`, `[profiles.*.slurm]`).
    pub executor: Executor,
}

/// A profile's `git` table, its values templates resolved per job into
/// `job.json`'s `git` ([`jobwarden_sys::git::GitWork`]).
#[derive(Debug, Clone)]
pub struct GitTemplates {
    pub repo: Template,
    pub branch: Template,
    pub target: Template,
    pub worktree: Option<Template>,
    /// A remote to fetch before the branch is judged.
    pub fetch: Option<String>,
}

impl GitTemplates {
    /// Every template of the table.
    pub fn templates(&self) -> impl Iterator<Item = &Template> {
        [&self.repo, &self.branch, &self.target]
            .into_iter()
            .chain(self.worktree.as_ref())
    }

    /// The table resolved for one job, checked as git will see it.
    pub fn resolve(&self, vars: &Vars) -> Result<jobwarden_sys::git::GitWork, String> {
        let work = jobwarden_sys::git::GitWork {
            repo: self.repo.render(vars),
            branch: self.branch.render(vars),
            target: self.target.render(vars),
            worktree: self.worktree.as_ref().map(|t| t.render(vars)),
            fetch: self.fetch.clone(),
            tip: None,
        };
        work.check()?;
        Ok(work)
    }
}

/// A `prepare` or `publish` command.
#[derive(Debug, Clone)]
pub struct Phase {
    pub command: Vec<Template>,
    pub timeout: Duration,
}

/// When a failed attempt counts as `rate_limited`, and its own cooldown.
#[derive(Debug, Clone)]
pub struct RateLimit {
    pub exit_codes: Vec<i32>,
    /// Matched against the tails of stdout and stderr.
    pub patterns: Patterns,
    pub cooldown: Duration,
}

impl RateLimit {
    /// Does a failed attempt with this exit code and output match?
    pub fn matches(&self, exit_code: Option<i32>, output: &[&str]) -> bool {
        exit_code.is_some_and(|c| self.exit_codes.contains(&c))
            || output.iter().any(|o| self.patterns.is_match(o))
    }
}

/// The largest `keep_runs`, `keep_days` and `keep_artifacts` taken.
const KEEP_RUNS_MAX: u64 = 10_000_000;
const KEEP_DAYS_MAX: u64 = 36_500;
const KEEP_ARTIFACTS_MAX: u64 = 1_000_000;

/// Retention of finished work (`jobwarden gc`, and periodically in the daemon).
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Keep at least the newest this many terminal run folders and archived prompts.
    pub keep_runs: usize,
    /// Keep everything that finished less than this many days ago.
    pub keep_days: u32,
    /// Keep artifacts of only the newest this many executions per prompt.
    pub keep_artifacts: usize,
    /// How often the daemon runs retention.
    pub gc_interval: Duration,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub source: ConfigSource,
    /// The TOML text it was read from ("" for built-in defaults), handed to
    /// monitors so that they run on exactly the daemon's configuration.
    pub text: String,
    pub root: Option<PathBuf>,
    pub max_jobs: usize,
    pub heartbeat_interval: Duration,
    pub rescan_interval: Duration,
    pub settle: Duration,
    pub abort_grace: Duration,
    pub max_prompt_bytes: u64,
    pub max_log_bytes: u64,
    pub shutdown: ShutdownPolicy,
    pub watch: WatchMode,
    /// How long `drain` and `abort` wait for running jobs before exiting anyway.
    pub drain_timeout: Duration,
    pub events: bool,
    pub profiles: BTreeMap<String, Profile>,
    /// An `interrupted` job's prompt is requeued at once, up to this many
    /// interruptions in a row; then it is archived as interrupted.
    pub max_interrupts: u32,
    /// Bytes of each output stream's tail kept in the ledger.
    pub artifact_tail_bytes: u64,
    pub retention: Retention,
    /// How often the published work of ended jobs is checked against git
    /// (merged, branch deleted) and running jobs' worktrees looked for;
    /// also once at start.
    pub reconcile_interval: Duration,
    /// How often the daemon asks Slurm about every Slurm job at once.
    pub slurm_poll_interval: Duration,
    /// `[shared_inbox]`: this daemon shares its inbox with daemons on
    /// other hosts (`shared_inbox.rs`).
    pub shared_inbox: Option<SharedInbox>,
    /// `[[route]]` entries, in order: the first that matches wins.
    pub routes: Vec<Route>,
    /// `[[notify]]` hooks.
    pub notify: Vec<notify::Hook>,
}

// ---------------------------------------------------------------------------
// Validation.

/// `sha256:<hex>` of a config's text: what `daemon.json` says of the
/// config in force, to tell whether a file is it.
pub fn digest(text: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", crate::job::hex(&Sha256::digest(text)))
}

/// Parse and validate TOML text into a [`Config`]; the error names every
/// problem of the text, not only the first.
pub fn parse(text: &str, source: ConfigSource) -> Result<Config, ConfigError> {
    let mut v = validate::Validator::default();
    let config = raw::read(text, &mut v.problems).map(|raw| build(&mut v, raw, text, &source));
    match config {
        Some(config) if v.problems.is_empty() => Ok(config),
        _ => Err(ConfigError {
            origin: source.to_string(),
            problems: v.problems,
        }),
    }
}

/// The typed configuration of `raw`, its problems noted in `v` (where a
/// value is faulty the default stands in, so that checking goes on).
fn build(
    v: &mut validate::Validator,
    raw: raw::RawConfig,
    text: &str,
    source: &ConfigSource,
) -> Config {
    const SEC: Duration = Duration::from_secs(1);
    let shutdown = v.choice(
        "shutdown",
        raw.shutdown,
        &[
            ("detach", ShutdownPolicy::Detach),
            ("drain", ShutdownPolicy::Drain),
            ("abort", ShutdownPolicy::Abort),
        ],
        "\"detach\" (jobs keep running), \"drain\" (wait for them) or \"abort\" (abort them)",
    );
    let watch = v.choice(
        "watch",
        raw.watch,
        &[
            ("inotify", WatchMode::Inotify),
            ("rescan", WatchMode::Rescan),
        ],
        "\"inotify\" or \"rescan\"",
    );
    // Top-level settings first, then profiles, then routes: problems are
    // listed in the order the file is usually written.
    let mut config = Config {
        source: source.clone(),
        text: text.to_owned(),
        root: v.take("root", raw.root, "a path in quotes"),
        max_jobs: v.count("max_jobs", raw.max_jobs, 4, 1, 4096) as usize,
        heartbeat_interval: v.duration("heartbeat_interval", raw.heartbeat_interval, 5 * SEC, true),
        rescan_interval: v.duration("rescan_interval", raw.rescan_interval, 60 * SEC, true),
        settle: v.duration("settle", raw.settle, 2 * SEC, false),
        abort_grace: v.duration("abort_grace", raw.abort_grace, 10 * SEC, false),
        max_prompt_bytes: v.size(
            "max_prompt_bytes",
            raw.max_prompt_bytes,
            1 << 20,
            MAX_PROMPT_BYTES,
        ),
        max_log_bytes: v.size("max_log_bytes", raw.max_log_bytes, 64 << 20, MAX_LOG_BYTES),
        shutdown: shutdown.unwrap_or(ShutdownPolicy::Detach),
        watch: watch.unwrap_or(WatchMode::Inotify),
        drain_timeout: v.duration("drain_timeout", raw.drain_timeout, 600 * SEC, false),
        events: v
            .take("events", raw.events, "true or false")
            .unwrap_or(true),
        profiles: BTreeMap::new(),
        max_interrupts: v.count("max_interrupts", raw.max_interrupts, 3, 1, 1000) as u32,
        artifact_tail_bytes: v.size(
            "artifact_tail_bytes",
            raw.artifact_tail_bytes,
            64 << 10,
            16 << 20,
        ),
        retention: Retention {
            keep_runs: v.count("keep_runs", raw.keep_runs, 1000, 0, KEEP_RUNS_MAX as i64) as usize,
            keep_days: v.count("keep_days", raw.keep_days, 30, 0, KEEP_DAYS_MAX as i64) as u32,
            keep_artifacts: v.count(
                "keep_artifacts",
                raw.keep_artifacts,
                10,
                0,
                KEEP_ARTIFACTS_MAX as i64,
            ) as usize,
            gc_interval: v.duration("gc_interval", raw.gc_interval, 3600 * SEC, true),
        },
        reconcile_interval: v.duration(
            "reconcile_interval",
            raw.reconcile_interval,
            300 * SEC,
            true,
        ),
        slurm_poll_interval: v.duration(
            "slurm_poll_interval",
            raw.slurm_poll_interval,
            2 * SEC,
            true,
        ),
        shared_inbox: None,
        routes: Vec::new(),
        notify: Vec::new(),
    };
    config.shared_inbox = shared::build(v, raw.shared_inbox.as_ref(), config.heartbeat_interval);
    config.profiles = profile::build(v, &raw.profiles);
    config.routes = route::build(v, &raw.routes, &config.profiles);
    config.notify = notify::build(v, &raw.notify);
    config
}

impl Config {
    /// The `default` profile: prompts no route matches run on it.
    pub fn default_profile(&self) -> &Profile {
        // `profiles()` always inserts the default profile.
        &self.profiles[DEFAULT_PROFILE]
    }

    /// Does any profile run its jobs on Slurm?
    pub fn uses_slurm(&self) -> bool {
        self.profiles.values().any(|p| p.executor.slurm().is_some())
    }

    /// Which route, profile and captures a prompt in folder `project` gets;
    /// `profile` (front matter) replaces the route's profile. An error is
    /// why the prompt cannot run (it is rejected with it).
    pub fn select(&self, project: &str, profile: Option<&str>) -> Result<Selection<'_>, String> {
        let matched = self
            .routes
            .iter()
            .enumerate()
            .find_map(|(i, r)| r.pattern.matches(project).map(|c| (i, r, c)));
        let (route, captures) = match matched {
            Some((i, r, c)) => (Some((i, r)), c),
            None => (None, BTreeMap::new()),
        };
        for (k, v) in &captures {
            crate::layout::validate_segment(v).map_err(|e| {
                format!("route capture {{{k}}} = {v:?} {e}; it cannot be used in a path")
            })?;
        }
        let name = profile
            .or(route.map(|(_, r)| r.profile.as_str()))
            .unwrap_or(DEFAULT_PROFILE);
        let chosen = self.profiles.get(name).ok_or_else(|| {
            format!(
                "profile {name:?} is not defined; the profiles are: {}",
                self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })?;
        if let Some(v) = route::needed_captures(chosen).find(|v| !captures.contains_key(*v)) {
            let by = route.map_or("no route matches its folder".to_owned(), |(i, r)| {
                format!(
                    "route #{} (match = {:?}) does not capture it",
                    i + 1,
                    r.pattern.source()
                )
            });
            return Err(format!("profile {name:?} uses {{{v}}}, but {by}"));
        }
        Ok(Selection {
            route,
            profile: chosen,
            captures,
        })
    }

    /// The profile a job was claimed with (its record names it).
    pub fn profile_of(&self, rec: &crate::job::JobRecord) -> Result<&Profile, String> {
        let name = rec.profile.as_deref().unwrap_or(DEFAULT_PROFILE);
        self.profiles.get(name).ok_or_else(|| {
            format!("profile {name:?} of this job is no longer in the configuration; restore it or retry the prompt")
        })
    }

    /// Whether a job writes `events.jsonl`: its front matter, else `events`.
    pub fn events_for(&self, rec: &crate::job::JobRecord) -> bool {
        rec.overrides.events.unwrap_or(self.events)
    }

    /// The main command's timeout of a job: its front matter's, else its
    /// profile's.
    pub fn timeout_for(&self, rec: &crate::job::JobRecord, profile: &Profile) -> Duration {
        rec.overrides
            .timeout_ms
            .map_or(profile.timeout, Duration::from_millis)
    }

    /// The route a job was claimed through, if it still exists.
    pub fn route_of(&self, rec: &crate::job::JobRecord) -> Option<&Route> {
        let pattern = rec.route.as_deref()?;
        self.routes.iter().find(|r| r.pattern.source() == pattern)
    }

    /// Pairs of routes some folder matches both of (the first wins there):
    /// worth a look, not an error. Each is the later route's index and why.
    pub fn overlapping_routes(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (j, later) in self.routes.iter().enumerate() {
            for (i, earlier) in self.routes[..j].iter().enumerate() {
                if earlier.pattern.overlaps(&later.pattern) {
                    out.push((j, format!(
                        "route #{} (match = {:?}) overlaps route #{} (match = {:?}): folders matching both go to route #{}",
                        j + 1,
                        later.pattern.source(),
                        i + 1,
                        earlier.pattern.source(),
                        i + 1
                    )));
                }
            }
        }
        out
    }
}

/// What [`Config::select`] chose for a prompt.
#[derive(Debug)]
pub struct Selection<'a> {
    /// The matching route and its position, if any matched.
    pub route: Option<(usize, &'a Route)>,
    pub profile: &'a Profile,
    pub captures: BTreeMap<String, String>,
}

/// A size in the largest binary unit that divides it exactly.
pub fn format_size(bytes: u64) -> String {
    for (unit, factor) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= factor && bytes % factor == 0 {
            return format!("{}{unit}", bytes / factor);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests;
