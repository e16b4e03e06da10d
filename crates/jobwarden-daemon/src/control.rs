//! Reloading the configuration of a running daemon. SIGHUP (`systemctl
//! reload`, `jobwarden reload`) is turned into a request at the CLI edge
//! (`commands/daemon.rs`); the daemon's loop serves it here: the config is
//! resolved and read again exactly as at start, validated whole, and either
//! swapped in for everything not yet started or refused with every error
//! while the old one stays in force. The result is logged, told to the
//! service manager (`RELOADING=1` … `READY=1`) and recorded in
//! `daemon.json` (`config`), where `jobwarden reload` and `status` read it.
//!
//! A new config takes effect at once for what the daemon decides from now
//! on: slots (`max_jobs`), claims (profiles, routes, prompt size, `settle`),
//! cooldowns (deferred prompts are looked at again), retention, intervals,
//! the shutdown policy. Monitors receive the config when they start, so
//! queued jobs start on the new profiles and running jobs are untouched.
//! Two things need a restart and keep their value until then, as the result
//! says: the root (it is the daemon's whole state) and `watch` (the watcher
//! is set up once, at start).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;

use super::Daemon;
use super::state_file::Phase;
use jobwarden_model::config::{self, Choices, Config, ConfigSource, Env};
use jobwarden_model::job::JobRecord;
use jobwarden_sys::clock::Timestamp;

/// What a reload needs from the daemon's start: how its config was chosen
/// (to resolve it again the same way) and the requests that ask for one.
pub struct Reloads {
    pub chosen: Choices,
    pub env: Env,
    /// One message per SIGHUP.
    pub requests: UnboundedReceiver<()>,
}

pub use jobwarden_engine::daemon_file::{ConfigState, ReloadResult, Verdict};
pub use jobwarden_model::config::digest;

/// The daemon's side of reloads: where requests come from and what
/// `daemon.json` says of the config.
pub(super) struct Control {
    reloads: Option<Reloads>,
    pub(super) state: ConfigState,
}

impl Control {
    /// The state of the config the daemon started with; no reloads asked
    /// for until [`Control::listen`].
    pub(super) fn new(config: &Config) -> Self {
        Control {
            reloads: None,
            state: ConfigState {
                source: source_path(config),
                digest: digest(config.text.as_bytes()),
                loaded_at: Timestamp::now(),
                generation: 0,
                last_reload: None,
            },
        }
    }

    pub(super) fn listen(&mut self, reloads: Reloads) {
        self.reloads = Some(reloads);
    }

    /// The next reload request; never, without [`Control::listen`] or once
    /// nobody can send one.
    pub(super) async fn next_request(&mut self) {
        match self.reloads.as_mut() {
            Some(r) => match r.requests.recv().await {
                Some(()) => {}
                None => {
                    self.reloads = None;
                    std::future::pending::<()>().await
                }
            },
            None => std::future::pending::<()>().await,
        }
    }

    /// For the service manager's status line, while the last reload was
    /// refused.
    pub(super) fn status_note(&self) -> Option<&'static str> {
        let last = self.state.last_reload.as_ref()?;
        (last.result == Verdict::Refused)
            .then_some("config reload refused, previous config in force")
    }

    /// The config chosen now, as at start, validated whole.
    fn read(&self, in_force: &Config) -> Read {
        let failed = |source, error: String| Read {
            source,
            digest: None,
            config: Err(vec![error]),
        };
        let Some(r) = self.reloads.as_ref() else {
            return failed(None, "no way to resolve the config again".into());
        };
        let path = match config::config_path(&r.chosen, &r.env) {
            Ok(path) => path,
            Err(e) => return failed(None, e.to_string()),
        };
        let (source, text) = match (path, &in_force.source) {
            (Some(path), _) => match config::read_file(&path) {
                Ok(text) => (ConfigSource::File(path), text),
                Err(e) => return failed(Some(path), e.to_string()),
            },
            // Running on a file: a reload never falls back to the demo
            // defaults because that file went missing.
            (None, ConfigSource::File(was)) => {
                let error = format!(
                    "config {}: the file in force is gone and no other config file was found; \
                     restore it, or restart the daemon to run on built-in defaults",
                    was.display()
                );
                return failed(None, error);
            }
            (None, _) => (ConfigSource::BuiltIn, String::new()),
        };
        Read {
            source: match &source {
                ConfigSource::File(p) => Some(std::path::absolute(p).unwrap_or_else(|_| p.clone())),
                _ => None,
            },
            digest: Some(digest(text.as_bytes())),
            config: config::parse(&text, source)
                .and_then(|mut c| config::apply_env(&mut c, &r.env).map(|()| c))
                .map_err(|e| e.messages()),
        }
    }
}

/// A config read again for a reload.
struct Read {
    source: Option<PathBuf>,
    digest: Option<String>,
    config: Result<Config, Vec<String>>,
}

/// The config's file, absolute (`status` and `reload` may run elsewhere).
fn source_path(config: &Config) -> Option<PathBuf> {
    match &config.source {
        ConfigSource::File(p) => Some(std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        ConfigSource::BuiltIn | ConfigSource::Inherited => None,
    }
}

impl Daemon {
    /// Re-arm the loop's intervals whose period is no longer what the
    /// config in force (or the watch) asks for.
    /// (Events lost — watch limit, queue overflow — make rescans carry
    /// the load: their period is then as without a watcher.)
    pub(super) fn follow_intervals<const N: usize>(
        &self,
        intervals: [(&mut tokio::time::Interval, std::time::Duration); N],
    ) {
        for (interval, period) in intervals {
            if interval.period() != period {
                *interval = super::interval_after(period);
            }
        }
    }

    /// Serve a reload request (see the module's documentation).
    pub(super) fn reload(&mut self) {
        self.notifier.reloading();
        let generation = self.control.state.generation + 1;
        let at = Timestamp::now();
        let read = self.control.read(&self.config);
        let (source, digest) = (read.source, read.digest);
        let result = match read.config {
            Ok(new) => self.apply(new, generation, at),
            Err(errors) => {
                tracing::error!(
                    reload = generation,
                    "config reload refused, the previous config stays in force: {}",
                    errors.join("; ")
                );
                ReloadResult {
                    generation,
                    at,
                    result: Verdict::Refused,
                    source,
                    digest,
                    changes: Vec::new(),
                    restart_needed: Vec::new(),
                    warnings: Vec::new(),
                    errors,
                }
            }
        };
        self.control.state.generation = generation;
        self.control.state.last_reload = Some(result);
        self.dispatch();
        self.write_state(Phase::Running);
        let status = self.status_line();
        self.notifier.ready(&status);
    }

    /// Put `new` in force, but for what needs a restart; log and say what
    /// changed.
    fn apply(&mut self, mut new: Config, generation: u64, at: Timestamp) -> ReloadResult {
        let mut restart_needed = Vec::new();
        if let Some(r) = self.control.reloads.as_ref() {
            match config::resolve_root(&r.chosen, &r.env, &new) {
                Ok(root) if root == self.layout.root() => {}
                Ok(root) => restart_needed.push(format!(
                    "root: {} → {} (the daemon stays on {} until restarted)",
                    self.layout.root().display(),
                    root.display(),
                    self.layout.root().display()
                )),
                Err(e) => restart_needed.push(format!("root: {e}")),
            }
        }
        if new.watch != self.config.watch {
            let name = |w: config::WatchMode| format!("{w:?}").to_lowercase();
            restart_needed.push(format!(
                "watch: {} → {} (stays {} until restarted)",
                name(self.config.watch),
                name(new.watch),
                name(self.config.watch)
            ));
            new.watch = self.config.watch;
        }
        let mut changes = config::changes(&self.config, &new);
        if restart_needed.iter().any(|r| r.starts_with("root:")) {
            changes.retain(|c| !c.starts_with("root:"));
        }
        let warnings = self.queued_left_behind(&new);
        let source = source_path(&new);
        self.control.state.source = source.clone();
        self.control.state.digest = digest(new.text.as_bytes());
        let read = Some(self.control.state.digest.clone());
        self.control.state.loaded_at = at;
        self.config = Arc::new(new);
        self.hooks
            .set_hooks(self.config.notify.clone(), self.config.events);
        // Monitors hold the old config: retire them (busy ones at the end
        // of their job) for ones that have this.
        self.monitors.retire_idle(true);
        self.ready_spare();
        self.reschedule_all();
        log_applied(generation, &changes, &restart_needed, &warnings);
        self.reconsider_deferred();
        ReloadResult {
            generation,
            at,
            result: Verdict::Applied,
            source,
            digest: read,
            changes,
            restart_needed,
            warnings,
            errors: Vec::new(),
        }
    }

    /// Cooldowns come from the profiles: prompts waiting for one are
    /// looked at again, so that a shorter cooldown frees them now.
    fn reconsider_deferred(&mut self) {
        let waiting: Vec<PathBuf> = self.deferred.values().map(|(_, p)| p.clone()).collect();
        for path in waiting {
            self.consider(&path);
        }
    }

    /// Queued jobs name their profile and route (their record says how
    /// they run): those whose profile or route `new` no longer has.
    /// Reads the records of queued jobs only when something was removed.
    fn queued_left_behind(&self, new: &Config) -> Vec<String> {
        let profile_gone = self
            .config
            .profiles
            .keys()
            .any(|p| !new.profiles.contains_key(p));
        let route_gone = self.config.routes.iter().any(|r| {
            !new.routes
                .iter()
                .any(|n| n.pattern.source() == r.pattern.source())
        });
        if !profile_gone && !route_gone {
            return Vec::new();
        }
        let mut profiles: BTreeMap<String, usize> = BTreeMap::new();
        let mut routes: BTreeMap<String, usize> = BTreeMap::new();
        for id in self.sched.queue.ids() {
            let Ok(rec) = JobRecord::load_job(&self.layout, id) else {
                continue;
            };
            if new.profile_of(&rec).is_err() {
                let name = rec.profile.clone().unwrap_or_default();
                *profiles.entry(name).or_default() += 1;
            }
            if let Some(route) = rec.route.as_ref().filter(|_| new.route_of(&rec).is_none()) {
                *routes.entry(route.clone()).or_default() += 1;
            }
        }
        let jobs = |n: usize, one: &str, many: &str| match n {
            1 => format!("1 queued job {one}"),
            n => format!("{n} queued jobs {many}"),
        };
        let mut out: Vec<String> = profiles
            .into_iter()
            .map(|(p, n)| {
                format!(
                    "profile {p:?} was removed but {} it; such jobs end setup_failed at start \
                     (restore the profile, or `jobwarden retry` them once they ended)",
                    jobs(n, "uses", "use")
                )
            })
            .collect();
        out.extend(routes.into_iter().map(|(r, n)| {
            format!(
                "route {r:?} was removed but {} claimed through it; such jobs run \
                 without that route's workdir and env",
                jobs(n, "was", "were")
            )
        }));
        out
    }
}

fn log_applied(
    generation: u64,
    changes: &[String],
    restart_needed: &[String],
    warnings: &[String],
) {
    if changes.is_empty() {
        tracing::info!(reload = generation, "config reloaded: no change");
    } else {
        tracing::info!(
            reload = generation,
            "config reloaded: {}",
            changes.join("; ")
        );
    }
    if !restart_needed.is_empty() {
        tracing::warn!(
            reload = generation,
            "config reload: a restart is needed for {}",
            restart_needed.join("; ")
        );
    }
    for warning in warnings {
        tracing::warn!(reload = generation, "config reload: {warning}");
    }
}
