//! `jobwarden route <path> [--json]`: what a prompt dropped at `path` would
//! get — the route that matches (or none), the profile, the captures, the
//! workdir and the final argv of each stage — computed exactly as the claim
//! and the monitor compute them, with an example job id. Nothing runs and
//! nothing is written. A file name the daemon would ignore (`notes.md`: not
//! `*.prompt.md`) is said to be one, with the name it would need (exit 2).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;

use crate::cli::{GlobalArgs, RouteArgs};
use jobwarden_model::config::{PromptVia, Template};
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::{self, InboxEntry};
use jobwarden_model::placeholders;

use super::output::print_json;
use std::io::Write;

/// The id shown in place of the one a real claim would mint.
const EXAMPLE_ID: &str = "JOB_ID";

pub fn run(global: &GlobalArgs, args: &RouteArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    super::root_must_exist(&layout)?;
    let inbox = layout.inbox();
    let given = Path::new(&args.path);
    let path = if given.is_absolute() {
        given.to_path_buf()
    } else {
        inbox.join(given)
    };
    if let Some(why) = ignored_name(&path) {
        anyhow::bail!("{why}");
    }
    let path = if path.to_string_lossy().ends_with(layout::PROMPT_SUFFIX) {
        path
    } else {
        path.join(format!("prompt{}", layout::PROMPT_SUFFIX))
    };
    let prompt = match layout::classify_inbox_path(&inbox, &path) {
        InboxEntry::Prompt(p) => p,
        // Claimed and rejected, like a prompt no profile can run.
        InboxEntry::InvalidName { display, reason } => {
            return rejected(display, reason, args.json);
        }
        InboxEntry::Ignored => anyhow::bail!(
            "{:?} is not a prompt path under {}: give it relative to inbox/ (like acme/api/main/fix.prompt.md); dotfiles are ignored",
            args.path,
            inbox.display()
        ),
    };
    let sel = match config.select(&prompt.project, None) {
        Ok(sel) => sel,
        Err(reason) => return rejected(prompt.to_string(), reason, args.json),
    };
    let id = JobId::parse(EXAMPLE_ID).map_err(anyhow::Error::msg)?;
    let mut rec = JobRecord::new_queued(id, &prompt, String::new(), "");
    rec.profile = Some(sel.profile.name.clone());
    rec.route = sel.route.map(|(_, r)| r.pattern.source().to_owned());
    rec.captures = sel.captures.clone();
    let job = placeholders::Job {
        layout: &layout,
        profile: sel.profile,
        route: sel.route.map(|(_, r)| r),
        rec: &rec,
    };
    let (vars, workdir) = placeholders::vars(&job);
    let render = |ts: &[Template]| ts.iter().map(|t| t.render(&vars)).collect::<Vec<_>>();
    let p = sel.profile;
    let mut stages = Vec::new();
    if let Some(ph) = &p.prepare {
        stages.push(Stage::new("prepare", render(&ph.command), ph.timeout));
    }
    let mut main = render(&p.command);
    match p.prompt_via {
        PromptVia::Arg => main.push("<the prompt's text>".into()),
        PromptVia::File if !p.command.iter().any(|t| t.uses("prompt_file")) => {
            main.push(vars["prompt_file"].clone());
        }
        _ => {}
    }
    stages.push(Stage::new("run", main, p.timeout));
    if let Some(ph) = &p.publish {
        stages.push(Stage::new("publish", render(&ph.command), ph.timeout));
    }
    let shown = Shown {
        prompt: prompt.to_string(),
        route: sel.route.map(|(i, r)| RouteView {
            number: i + 1,
            pattern: r.pattern.source().to_owned(),
        }),
        profile: Some(p.name.clone()),
        captures: sel.captures,
        workdir: Some(workdir.display().to_string()),
        stages,
        rejected: None,
    };
    show(&shown, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// Extensions of a file that is not a prompt (a path without one names
/// a folder: a prompt in it).
const FILE_EXTENSIONS: [&str; 5] = ["md", "markdown", "txt", "tmp", "prompt"];

/// Why the daemon would ignore a file at `path` (one named as a file, or
/// one there, that is not `*.prompt.md`), and the name it would need;
/// `None` for a prompt's name or a folder.
fn ignored_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_string_lossy();
    if name.ends_with(layout::PROMPT_SUFFIX) {
        return None;
    }
    let ext = path.extension().map(|e| e.to_string_lossy().to_lowercase());
    // An editor's or a tool's copy of a prompt (`x.prompt.md~`,
    // `x.prompt.md.swp`) is a file too, never a folder of prompts.
    let copy_of = name
        .find(layout::PROMPT_SUFFIX)
        .map(|at| name[..at].to_owned());
    let file_like = ext.is_some_and(|e| FILE_EXTENSIONS.contains(&e.as_str()))
        || copy_of.is_some()
        || path.symlink_metadata().is_ok_and(|m| !m.is_dir());
    if !file_like {
        return None;
    }
    let stem = match (name.strip_suffix(layout::RUNNING_SUFFIX), copy_of) {
        (Some(stem), _) => stem.to_owned(),
        (None, Some(stem)) => stem,
        (None, None) => path
            .file_stem()
            .map_or_else(|| name.to_string(), |s| s.to_string_lossy().into_owned()),
    };
    let what = if name.ends_with(layout::RUNNING_SUFFIX) {
        "is the name of a prompt already claimed (its job runs)"
    } else {
        "is not a prompt name"
    };
    Some(format!(
        "{name:?} {what}: the daemon ignores every file not named *{suffix}, so a file of that name would never run; \
         name it {stem}{suffix} (`jobwarden route` of that name says what it would get)",
        suffix = layout::PROMPT_SUFFIX,
    ))
}

/// A prompt that would be rejected, and why: exit 1, a clean "no".
fn rejected(prompt: String, reason: String, json: bool) -> anyhow::Result<ExitCode> {
    let shown = Shown {
        prompt,
        route: None,
        profile: None,
        captures: BTreeMap::new(),
        workdir: None,
        stages: Vec::new(),
        rejected: Some(reason),
    };
    show(&shown, json)?;
    Ok(ExitCode::from(super::EXIT_NO))
}

/// `route --json` (docs/cli-json.md).
#[derive(Serialize)]
struct Shown {
    /// `project/name`.
    prompt: String,
    /// The matching route (1-based, as `config check` numbers them), or
    /// null when none matches and `default` applies.
    route: Option<RouteView>,
    profile: Option<String>,
    captures: BTreeMap<String, String>,
    workdir: Option<String>,
    /// In the order they run; `job_id` shows as `JOB_ID`.
    stages: Vec<Stage>,
    /// Why such a prompt would be rejected, if it would.
    rejected: Option<String>,
}

#[derive(Serialize)]
struct RouteView {
    number: usize,
    pattern: String,
}

#[derive(Serialize)]
struct Stage {
    stage: &'static str,
    argv: Vec<String>,
    timeout: String,
}

impl Stage {
    fn new(stage: &'static str, argv: Vec<String>, timeout: std::time::Duration) -> Self {
        Stage {
            stage,
            argv,
            timeout: humantime::format_duration(timeout).to_string(),
        }
    }
}

fn show(s: &Shown, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(s);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "prompt    {}", s.prompt)?;
    if let Some(reason) = &s.rejected {
        writeln!(out, "rejected  {reason}")?;
        return Ok(());
    }
    match &s.route {
        Some(r) => writeln!(out, "route     #{} (match = {:?})", r.number, r.pattern)?,
        None => writeln!(out, "route     none matches: the default profile applies")?,
    }
    let profile = s.profile.as_deref().unwrap_or("default");
    writeln!(out, "profile   {profile}")?;
    for (k, v) in &s.captures {
        writeln!(out, "capture   {{{k}}} = {v}")?;
    }
    if let Some(w) = &s.workdir {
        writeln!(out, "workdir   {w}")?;
    }
    for st in &s.stages {
        let argv = st
            .argv
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ");
        writeln!(out, "{:<9} {argv}  (timeout {})", st.stage, st.timeout)?;
    }
    Ok(())
}

/// An argument as a shell would need it, for reading (argv is never run
/// through a shell).
fn shell_quote(a: &str) -> String {
    let plain = !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:{}@%+,".contains(c));
    if plain {
        a.to_owned()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}
