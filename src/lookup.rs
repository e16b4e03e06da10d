//! The CLI's `<job>` argument: which job does the operator mean?
//!
//! In this order:
//! 1. Anything with a NUL, a leading `/`, a `..` or `.` segment, or another
//!    unsafe character is refused before it becomes a path.
//! 2. `project/name` (it has a `/`): that prompt's newest job.
//! 3. A full job id whose run folder exists.
//! 4. A unique prefix of at least 4 characters of the id, else of its short
//!    form: tables show ids by their last 8 characters, because a UUIDv7's
//!    head is its timestamp, shared by every job of the same minute.
//!    Several matches: ambiguous, and the candidates are listed.
//! 5. `name`: the newest job of the prompt at the top of the inbox.
//!
//! Matching reads the job index; if the index knows nothing (stale, or
//! rebuilt after a restore), the run folders' names are searched instead.

use crate::job::JobId;
use crate::layout::{self, Layout};
use crate::ledger::{IndexedJob, Ledger, LedgerError, short_id};

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
        "{arg:?} matches {} jobs{}; give more characters:\n{}",
        if candidates.len() > MAX_CANDIDATES { "more than 10".to_owned() } else { candidates.len().to_string() },
        if candidates.len() > MAX_CANDIDATES { " (the first 10)" } else { "" },
        candidates.iter().take(MAX_CANDIDATES).map(|j| format!("  {}  {}  {}", j.id, prompt_label(j), j.state)).collect::<Vec<_>>().join("\n")
    )]
    Ambiguous {
        arg: String,
        candidates: Vec<IndexedJob>,
    },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

fn prompt_label(j: &IndexedJob) -> String {
    if j.project.is_empty() {
        j.name.clone()
    } else {
        format!("{}/{}", j.project, j.name)
    }
}

/// Resolve `arg` to a job id.
pub fn resolve(layout: &Layout, ledger: &Ledger, arg: &str) -> Result<JobId, LookupError> {
    if arg.contains('/') {
        let (project, name) = split_prompt(arg)?;
        return newest_of(ledger, &project, &name, arg);
    }
    let id = JobId::parse(arg).map_err(|_| invalid(arg))?;
    if layout.run_dir(&id).is_dir() {
        return Ok(id);
    }
    if arg.len() >= MIN_PREFIX {
        if let Some(found) = by_prefix_or_tail(layout, ledger, arg)? {
            return Ok(found);
        }
    }
    if layout::validate_segment(arg).is_ok() {
        if let Some(j) = ledger.newest_job_of("", arg)? {
            return JobId::parse(&j.id).map_err(LookupError::Invalid);
        }
    }
    let hint = if arg.len() < MIN_PREFIX {
        format!(" (an id prefix needs at least {MIN_PREFIX} characters)")
    } else {
        String::new()
    };
    Err(LookupError::NotFound(format!(
        "no job {arg:?}{hint}; `jobwarden jobs` lists them"
    )))
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

fn newest_of(ledger: &Ledger, project: &str, name: &str, arg: &str) -> Result<JobId, LookupError> {
    match ledger.newest_job_of(project, name)? {
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
    let mut found = ledger.jobs_with_prefix(arg, limit)?;
    if found.is_empty() {
        found = ledger.jobs_with_short_prefix(arg, limit)?;
    }
    if found.is_empty() {
        found = scan_run_dirs(layout, arg);
    }
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
    match crate::job::JobRecord::load_job(layout, id) {
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
