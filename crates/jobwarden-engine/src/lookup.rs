//! The CLI's `<job>` argument: which job does the operator mean?
//!
//! In this order:
//! 1. Anything with a NUL, a leading `/`, a `..` or `.` segment, or another
//!    unsafe character is refused before it becomes a path.
//! 2. `project/name` (it has a `/`): that prompt's live job (the newest
//!    one, if several have not ended), else its newest job: a newer job
//!    that already ended (a cancelled duplicate) never hides one that
//!    runs.
//! 3. A full job id whose run folder exists.
//! 4. A unique prefix of at least 4 characters of the id, else of its short
//!    form ([`jobwarden_ledger::short_id`]: a generated id's last 8
//!    characters, because a UUIDv7's head is its timestamp, shared by every
//!    job of the same minute; a retry's first attempt's and `-r2`; another
//!    id whole). Several matches: the one whose id or short id is the
//!    argument itself, else ambiguous, and the candidates are listed.
//! 5. `name`: the job (live, else newest, as in 2) of the prompt of that
//!    name at the top of the inbox; else, when prompts of that name are in
//!    other folders, that of the one that is (several: ambiguous, each listed). A
//!    name may hold any letter; only what could never name a prompt is
//!    refused.
//!
//! Matching reads the job index; if the index knows nothing (stale, or
//! rebuilt after a restore), the run folders' names are searched instead.
//!
//! [`resolve_execution`] (`lookup/execution.rs`) answers the same question
//! for `history show`, whose rows outlive run folders and include runs
//! recorded by hand: it searches the ledger's executions as well as the
//! job index.
//!
//! Commands that also act on what has no job yet (`show`, `logs`,
//! `events`, `abort`) use [`resolve_target`]: a prompt name may then mean
//! a prompt waiting in the inbox. `project/name` (or `name`) means the
//! prompt's job while one is live, else the prompt waiting in the inbox
//! (a new drop, or one put back for another attempt, maybe deferred), else
//! its newest job; `project/name.prompt.md` means the waiting file only.
//! A bare name that names nothing at the top of the inbox may name a
//! prompt in any folder (waiting there, or with jobs), if only one folder
//! has a prompt of that name.

mod execution;

pub use execution::resolve_execution;

use jobwarden_ledger::{Execution, IndexedJob, Ledger, LedgerError, short_id};
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::{self, Layout, PROMPT_SUFFIX, PromptName};

/// The shortest id (or short id) prefix accepted.
pub const MIN_PREFIX: usize = 4;

/// How many candidates an ambiguity lists.
const MAX_CANDIDATES: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// Not something that can name a job (a usage error).
    #[error("{0}")]
    Invalid(String),
    /// Well-formed, but no such job (a clean "no").
    #[error("{0}")]
    NotFound(String),
    #[error(
        "{arg:?} matches {} jobs{}; {}:\n{}",
        if candidates.len() > MAX_CANDIDATES { "more than 10".to_owned() } else { candidates.len().to_string() },
        if candidates.len() > MAX_CANDIDATES { " (the first 10)" } else { "" },
        if arg.len() >= MIN_PREFIX && JobId::parse(arg).is_ok() { "give more characters of the id, or one of these" } else { "name one of these" },
        candidates.iter().take(MAX_CANDIDATES).map(|c| format!("  {}  {}  {}", c.id, c.prompt, c.state)).collect::<Vec<_>>().join("\n")
    )]
    Ambiguous {
        arg: String,
        candidates: Vec<Candidate>,
    },
    /// A bare name that prompts of several folders have.
    #[error(
        "{arg:?} names {} prompts; give one as project/name:\n{}",
        prompts.len(),
        prompts.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n")
    )]
    AmbiguousPrompt {
        arg: String,
        prompts: Vec<PromptName>,
    },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// One job (or execution) an ambiguous argument could mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    /// `project/name`, or `name` at the top of the inbox.
    pub prompt: String,
    /// Its state (a job) or outcome (an execution).
    pub state: String,
}

impl From<IndexedJob> for Candidate {
    fn from(j: IndexedJob) -> Self {
        Candidate {
            prompt: prompt_label(&j.project, &j.name),
            id: j.id,
            state: j.state,
        }
    }
}

impl From<Execution> for Candidate {
    fn from(e: Execution) -> Self {
        Candidate {
            prompt: prompt_label(&e.project, &e.name),
            id: e.id,
            state: e.outcome.as_str().to_owned(),
        }
    }
}

fn prompt_label(project: &str, name: &str) -> String {
    if project.is_empty() {
        name.to_owned()
    } else {
        format!("{project}/{name}")
    }
}

/// Resolve `arg` to a job id.
pub fn resolve(layout: &Layout, ledger: &Ledger, arg: &str) -> Result<JobId, LookupError> {
    if arg.contains('/') {
        let (project, name) = split_prompt(arg)?;
        return job_of_prompt_named(layout, ledger, &project, &name, arg);
    }
    if let Some(id) = by_id(layout, ledger, arg)? {
        return Ok(id);
    }
    match by_name(layout, ledger, arg)? {
        Some(id) => Ok(id),
        None => Err(not_found(arg)),
    }
}

/// Steps 3 and 4: a full id whose run folder exists, else a unique prefix
/// of an id or a short id. `None` too for what can only be a name.
fn by_id(layout: &Layout, ledger: &Ledger, arg: &str) -> Result<Option<JobId>, LookupError> {
    let Some(id) = id_like(arg)? else {
        return Ok(None);
    };
    if layout.run_dir(&id).is_dir() {
        return Ok(Some(id));
    }
    if arg.len() >= MIN_PREFIX {
        return by_prefix_or_tail(layout, ledger, arg);
    }
    Ok(None)
}

/// `arg` as an id (or id prefix) when it can be one; `None` when it can
/// only be a prompt name (which may hold any letter); refused when it is
/// neither (a NUL, a separator, a leading dot or dash).
fn id_like(arg: &str) -> Result<Option<JobId>, LookupError> {
    match JobId::parse(arg) {
        Ok(id) => Ok(Some(id)),
        Err(_) if layout::validate_segment(arg).is_ok() => Ok(None),
        Err(_) => Err(invalid(arg)),
    }
}

/// "No such job", with a hint when the argument is too short for a prefix.
fn not_found(arg: &str) -> LookupError {
    let hint = if arg.len() < MIN_PREFIX {
        format!(" (an id prefix needs at least {MIN_PREFIX} characters)")
    } else {
        String::new()
    };
    LookupError::NotFound(format!("no job {arg:?}{hint}; `jobwarden jobs` lists them"))
}

/// What a `<job>` argument names for the commands that accept a prompt
/// that has no job yet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Job(JobId),
    /// A prompt waiting in the inbox. `before` is the prompt's newest job
    /// when it was found waiting: a job made from it later is another one.
    Waiting {
        prompt: PromptName,
        before: Option<String>,
    },
}

/// Resolve `arg` to a job or a prompt waiting in the inbox (see the
/// module doc).
pub fn resolve_target(layout: &Layout, ledger: &Ledger, arg: &str) -> Result<Target, LookupError> {
    if arg.contains('/') || arg.ends_with(PROMPT_SUFFIX) {
        let (project, name) = split_prompt(arg)?;
        let prompt = PromptName { project, name };
        let file_only = arg.ends_with(PROMPT_SUFFIX);
        return match prompt_target(layout, ledger, prompt, file_only)? {
            Some(target) => Ok(target),
            None if file_only => Err(LookupError::NotFound(format!(
                "no prompt {arg:?} waits in the inbox; `jobwarden jobs` lists what does"
            ))),
            None => Err(LookupError::NotFound(format!(
                "no job of prompt {arg:?} and none waiting in the inbox; `jobwarden jobs` lists them"
            ))),
        };
    }
    if let Some(id) = by_id(layout, ledger, arg)? {
        return Ok(Target::Job(id));
    }
    if layout::validate_segment(arg).is_ok() {
        let top = PromptName {
            project: String::new(),
            name: arg.to_owned(),
        };
        if let Some(target) = prompt_target(layout, ledger, top, false)? {
            return Ok(target);
        }
        return named_elsewhere(layout, ledger, arg);
    }
    Err(not_found(arg))
}

/// `prompt`'s live job, else its file waiting in the inbox, else its
/// newest job; with `file_only`, the waiting file or nothing. The newest
/// job is read before the inbox is looked at, so that a job made from the
/// file after it was seen is never mistaken for an earlier one.
fn prompt_target(
    layout: &Layout,
    ledger: &Ledger,
    prompt: PromptName,
    file_only: bool,
) -> Result<Option<Target>, LookupError> {
    let newest = ledger
        .newest_job_of(&prompt.project, &prompt.name)?
        .map(|j| made(layout, j));
    let live = match newest.as_ref().filter(|j| is_live(layout, j)) {
        Some(j) => Some(j.clone()),
        None => live_job_of(layout, ledger, &prompt.project, &prompt.name)?,
    };
    if let (Some(j), false) = (live, file_only) {
        return JobId::parse(&j.id)
            .map(|id| Some(Target::Job(id)))
            .map_err(LookupError::Invalid);
    }
    if crate::waiting::look(layout, &prompt).is_some() {
        let before = newest.map(|j| j.id);
        return Ok(Some(Target::Waiting { prompt, before }));
    }
    if file_only {
        return Ok(None);
    }
    let newest = match newest {
        Some(j) if is_live(layout, &j) => Some(j),
        other => being_claimed(layout, ledger, &prompt, other)?,
    };
    newest
        .map(|j| JobId::parse(&j.id).map(Target::Job))
        .transpose()
        .map_err(LookupError::Invalid)
}

/// How many of a prompt's jobs the index holds unended are looked at for
/// the live one (more is a stale index: the start-up check mends it).
const LIVE_CANDIDATES: usize = 16;

/// The newest job of a prompt that has not ended, by its record. Only a
/// job with a record counts: an older row without one is a claim cut
/// short (the newest row, a claim under way, is [`made`]'s to wait for).
fn live_job_of(
    layout: &Layout,
    ledger: &Ledger,
    project: &str,
    name: &str,
) -> Result<Option<IndexedJob>, LookupError> {
    let unended = ledger.unended_jobs_of(project, name, LIVE_CANDIDATES)?;
    Ok(unended.into_iter().find(|j| {
        JobId::parse(&j.id)
            .ok()
            .and_then(|id| JobRecord::load_job(layout, &id).ok())
            .is_some_and(|rec| !rec.state.is_terminal())
    }))
}

/// The job a prompt name means when only jobs count: its live job, else
/// its newest.
fn job_of_prompt(
    layout: &Layout,
    ledger: &Ledger,
    project: &str,
    name: &str,
) -> Result<Option<IndexedJob>, LookupError> {
    let newest = ledger
        .newest_job_of(project, name)?
        .map(|j| made(layout, j));
    if newest.as_ref().is_some_and(|j| is_live(layout, j)) {
        return Ok(newest);
    }
    Ok(live_job_of(layout, ledger, project, name)?.or(newest))
}

/// How long a claim seen in progress is given to index its job.
const CLAIM_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// The prompt left the inbox since its newest job (`newest`) was read: if
/// its claimed name is there, a claim is in progress and its job appears
/// in the index in a moment. That job, else `newest`.
fn being_claimed(
    layout: &Layout,
    ledger: &Ledger,
    prompt: &PromptName,
    newest: Option<IndexedJob>,
) -> Result<Option<IndexedJob>, LookupError> {
    if std::fs::symlink_metadata(layout.running_prompt(prompt)).is_err() {
        return Ok(newest);
    }
    let deadline = std::time::Instant::now() + CLAIM_PATIENCE;
    while std::time::Instant::now() < deadline {
        let now = ledger.newest_job_of(&prompt.project, &prompt.name)?;
        if now.as_ref().map(|j| &j.id) != newest.as_ref().map(|j| &j.id) {
            return Ok(now.map(|j| made(layout, j)));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(newest)
}

/// A claim indexes its job before it makes the run folder and the record
/// (`claim.rs`): a row of a job that has not ended whose record is not
/// there yet is a claim under way. Give it a moment to write the record,
/// so that what the caller reads next is there. (A row whose folder never
/// appears, a claim cut short, costs that moment until the next daemon
/// start drops it.)
fn made(layout: &Layout, j: IndexedJob) -> IndexedJob {
    let unended = j
        .state
        .parse::<jobwarden_model::job::JobState>()
        .is_ok_and(|s| !s.is_terminal());
    let Some(id) = JobId::parse(&j.id).ok().filter(|_| unended) else {
        return j;
    };
    let deadline = std::time::Instant::now() + CLAIM_PATIENCE;
    while !layout.has_record(&id) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    j
}

/// Has the job not ended? Its record decides (the index may lag).
fn is_live(layout: &Layout, j: &IndexedJob) -> bool {
    JobId::parse(&j.id)
        .ok()
        .and_then(|id| JobRecord::load_job(layout, &id).ok())
        .map_or_else(
            || {
                j.state
                    .parse::<jobwarden_model::job::JobState>()
                    .is_ok_and(|s| !s.is_terminal())
            },
            |rec| !rec.state.is_terminal(),
        )
}

/// A bare `name` that names nothing at the top of the inbox: the one
/// prompt of that name in another folder (waiting there, or with jobs),
/// if only one folder has one.
fn named_elsewhere(layout: &Layout, ledger: &Ledger, name: &str) -> Result<Target, LookupError> {
    let mut prompts = crate::waiting::named(layout, name);
    for project in ledger.projects_with_prompt(name, MAX_CANDIDATES + 1)? {
        let prompt = PromptName {
            project,
            name: name.to_owned(),
        };
        if !prompts.contains(&prompt) {
            prompts.push(prompt);
        }
    }
    match prompts.len() {
        0 => Err(not_found(name)),
        1 => {
            prompt_target(layout, ledger, prompts.remove(0), false)?.ok_or_else(|| not_found(name))
        }
        _ => Err(LookupError::AmbiguousPrompt {
            arg: name.to_owned(),
            prompts,
        }),
    }
}

/// The job ([`job_of_prompt`]) of the prompt named `name`: at the top of
/// the inbox, else in the one folder that has a prompt of that name.
fn by_name(layout: &Layout, ledger: &Ledger, name: &str) -> Result<Option<JobId>, LookupError> {
    if let Some(j) = job_of_prompt(layout, ledger, "", name)? {
        return JobId::parse(&j.id).map(Some).map_err(LookupError::Invalid);
    }
    let projects = ledger.projects_with_prompt(name, MAX_CANDIDATES + 1)?;
    let mut newest = Vec::with_capacity(projects.len());
    for project in &projects {
        newest.extend(job_of_prompt(layout, ledger, project, name)?);
    }
    one_of(name, newest.into_iter().map(Candidate::from).collect())
}

/// The one candidate's id, none, or ambiguous.
fn one_of(arg: &str, found: Vec<Candidate>) -> Result<Option<JobId>, LookupError> {
    match found.len() {
        0 => Ok(None),
        1 => JobId::parse(&found[0].id)
            .map(Some)
            .map_err(LookupError::Invalid),
        _ => Err(LookupError::Ambiguous {
            arg: arg.to_owned(),
            candidates: found,
        }),
    }
}

fn invalid(arg: &str) -> LookupError {
    LookupError::Invalid(format!(
        "{arg:?} is not a job id, id prefix or prompt name: ids hold only letters, digits, '-' and '_'; a prompt is named project/name"
    ))
}

/// `a/b/name` → (`a/b`, `name`), each segment validated.
fn split_prompt(arg: &str) -> Result<(String, String), LookupError> {
    let (project, name) = arg.rsplit_once('/').unwrap_or(("", arg));
    let bad = |why: String| LookupError::Invalid(format!("{arg:?} is not a prompt name: {why}"));
    if arg.contains('\0') {
        return Err(bad("it contains a NUL byte".into()));
    }
    if arg.starts_with('/') {
        return Err(bad(
            "it is an absolute path; name it relative to the inbox, as project/name".into(),
        ));
    }
    layout::validate_project(project).map_err(bad)?;
    layout::validate_segment(name).map_err(|e| bad(format!("name {name:?} {e}")))?;
    let name = name.strip_suffix(".prompt.md").unwrap_or(name);
    Ok((project.to_owned(), name.to_owned()))
}

/// `project/name` where only jobs count: [`job_of_prompt`].
fn job_of_prompt_named(
    layout: &Layout,
    ledger: &Ledger,
    project: &str,
    name: &str,
    arg: &str,
) -> Result<JobId, LookupError> {
    match job_of_prompt(layout, ledger, project, name)? {
        Some(j) => JobId::parse(&j.id).map_err(LookupError::Invalid),
        None => Err(LookupError::NotFound(format!(
            "no job of prompt {arg:?}; `jobwarden jobs` lists them"
        ))),
    }
}

/// A unique job whose id (else short id) starts with `arg`.
fn by_prefix_or_tail(
    layout: &Layout,
    ledger: &Ledger,
    arg: &str,
) -> Result<Option<JobId>, LookupError> {
    let limit = MAX_CANDIDATES + 1;
    // Both: a custom id may start with another job's short id, which then
    // still names that job exactly.
    let mut found = ledger.jobs_with_prefix(arg, limit)?;
    for j in ledger.jobs_with_short_prefix(arg, limit)? {
        if !found.iter().any(|f| f.id == j.id) {
            found.push(j);
        }
    }
    if found.is_empty() {
        found = scan_run_dirs(layout, arg);
    }
    one_of(arg, exactly(arg, found))
}

/// Of several matches, the one whose id or short id is `arg` itself (a
/// first attempt's short id is a prefix of its retries'); else all.
fn exactly<T: Into<Candidate>>(arg: &str, found: Vec<T>) -> Vec<Candidate> {
    let found: Vec<Candidate> = found.into_iter().map(Into::into).collect();
    let exact = |c: &&Candidate| c.id == arg || short_id(&c.id) == arg;
    match found.iter().filter(exact).count() {
        1 if found.len() > 1 => found.into_iter().filter(|c| exact(&c)).collect(),
        _ => found,
    }
}

/// The slow way, when the index knows no match: the run folders' names.
fn scan_run_dirs(layout: &Layout, arg: &str) -> Vec<IndexedJob> {
    let ids = layout.job_ids().unwrap_or_default();
    let matching = |f: &dyn Fn(&str) -> bool| -> Vec<IndexedJob> {
        ids.iter()
            .filter(|id| f(id.as_str()))
            .take(MAX_CANDIDATES + 1)
            .map(|id| unindexed(layout, id))
            .collect()
    };
    let by_prefix = matching(&|id| id.starts_with(arg));
    if by_prefix.is_empty() {
        matching(&|id| short_id(id).starts_with(arg))
    } else {
        by_prefix
    }
}

/// What the record says of a job the index does not know.
fn unindexed(layout: &Layout, id: &JobId) -> IndexedJob {
    match jobwarden_model::job::JobRecord::load_job(layout, id) {
        Ok(rec) => IndexedJob::from_record(&rec),
        Err(_) => IndexedJob {
            id: id.to_string(),
            project: String::new(),
            name: "?".into(),
            state: "unreadable".into(),
            attempt: 1,
            created_at: 0,
            started_at: None,
            finished_at: None,
            exit_code: None,
            state_reason: None,
            updated_at: 0,
            profile: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_arguments_are_refused_before_any_lookup() {
        for arg in [
            "../x",
            "/etc/passwd",
            "a/../b",
            "a\0b",
            "proj/.hidden",
            "",
            "a//b",
        ] {
            let refused = if arg.contains('/') {
                split_prompt(arg).is_err()
            } else {
                JobId::parse(arg).is_err()
            };
            assert!(refused, "{arg:?} must be refused");
        }
    }

    #[test]
    fn prompt_names_split_at_the_last_slash() {
        assert_eq!(
            split_prompt("a/b/name").expect("valid"),
            ("a/b".to_owned(), "name".to_owned())
        );
        assert_eq!(
            split_prompt("proj/x.prompt.md").expect("valid"),
            ("proj".to_owned(), "x".to_owned())
        );
    }
}
