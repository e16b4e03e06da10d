//! `jobwarden limit [--profile P | --project P] [N | --clear]` too: the
//! other standing order kept under `control/` (`jobwarden_model::limits`).
//!
//! `jobwarden pause [--profile P | --project P] [--reason R] [--json]` and
//! `jobwarden resume [--profile P | --project P | --all] [--json]`: write
//! or remove a pause marker under `control/` (`control.rs`). Both are
//! idempotent: pausing what is paused leaves the first marker (and says
//! so), resuming what is not paused says so; either exits 0. Neither
//! needs a running daemon: the marker is the state, read by the daemon
//! when it starts and within milliseconds while it runs.

use std::process::ExitCode;

use serde::Serialize;
use serde_json::json;

use crate::cli::{GlobalArgs, PauseArgs, PauseScopeArgs, ResumeArgs};
use jobwarden_ledger::JobFilter;
use jobwarden_model::config::Config;
use jobwarden_model::control::{self, Pause, Paused, Scope};
use jobwarden_model::events::Op;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;

use super::output::{fmt_ago, print_json, print_line};
use super::queue_view::daemon_alive;

pub fn pause(global: &GlobalArgs, args: &PauseArgs) -> anyhow::Result<ExitCode> {
    let loaded = super::load_lenient(global)?;
    super::say_config_problems(&loaded.problems);
    let (config, layout) = (loaded.config, loaded.layout);
    // A pause under a mistyped root would brake nothing, silently.
    super::root_must_exist(&layout)?;
    let scope = scope_of(&args.scope);
    // With the file broken its profiles are not known: a pause is a brake,
    // taken as asked.
    if loaded.problems.is_empty() {
        check_profile(&config, &scope)?;
    }
    let outcome = control::pause(&layout, &scope, args.reason.as_deref())?;
    let alive = daemon_alive(&layout, None);
    let (changed, pause) = match outcome {
        Paused::Now(p) => (true, p),
        Paused::Already(p) => (false, p),
    };
    if changed {
        note_queued(
            &layout,
            &config,
            &scope,
            Op::Paused,
            json!({"scope": what(&scope), "reason": args.reason}),
        );
    }
    if args.json {
        print_json(&PausedJson {
            scope: scope.kind(),
            name: scope.name(),
            changed,
            pause: &pause,
            daemon_running: alive,
        })?;
    } else if changed {
        let held = match scope {
            Scope::Daemon => "no new job starts",
            _ => "none of its jobs starts",
        };
        print_line(format_args!(
            "paused {}: {held} until `jobwarden resume{}`; prompts are still claimed and queued, running jobs go on",
            what(&scope),
            flag(&scope)
        ))?;
    } else {
        print_line(format_args!(
            "{} was already paused{}; that pause is left as it was",
            what(&scope),
            detail(&pause)
        ))?;
    }
    if !alive {
        note_no_daemon(&layout, "the pause holds from its start");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn resume(global: &GlobalArgs, args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_for_reading(global)?;
    super::root_must_exist(&layout)?;
    let scopes = if args.all {
        control::read(&layout)
            .list()
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    } else {
        vec![scope_of(&args.scope)]
    };
    let mut resumed = Vec::new();
    for scope in scopes {
        if let Some(was) = control::resume(&layout, &scope)? {
            note_queued(
                &layout,
                &config,
                &scope,
                Op::Resumed,
                json!({"scope": what(&scope)}),
            );
            resumed.push((scope, was));
        } else if !args.json && !args.all {
            print_line(format_args!("{} was not paused", what(&scope)))?;
        }
    }
    let still = control::read(&layout);
    if args.json {
        print_json(&ResumedJson {
            resumed: resumed.iter().map(|(s, p)| ScopeJson::of(s, p)).collect(),
            still_paused: still
                .list()
                .iter()
                .map(|(s, p)| ScopeJson::of(s, p))
                .collect(),
            daemon_running: daemon_alive(&layout, None),
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.all && resumed.is_empty() {
        print_line("nothing was paused")?;
    }
    for (scope, was) in &resumed {
        print_line(format_args!(
            "resumed {} (paused{})",
            what(scope),
            detail(was)
        ))?;
    }
    for (scope, pause) in still.list() {
        print_line(format_args!(
            "still paused: {}{}",
            what(&scope),
            detail(pause)
        ))?;
    }
    if !resumed.is_empty() && !daemon_alive(&layout, None) {
        note_no_daemon(&layout, "queued jobs start when it does");
    }
    Ok(ExitCode::SUCCESS)
}

/// Note a pause, or its end, in the events of each job queued in its
/// scope now (its inputs: see `events::INPUT_OPS`). Best effort, as
/// events are: without a ledger to list them, none is noted.
fn note_queued(layout: &Layout, config: &Config, scope: &Scope, op: Op, fields: serde_json::Value) {
    let Ok(Some(ledger)) = super::open_ledger(layout) else {
        return;
    };
    let filter = JobFilter {
        states: vec!["queued".into()],
        project: match scope {
            Scope::Project(p) => Some(p.clone()),
            _ => None,
        },
        ..JobFilter::default()
    };
    let Ok(queued) = ledger.list_jobs(&filter, NOTED_AT_MOST) else {
        return;
    };
    for job in queued {
        let Ok(id) = JobId::parse(&job.id) else {
            continue;
        };
        if let Scope::Profile(profile) = scope {
            let held = JobRecord::load_job(layout, &id).is_ok_and(|r| {
                r.profile
                    .as_deref()
                    .unwrap_or(jobwarden_model::config::DEFAULT_PROFILE)
                    == profile
            });
            if !held {
                continue;
            }
        }
        super::note_input(layout, config, &id, op, fields.clone());
    }
}

/// The most queued jobs a pause is noted in.
const NOTED_AT_MOST: usize = 10_000;

/// `jobwarden limit`: set, clear or list the limits set by hand.
pub fn limit(global: &GlobalArgs, args: &crate::cli::LimitArgs) -> anyhow::Result<ExitCode> {
    use jobwarden_model::limits;
    let loaded = super::load_lenient(global)?;
    super::say_config_problems(&loaded.problems);
    let (config, layout) = (loaded.config, loaded.layout);
    super::root_must_exist(&layout)?;
    let scope = scope_of(&args.scope);
    if let Some(n) = args.max_jobs {
        if loaded.problems.is_empty() {
            check_profile(&config, &scope)?;
        }
        limits::set(&layout, &scope, n)?;
        let was = match &scope {
            Scope::Daemon => format!("max_jobs {}", config.max_jobs),
            Scope::Profile(p) => config
                .profiles
                .get(p)
                .and_then(|p| p.max_jobs)
                .map_or("no limit of its own".to_owned(), |m| {
                    format!("max_jobs {m}")
                }),
            Scope::Project(_) => "no limit of its own".to_owned(),
        };
        print_line(format_args!(
            "{}: at most {n} at once, set by hand (the config says {was}); `jobwarden limit{} --clear` gives that back",
            what(&scope),
            flag(&scope)
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.clear {
        return match limits::clear(&layout, &scope)? {
            Some(l) => {
                print_line(format_args!(
                    "{}: the limit of {} set by hand is cleared; the config's applies",
                    what(&scope),
                    l.max_jobs
                ))?;
                Ok(ExitCode::SUCCESS)
            }
            None => Err(super::No(format!("{}: no limit was set by hand", what(&scope))).into()),
        };
    }
    let set = limits::read(&layout);
    if set.is_empty() {
        print_line(format_args!(
            "no limit set by hand: the config's max_jobs ({}) and its profiles' apply",
            config.max_jobs
        ))?;
    }
    for (scope, l) in set.list() {
        let by =
            l.by.as_deref()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default();
        print_line(format_args!(
            "{}: at most {} at once{by}",
            what(&scope),
            l.max_jobs
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn scope_of(args: &PauseScopeArgs) -> Scope {
    match (&args.profile, &args.project) {
        (Some(p), _) => Scope::Profile(p.clone()),
        (None, Some(p)) => Scope::Project(p.clone()),
        (None, None) => Scope::Daemon,
    }
}

/// A profile the configuration does not define pauses nothing: refused
/// (`--profile`), naming the defined ones.
fn check_profile(config: &Config, scope: &Scope) -> anyhow::Result<()> {
    match jobwarden_engine::pause::pauses_nothing(config, scope) {
        Some(why) => anyhow::bail!("--{why}"),
        None => Ok(()),
    }
}

/// `the daemon`, `profile review`, `project acme/api`.
fn what(scope: &Scope) -> String {
    match scope {
        Scope::Daemon => "the daemon".into(),
        other => other.to_string(),
    }
}

/// The flag that names `scope` again, for `resume` and `limit --clear`.
fn flag(scope: &Scope) -> String {
    let quoted = |v: &str| {
        if v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        {
            v.to_owned()
        } else {
            format!("'{}'", v.replace('\'', "'\\''"))
        }
    };
    match scope {
        Scope::Daemon => String::new(),
        Scope::Profile(p) => format!(" --profile {}", quoted(p)),
        Scope::Project(p) => format!(" --project {}", quoted(p)),
    }
}

/// ` 3m ago by alice (uid 1000): release freeze`, what is known of it.
fn detail(pause: &Pause) -> String {
    let mut out = String::new();
    if let Some(at) = pause.paused_at {
        out.push_str(&format!(
            " {}",
            fmt_ago(at.epoch_ms(), Timestamp::now().epoch_ms())
        ));
    }
    if let Some(by) = &pause.by {
        out.push_str(&format!(" by {by}"));
    }
    if let Some(reason) = &pause.reason {
        out.push_str(&format!(": {reason}"));
    }
    out
}

fn note_no_daemon(layout: &Layout, what: &str) {
    jobwarden_sys::logging::line(format_args!(
        "jobwarden: no daemon is running on {}; {what}",
        layout.root().display()
    ));
}

#[derive(Serialize)]
struct PausedJson<'a> {
    scope: &'static str,
    name: Option<&'a str>,
    /// This call wrote the marker (false: it was already paused).
    changed: bool,
    #[serde(flatten)]
    pause: &'a Pause,
    daemon_running: bool,
}

#[derive(Serialize)]
struct ResumedJson<'a> {
    resumed: Vec<ScopeJson<'a>>,
    still_paused: Vec<ScopeJson<'a>>,
    daemon_running: bool,
}

#[derive(Serialize)]
struct ScopeJson<'a> {
    scope: &'static str,
    name: Option<&'a str>,
    #[serde(flatten)]
    pause: &'a Pause,
}

impl<'a> ScopeJson<'a> {
    fn of(scope: &'a Scope, pause: &'a Pause) -> Self {
        ScopeJson {
            scope: scope.kind(),
            name: scope.name(),
            pause,
        }
    }
}
