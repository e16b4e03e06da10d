//! `[profiles.*]` validated into [`Profile`]s. Every profile inherits each
//! key it does not set from `default` (as validated, so a fault of
//! `default` is reported once, under `default`'s key); `default` itself
//! falls back to the built-in demo. Placeholders that only routes can
//! provide are checked against the routes, in `route.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::rate_limit::Patterns;
use super::raw::{RawGit, RawPhase, RawProfile, RawRateLimit};
use super::template::Template;
use super::validate::Validator;
use super::{DEFAULT_PROFILE, DEMO_COMMAND, GitTemplates, Phase, Profile, PromptVia, RateLimit};

const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);

/// The most of each stream a profile's `keep_output` may keep: the
/// ledger holds it in one row, and the monitor in memory while the job
/// runs (up to twice this, between trims).
pub const KEEP_OUTPUT_MAX: u64 = 64 << 20;

/// Every profile, `default` always among them.
pub(super) fn build(
    v: &mut Validator,
    raw: &BTreeMap<String, RawProfile>,
) -> BTreeMap<String, Profile> {
    let default = match raw.get(DEFAULT_PROFILE) {
        Some(p) => profile(v, DEFAULT_PROFILE, p, None),
        None => profile(v, DEFAULT_PROFILE, &RawProfile::default(), None),
    };
    let mut out = BTreeMap::new();
    for (name, p) in raw.iter().filter(|(n, _)| n.as_str() != DEFAULT_PROFILE) {
        if let Err(e) = crate::layout::validate_segment(name) {
            v.fault(
                &format!("profiles.{name}"),
                format!("profile name {name:?} {e}"),
            );
        }
        out.insert(name.clone(), profile(v, name, p, Some(&default)));
    }
    out.insert(DEFAULT_PROFILE.to_owned(), default);
    out
}

fn profile(v: &mut Validator, name: &str, p: &RawProfile, base: Option<&Profile>) -> Profile {
    let key = |k: &str| format!("profiles.{name}.{k}");
    let command = v
        .argv(
            &key("command"),
            p.command.clone(),
            "[\"codex\", \"exec\", \"-\"]",
        )
        .or_else(|| base.map(|b| b.command.clone()))
        .unwrap_or_else(demo_command);
    let workdir = workdir(v, &key("workdir"), p)
        .or_else(|| base.map(|b| b.workdir.clone()))
        .unwrap_or_else(job_workdir);
    let prompt_via = v
        .choice(
            &key("prompt_via"),
            p.prompt_via.clone(),
            &[
                ("stdin", PromptVia::Stdin),
                ("arg", PromptVia::Arg),
                ("file", PromptVia::File),
            ],
            "\"stdin\", \"arg\" or \"file\"",
        )
        .or(base.map(|b| b.prompt_via))
        .unwrap_or(PromptVia::Stdin);
    let phase = |v: &mut Validator, which: &str, raw: &Option<RawPhase>, inherited| match raw {
        Some(raw) => self::phase(v, &key(which), raw),
        None => inherited,
    };
    let prepare = phase(
        v,
        "prepare",
        &p.prepare,
        base.and_then(|b| b.prepare.clone()),
    );
    let publish = phase(
        v,
        "publish",
        &p.publish,
        base.and_then(|b| b.publish.clone()),
    );
    let rate_limit = match &p.rate_limit {
        Some(raw) => rate_limit(v, &key("rate_limit"), raw),
        None => match base {
            Some(b) => b.rate_limit.clone(),
            None => rate_limit(v, &key("rate_limit"), &RawRateLimit::default()),
        },
    };
    let git = match &p.git {
        Some(raw) => git(v, &key("git"), raw),
        None => base.and_then(|b| b.git.clone()),
    };
    let executor = super::slurm::executor(v, &key, p, base.map(|b| &b.executor));
    let limits = match &p.limits {
        Some(raw) => v.limits(&key("limits"), raw),
        None => base.map(|b| b.limits).unwrap_or_default(),
    };
    let profile = Profile {
        name: name.to_owned(),
        command,
        prompt_via,
        workdir,
        timeout: v
            .dur(&key("timeout"), p.timeout.clone(), true)
            .or(base.map(|b| b.timeout))
            .unwrap_or(2 * HOUR),
        env: v
            .env(&key("env"), p.env.clone())
            .or_else(|| base.map(|b| b.env.clone()))
            .unwrap_or_default(),
        env_passthrough: v
            .env_names(&key("env_passthrough"), p.env_passthrough.clone())
            .or_else(|| base.map(|b| b.env_passthrough.clone()))
            .unwrap_or_default(),
        max_attempts: v
            .num(&key("max_attempts"), p.max_attempts.clone(), 1, 100)
            .map(|n| n as u32)
            .or(base.map(|b| b.max_attempts))
            .unwrap_or(1),
        cooldown: v
            .dur(&key("cooldown"), p.cooldown.clone(), false)
            .or(base.map(|b| b.cooldown))
            .unwrap_or(2 * HOUR),
        rate_limit,
        keep_output: v
            .bytes(&key("keep_output"), p.keep_output.clone(), KEEP_OUTPUT_MAX)
            .or(base.and_then(|b| b.keep_output)),
        prepare,
        publish,
        limits,
        max_jobs: v
            .num(&key("max_jobs"), p.max_jobs.clone(), 1, 4096)
            .map(|n| n as usize)
            .or(base.and_then(|b| b.max_jobs)),
        shared_workdir: v
            .take(
                &key("shared_workdir"),
                p.shared_workdir.clone(),
                "true or false",
            )
            .or(base.map(|b| b.shared_workdir))
            .unwrap_or(false),
        windows: windows(v, &key("window"), p.window.clone())
            .or_else(|| base.map(|b| b.windows.clone()))
            .unwrap_or_default(),
        sandbox: v
            .take(&key("sandbox"), p.sandbox.clone(), "true or false")
            .or(base.map(|b| b.sandbox))
            .unwrap_or(true),
        git,
        executor,
    };
    super::slurm::check_env(v, &key, &profile);
    profile
}

/// A `window` (`key` names it): one or a list of `HH:MM-HH:MM`, local
/// time; `None` when absent or faulty (the fault noted).
fn windows(
    v: &mut Validator,
    key: &str,
    raw: Option<super::raw::Loose<super::raw::RawWindows>>,
) -> Option<Vec<jobwarden_sys::clock::Window>> {
    use super::raw::RawWindows;
    let texts = match v.take(key, raw, "a window \"22:00-06:00\" or a list of them")? {
        RawWindows::One(w) => vec![w],
        RawWindows::Many(ws) => ws,
    };
    if texts.is_empty() {
        v.fault(
            key,
            format!("{key} = []: name at least one window, or leave the key out"),
        );
        return None;
    }
    let mut out = Vec::new();
    for text in texts {
        match text.parse() {
            Ok(w) => out.push(w),
            Err(why) => {
                v.fault(key, format!("{key}: {why}"));
                return None;
            }
        }
    }
    Some(out)
}

/// A `git` table (`key` names it).
fn git(v: &mut Validator, key: &str, raw: &RawGit) -> Option<GitTemplates> {
    let mut template = |name: &str, value: &Option<super::raw::Loose<String>>, required: bool| {
        let k = format!("{key}.{name}");
        if value.is_none() && required {
            v.fault(
                &k,
                format!("{k}: missing; e.g. repo = \"/srv/repos/app\", branch = \"jobwarden/{{job_id}}\""),
            );
        }
        let text = v.take(&k, value.clone(), "a string")?;
        v.template(&k, &text)
    };
    let repo = template("repo", &raw.repo, true);
    let branch = template("branch", &raw.branch, true);
    let target = match &raw.target {
        Some(_) => template("target", &raw.target, false),
        None => Some(constant("main")),
    };
    let worktree = template("worktree", &raw.worktree, false);
    // A name without placeholders is checked now, not at each job's start.
    for (name, t) in [("branch", &branch), ("target", &target)] {
        if let Some(t) = t.as_ref().filter(|t| t.names().next().is_none()) {
            let k = format!("{key}.{name}");
            if let Err(e) = jobwarden_sys::git::check_ref(&k, &t.render(&Default::default())) {
                v.fault(&k, e);
            }
        }
    }
    if let Some(r) = repo.as_ref().filter(|t| t.names().next().is_none())
        && !std::path::Path::new(r.source()).is_absolute()
    {
        let k = format!("{key}.repo");
        v.fault(
            &k,
            format!(
                "{k} {:?} is not an absolute path; name the repository's folder from /",
                r.source()
            ),
        );
    }
    let fetch_key = format!("{key}.fetch");
    let fetch = v.take(
        &fetch_key,
        raw.fetch.clone(),
        "a remote's name, like \"origin\"",
    );
    if let Some(remote) = &fetch
        && let Err(e) = jobwarden_sys::git::check_ref(&fetch_key, remote)
    {
        v.fault(&fetch_key, e);
    }
    Some(GitTemplates {
        repo: repo?,
        branch: branch?,
        target: target?,
        worktree,
        fetch,
    })
}

fn demo_command() -> Vec<Template> {
    DEMO_COMMAND.iter().map(|a| constant(a)).collect()
}

/// The default workdir: a fresh folder in the job's run folder.
fn job_workdir() -> Template {
    constant("{job_workdir}")
}

/// A template written in this file (parsed at every use; a test parses
/// each of them).
fn constant(text: &str) -> Template {
    Template::parse_open(text).expect("a built-in template parses")
}

/// A profile's own `workdir`, if it sets a valid one.
fn workdir(v: &mut Validator, key: &str, p: &RawProfile) -> Option<Template> {
    let text = v.take(key, p.workdir.clone(), "a string")?;
    let workdir = v.template(key, &text)?;
    if workdir.uses("workdir") {
        v.fault(
            key,
            format!("{key}: {text:?} cannot use {{workdir}} itself"),
        );
        return None;
    }
    Some(workdir)
}

/// A `prepare` or `publish` table (`key` names it).
fn phase(v: &mut Validator, key: &str, raw: &RawPhase) -> Option<Phase> {
    let command_key = format!("{key}.command");
    if raw.command.is_none() {
        v.fault(
            &command_key,
            format!("{command_key}: missing; name the program to run, e.g. [\"/usr/local/lib/jobwarden/worktree-prepare\", ...]"),
        );
    }
    let command = v.argv(
        &command_key,
        raw.command.clone(),
        "[\"/usr/local/lib/jobwarden/worktree-prepare\", ...]",
    );
    let timeout = v.duration(
        &format!("{key}.timeout"),
        raw.timeout.clone(),
        10 * MINUTE,
        true,
    );
    Some(Phase {
        command: command?,
        timeout,
    })
}

fn rate_limit(v: &mut Validator, key: &str, raw: &RawRateLimit) -> RateLimit {
    let exit_codes = v.take(
        &format!("{key}.exit_codes"),
        raw.exit_codes.clone(),
        "a list of exit codes, like [75]",
    );
    let patterns_key = format!("{key}.patterns");
    let texts = v.take(
        &patterns_key,
        raw.patterns.clone(),
        "a list of regular expressions in quotes",
    );
    // Without `patterns`, the built-in ones (`config/rate_limit.rs`),
    // which their tests check.
    let patterns = match texts {
        None => Patterns::new(super::rate_limit::default_patterns()),
        Some(texts) => {
            for p in &texts {
                if let Err(e) = Patterns::check(p) {
                    v.fault(
                        &patterns_key,
                        format!("{patterns_key}: {p:?} is not a valid regex: {e}"),
                    );
                }
            }
            Patterns::new(texts)
        }
    };
    RateLimit {
        exit_codes: exit_codes.unwrap_or_default(),
        patterns,
        cooldown: v.duration(
            &format!("{key}.cooldown"),
            raw.cooldown.clone(),
            15 * MINUTE,
            false,
        ),
    }
}
