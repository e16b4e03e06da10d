//! Configuration: where the root and the config file are (DESIGN §2), the
//! raw TOML shape (unknown keys rejected by name), and its validation, once,
//! into typed values ([`Config`]). Nothing downstream parses a string again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cli::GlobalArgs;

mod limits;
mod rate_limit;
mod route;
mod template;

pub use limits::{Limits, ShownLimits};
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

/// Upper bounds: far beyond any sane setting, well below where time or size
/// arithmetic could overflow. A prompt is read into memory, hence its cap.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
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
        }
    }
}

/// A configuration problem, naming the file (or "built-in defaults") and
/// the key or value at fault.
#[derive(Debug, thiserror::Error)]
#[error("config {origin}: {message}")]
pub struct ConfigError {
    pub origin: String,
    pub message: String,
}

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
    /// Runs before the main command (cwd: the run folder), e.g. to create
    /// the workdir as a git worktree.
    pub prepare: Option<Phase>,
    /// Runs after the main command succeeded (cwd: the workdir), e.g. to
    /// commit, push and open a pull request; its last non-empty stdout line
    /// is the job's `result_ref`.
    pub publish: Option<Phase>,
    /// Resource limits on the job's processes (and its cgroup).
    pub limits: Limits,
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
    pub patterns: Vec<regex::Regex>,
    pub cooldown: Duration,
}

impl RateLimit {
    /// Does a failed attempt with this exit code and output match?
    pub fn matches(&self, exit_code: Option<i32>, output: &[&str]) -> bool {
        exit_code.is_some_and(|c| self.exit_codes.contains(&c))
            || self
                .patterns
                .iter()
                .any(|re| output.iter().any(|o| re.is_match(o)))
    }
}

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
    /// `[[route]]` entries, in order: the first that matches wins.
    pub routes: Vec<Route>,
}

// ---------------------------------------------------------------------------
// Raw shape, as written in TOML.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    root: Option<PathBuf>,
    max_jobs: Option<i64>,
    heartbeat_interval: Option<String>,
    rescan_interval: Option<String>,
    settle: Option<String>,
    abort_grace: Option<String>,
    max_prompt_bytes: Option<RawSize>,
    max_log_bytes: Option<RawSize>,
    shutdown: Option<String>,
    drain_timeout: Option<String>,
    watch: Option<String>,
    events: Option<bool>,
    max_interrupts: Option<i64>,
    artifact_tail_bytes: Option<RawSize>,
    keep_runs: Option<i64>,
    keep_days: Option<i64>,
    keep_artifacts: Option<i64>,
    gc_interval: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, RawProfile>,
    #[serde(default, rename = "route")]
    routes: Vec<route::RawRoute>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    command: Option<Vec<String>>,
    prompt_via: Option<String>,
    workdir: Option<String>,
    timeout: Option<String>,
    env: Option<BTreeMap<String, String>>,
    env_passthrough: Option<Vec<String>>,
    max_attempts: Option<i64>,
    cooldown: Option<String>,
    rate_limit: Option<RawRateLimit>,
    prepare: Option<RawPhase>,
    publish: Option<RawPhase>,
    limits: Option<limits::RawLimits>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPhase {
    command: Vec<String>,
    timeout: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    exit_codes: Option<Vec<i32>>,
    patterns: Option<Vec<String>>,
    cooldown: Option<String>,
}

/// A size is a string with a unit (`"64MiB"`) or a plain number of bytes.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawSize {
    Bytes(i64),
    Text(String),
}

// ---------------------------------------------------------------------------
// Resolution.

/// Find the config file: `--config`, `JOBWARDEN_CONFIG`, the user's config
/// folder, `/etc/jobwarden/config.toml`. An explicitly named file must
/// exist; the default locations are optional.
pub fn config_path(global: &GlobalArgs, env: &Env) -> Result<Option<PathBuf>, ConfigError> {
    let explicit = global
        .config
        .clone()
        .or_else(|| env.jobwarden_config.clone());
    if let Some(path) = explicit {
        if !path.is_file() {
            return Err(ConfigError {
                origin: path.display().to_string(),
                message: "file not found (named by --config or JOBWARDEN_CONFIG); create it or drop the option to use built-in defaults".into(),
            });
        }
        return Ok(Some(path));
    }
    let user = env
        .xdg_config_home
        .clone()
        .or_else(|| env.home.as_ref().map(|h| h.join(".config")))
        .map(|d| d.join("jobwarden/config.toml"));
    let candidates = user
        .into_iter()
        .chain([PathBuf::from("/etc/jobwarden/config.toml")]);
    Ok(candidates.into_iter().find(|p| p.is_file()))
}

/// Load and validate the configuration the CLI flags and environment select.
pub fn load(global: &GlobalArgs, env: &Env) -> Result<Config, ConfigError> {
    match config_path(global, env)? {
        Some(path) => {
            let text = std::fs::read_to_string(&path).map_err(|e| ConfigError {
                origin: path.display().to_string(),
                message: format!("cannot read: {e}"),
            })?;
            parse(&text, ConfigSource::File(path))
        }
        None => parse("", ConfigSource::BuiltIn),
    }
}

/// Resolve the root: `--root`, `JOBWARDEN_HOME`, the config's `root`, then
/// `/var/lib/jobwarden` for root and the XDG data folder otherwise.
pub fn resolve_root(
    global: &GlobalArgs,
    env: &Env,
    config: &Config,
) -> Result<PathBuf, ConfigError> {
    let chosen = global
        .root
        .clone()
        .or_else(|| env.jobwarden_home.clone())
        .or_else(|| config.root.clone());
    if let Some(root) = chosen {
        return absolute(root);
    }
    if env.is_root {
        return Ok(PathBuf::from("/var/lib/jobwarden"));
    }
    env.xdg_data_home
        .clone()
        .or_else(|| env.home.as_ref().map(|h| h.join(".local/share")))
        .map(|d| d.join("jobwarden"))
        .ok_or_else(|| ConfigError {
            origin: "root".into(),
            message: "cannot choose a root: neither --root, JOBWARDEN_HOME, `root`, XDG_DATA_HOME nor HOME is set".into(),
        })
}

fn absolute(root: PathBuf) -> Result<PathBuf, ConfigError> {
    std::path::absolute(&root).map_err(|e| ConfigError {
        origin: "root".into(),
        message: format!("cannot make {} absolute: {e}", root.display()),
    })
}

// ---------------------------------------------------------------------------
// Validation.

/// Parse and validate TOML text into a [`Config`].
pub fn parse(text: &str, source: ConfigSource) -> Result<Config, ConfigError> {
    let origin = source.to_string();
    let err = |message: String| ConfigError {
        origin: origin.clone(),
        message,
    };
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| err(e.to_string().trim_end().to_owned()))?;
    let v = Validator { err: &err };
    let profiles = v.profiles(&raw.profiles)?;
    let env_name = |key: &str, name: &str| v.env_name(key, name).map_err(|e| e.message);
    let routes = route::build(&raw.routes, &profiles, &env_name).map_err(&err)?;
    Ok(Config {
        source,
        text: text.to_owned(),
        root: raw.root,
        max_jobs: v.max_jobs(raw.max_jobs)?,
        heartbeat_interval: v.duration("heartbeat_interval", raw.heartbeat_interval, "5s", true)?,
        rescan_interval: v.duration("rescan_interval", raw.rescan_interval, "60s", true)?,
        settle: v.duration("settle", raw.settle, "2s", false)?,
        abort_grace: v.duration("abort_grace", raw.abort_grace, "10s", false)?,
        max_prompt_bytes: v.size(
            "max_prompt_bytes",
            raw.max_prompt_bytes,
            1 << 20,
            MAX_PROMPT_BYTES,
        )?,
        max_log_bytes: v.size("max_log_bytes", raw.max_log_bytes, 64 << 20, MAX_LOG_BYTES)?,
        shutdown: v.shutdown(raw.shutdown)?,
        watch: v.watch(raw.watch)?,
        drain_timeout: v.duration("drain_timeout", raw.drain_timeout, "10m", false)?,
        events: raw.events.unwrap_or(true),
        profiles,
        max_interrupts: v.count("max_interrupts", raw.max_interrupts, 3, 1, 1000)? as u32,
        artifact_tail_bytes: v.size(
            "artifact_tail_bytes",
            raw.artifact_tail_bytes,
            64 << 10,
            16 << 20,
        )?,
        retention: Retention {
            keep_runs: v.count("keep_runs", raw.keep_runs, 1000, 0, 10_000_000)? as usize,
            keep_days: v.count("keep_days", raw.keep_days, 30, 0, 36_500)? as u32,
            keep_artifacts: v.count("keep_artifacts", raw.keep_artifacts, 10, 0, 1_000_000)?
                as usize,
            gc_interval: v.duration("gc_interval", raw.gc_interval, "1h", true)?,
        },
        routes,
    })
}

struct Validator<'a, F: Fn(String) -> ConfigError> {
    err: &'a F,
}

impl<F: Fn(String) -> ConfigError> Validator<'_, F> {
    /// An integer setting within `min..=max`.
    fn count(
        &self,
        key: &str,
        v: Option<i64>,
        default: i64,
        min: i64,
        max: i64,
    ) -> Result<u64, ConfigError> {
        match v.unwrap_or(default) {
            n if (min..=max).contains(&n) => Ok(n as u64),
            n => Err((self.err)(format!(
                "{key} = {n}: must be between {min} and {max}"
            ))),
        }
    }

    fn max_jobs(&self, v: Option<i64>) -> Result<usize, ConfigError> {
        match v.unwrap_or(4) {
            n @ 1..=4096 => Ok(n as usize),
            n => Err((self.err)(format!(
                "max_jobs = {n}: must be between 1 and 4096"
            ))),
        }
    }

    fn duration(
        &self,
        key: &str,
        v: Option<String>,
        default: &str,
        nonzero: bool,
    ) -> Result<Duration, ConfigError> {
        let text = v.as_deref().unwrap_or(default);
        let d = humantime::parse_duration(text).map_err(|e| {
            (self.err)(format!(
                "{key} = {text:?}: not a duration ({e}); write e.g. \"500ms\", \"5s\", \"2h\""
            ))
        })?;
        if nonzero && d.is_zero() {
            return Err((self.err)(format!(
                "{key} = {text:?}: must be greater than zero"
            )));
        }
        if d > MAX_DURATION {
            return Err((self.err)(format!(
                "{key} = {text:?}: must be at most 365 days"
            )));
        }
        Ok(d)
    }

    fn size(
        &self,
        key: &str,
        v: Option<RawSize>,
        default: u64,
        max: u64,
    ) -> Result<u64, ConfigError> {
        let bytes = match v {
            None => default,
            Some(RawSize::Bytes(n)) => u64::try_from(n)
                .map_err(|_| (self.err)(format!("{key} = {n}: must not be negative")))?,
            Some(RawSize::Text(t)) => t
                .parse::<bytesize::ByteSize>()
                .map(|b| b.as_u64())
                .map_err(|e| {
                    (self.err)(format!("{key} = {t:?}: not a size ({e}); write e.g. \"64KiB\", \"1MiB\" or a number of bytes"))
                })?,
        };
        if bytes == 0 {
            return Err((self.err)(format!("{key}: must be greater than zero")));
        }
        if bytes > max {
            return Err((self.err)(format!(
                "{key}: must be at most {}",
                format_size(max)
            )));
        }
        Ok(bytes)
    }

    fn watch(&self, v: Option<String>) -> Result<WatchMode, ConfigError> {
        match v.as_deref().unwrap_or("inotify") {
            "inotify" => Ok(WatchMode::Inotify),
            "rescan" => Ok(WatchMode::Rescan),
            other => Err((self.err)(format!(
                "watch = {other:?}: must be \"inotify\" or \"rescan\""
            ))),
        }
    }

    fn shutdown(&self, v: Option<String>) -> Result<ShutdownPolicy, ConfigError> {
        match v.as_deref().unwrap_or("detach") {
            "detach" => Ok(ShutdownPolicy::Detach),
            "drain" => Ok(ShutdownPolicy::Drain),
            "abort" => Ok(ShutdownPolicy::Abort),
            other => Err((self.err)(format!(
                "shutdown = {other:?}: must be \"detach\" (jobs keep running), \"drain\" (wait for them) or \"abort\" (abort them)"
            ))),
        }
    }

    /// Validate every profile; each inherits unset keys from `default`
    /// (which itself falls back to the built-in demo).
    fn profiles(
        &self,
        raw: &BTreeMap<String, RawProfile>,
    ) -> Result<BTreeMap<String, Profile>, ConfigError> {
        let base = raw.get(DEFAULT_PROFILE).cloned().unwrap_or_default();
        let mut out = BTreeMap::new();
        out.insert(
            DEFAULT_PROFILE.to_owned(),
            self.profile(DEFAULT_PROFILE, &base, &RawProfile::default())?,
        );
        for (name, p) in raw.iter().filter(|(n, _)| n.as_str() != DEFAULT_PROFILE) {
            crate::layout::validate_segment(name)
                .map_err(|e| (self.err)(format!("profile name {name:?} {e}")))?;
            out.insert(name.clone(), self.profile(name, p, &base)?);
        }
        Ok(out)
    }

    fn profile(
        &self,
        name: &str,
        p: &RawProfile,
        base: &RawProfile,
    ) -> Result<Profile, ConfigError> {
        let key = |k: &str| format!("profiles.{name}.{k}");
        let command = p.command.clone().or_else(|| base.command.clone());
        let command = command.unwrap_or_else(|| DEMO_COMMAND.map(String::from).to_vec());
        if command.is_empty() || command[0].is_empty() {
            return Err((self.err)(format!(
                "{}: must name a program, e.g. [\"codex\", \"exec\", \"-\"]",
                key("command")
            )));
        }
        let command = self.argv(&key("command"), &command)?;
        let workdir_text = p
            .workdir
            .clone()
            .or_else(|| base.workdir.clone())
            .unwrap_or_else(|| "{job_workdir}".into());
        let workdir = Template::parse_open(&workdir_text)
            .map_err(|e| (self.err)(format!("{}: {e}", key("workdir"))))?;
        if workdir.uses("workdir") {
            return Err((self.err)(format!(
                "{}: {workdir_text:?} cannot use {{workdir}} itself",
                key("workdir")
            )));
        }
        let phase = |which: &str, raw: Option<&RawPhase>| -> Result<Option<Phase>, ConfigError> {
            let Some(raw) = raw else { return Ok(None) };
            let k = key(which);
            if raw.command.is_empty() || raw.command[0].is_empty() {
                return Err((self.err)(format!(
                    "{k}.command: must name a program, e.g. [\"/usr/local/lib/jobwarden/worktree-prepare\", ...]"
                )));
            }
            Ok(Some(Phase {
                command: self.argv(&format!("{k}.command"), &raw.command)?,
                timeout: self.duration(
                    &format!("{k}.timeout"),
                    raw.timeout.clone(),
                    "10m",
                    true,
                )?,
            }))
        };
        let prepare = phase("prepare", p.prepare.as_ref().or(base.prepare.as_ref()))?;
        let publish = phase("publish", p.publish.as_ref().or(base.publish.as_ref()))?;
        let via = p.prompt_via.clone().or_else(|| base.prompt_via.clone());
        let timeout = p.timeout.clone().or_else(|| base.timeout.clone());
        let attempts = p.max_attempts.or(base.max_attempts);
        let cooldown = p.cooldown.clone().or_else(|| base.cooldown.clone());
        let rate_limit = p
            .rate_limit
            .clone()
            .or_else(|| base.rate_limit.clone())
            .unwrap_or_default();
        let limits = p.limits.clone().or_else(|| base.limits.clone());
        Ok(Profile {
            name: name.to_owned(),
            command,
            prompt_via: self.prompt_via(&key("prompt_via"), via)?,
            workdir,
            timeout: self.duration(&key("timeout"), timeout, "2h", true)?,
            env: self.env(
                &key("env"),
                p.env
                    .clone()
                    .or_else(|| base.env.clone())
                    .unwrap_or_default(),
            )?,
            env_passthrough: self.env_names(
                &key("env_passthrough"),
                p.env_passthrough
                    .clone()
                    .or_else(|| base.env_passthrough.clone())
                    .unwrap_or_default(),
            )?,
            max_attempts: self.count(&key("max_attempts"), attempts, 1, 1, 100)? as u32,
            cooldown: self.duration(&key("cooldown"), cooldown, "2h", false)?,
            rate_limit: self.rate_limit(&key("rate_limit"), rate_limit)?,
            prepare,
            publish,
            limits: self.limits(&key("limits"), limits.unwrap_or_default())?,
        })
    }

    /// An argv of templates: job placeholders, or names a route captures
    /// (checked against the routes that select the profile).
    fn argv(&self, key: &str, args: &[String]) -> Result<Vec<Template>, ConfigError> {
        args.iter()
            .map(|a| Template::parse_open(a).map_err(|e| (self.err)(format!("{key}: {e}"))))
            .collect()
    }

    /// A profile's rate-limit rules; without `patterns`, the built-in ones
    /// (`config/rate_limit.rs`).
    fn rate_limit(&self, key: &str, raw: RawRateLimit) -> Result<RateLimit, ConfigError> {
        let patterns = raw
            .patterns
            .unwrap_or_else(rate_limit::default_patterns)
            .iter()
            .map(|p| {
                regex::Regex::new(p).map_err(|e| {
                    (self.err)(format!("{key}.patterns: {p:?} is not a valid regex: {e}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RateLimit {
            exit_codes: raw.exit_codes.unwrap_or_default(),
            patterns,
            cooldown: self.duration(&format!("{key}.cooldown"), raw.cooldown, "15m", false)?,
        })
    }

    fn prompt_via(&self, key: &str, v: Option<String>) -> Result<PromptVia, ConfigError> {
        match v.as_deref().unwrap_or("stdin") {
            "stdin" => Ok(PromptVia::Stdin),
            "arg" => Ok(PromptVia::Arg),
            "file" => Ok(PromptVia::File),
            other => Err((self.err)(format!(
                "{key} = {other:?}: must be \"stdin\", \"arg\" or \"file\""
            ))),
        }
    }

    fn env(
        &self,
        key: &str,
        env: BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, ConfigError> {
        for (k, v) in &env {
            self.env_name(key, k)?;
            if v.contains('\0') {
                return Err((self.err)(format!("{key}.{k}: value contains a NUL byte")));
            }
        }
        Ok(env)
    }

    fn env_names(&self, key: &str, names: Vec<String>) -> Result<Vec<String>, ConfigError> {
        for n in &names {
            self.env_name(key, n)?;
        }
        Ok(names)
    }

    fn env_name(&self, key: &str, name: &str) -> Result<(), ConfigError> {
        let ok = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err((self.err)(format!(
                "{key}: {name:?} is not a valid environment variable name"
            )));
        }
        if name.starts_with("JOBWARDEN_") {
            return Err((self.err)(format!(
                "{key}: {name:?}: JOBWARDEN_* variables are set by jobwarden itself"
            )));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Display of the effective configuration (`config show`).

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
    profiles: BTreeMap<&'a str, ShownProfile<'a>>,
    #[serde(rename = "route", skip_serializing_if = "Vec::is_empty")]
    routes: Vec<ShownRoute<'a>>,
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
    prepare: Option<ShownPhase<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    publish: Option<ShownPhase<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<ShownLimits>,
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
                            patterns: p
                                .rate_limit
                                .patterns
                                .iter()
                                .map(regex::Regex::as_str)
                                .collect(),
                            cooldown: dur(p.rate_limit.cooldown),
                        },
                        prepare: p.prepare.as_ref().map(|ph| ShownPhase {
                            command: ph.command.iter().map(Template::source).collect(),
                            timeout: dur(ph.timeout),
                        }),
                        publish: p.publish.as_ref().map(|ph| ShownPhase {
                            command: ph.command.iter().map(Template::source).collect(),
                            timeout: dur(ph.timeout),
                        }),
                        limits: p.limits.any().then(|| p.limits.shown()),
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
                })
                .collect(),
        };
        toml::to_string(&shown).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }

    /// The `default` profile: prompts no route matches run on it.
    pub fn default_profile(&self) -> &Profile {
        // `profiles()` always inserts the default profile.
        &self.profiles[DEFAULT_PROFILE]
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
    /// worth a look, not an error.
    pub fn overlapping_routes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (j, later) in self.routes.iter().enumerate() {
            for (i, earlier) in self.routes[..j].iter().enumerate() {
                if earlier.pattern.overlaps(&later.pattern) {
                    out.push(format!(
                        "route #{} (match = {:?}) overlaps route #{} (match = {:?}): folders matching both go to route #{}",
                        j + 1,
                        later.pattern.source(),
                        i + 1,
                        earlier.pattern.source(),
                        i + 1
                    ));
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

/// First line of the config handed from the daemon to a monitor. The frame
/// says how long the text is, so a monitor started by a daemon that died
/// mid-handover can tell a cut-off config from a complete one (and an empty
/// config, meaning built-in defaults, from nothing at all).
const HANDOVER_MAGIC: &str = "jobwarden-config-v1";

/// Frame `text` for a monitor's stdin.
pub fn encode_handover(text: &str) -> Vec<u8> {
    format!("{HANDOVER_MAGIC} {}\n{text}", text.len()).into_bytes()
}

/// Unframe a monitor's stdin; an incomplete or foreign frame is an error.
pub fn decode_handover(bytes: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "config handover is not UTF-8".to_owned())?;
    let (header, body) = text
        .split_once('\n')
        .ok_or("config handover has no header (was the monitor started by hand?)")?;
    let len = header
        .strip_prefix(HANDOVER_MAGIC)
        .and_then(|n| n.trim().parse::<usize>().ok())
        .ok_or_else(|| format!("config handover header {header:?} is not jobwarden's"))?;
    if body.len() != len {
        return Err(format!(
            "config handover cut short: {} of {len} bytes",
            body.len()
        ));
    }
    Ok(body)
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
