//! `history show`'s `<job>`: the forms [`super::resolve`] takes, matched
//! against the ledger's executions, which outlive run folders and include
//! runs recorded by hand. A prompt name means its newest execution (every
//! execution has ended).

use jobwarden_ledger::Ledger;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::Layout;

use super::{
    Candidate, LookupError, MAX_CANDIDATES, MIN_PREFIX, exactly, id_like, one_of, resolve,
    split_prompt,
};

/// Resolve `arg` to an execution (a ledger row) for `history show`: the
/// forms [`resolve`] takes, matched against the ledger's executions. A job
/// that matches but has no row yet (it has not ended) is named in the
/// "not found" answer.
pub fn resolve_execution(
    layout: &Layout,
    ledger: &Ledger,
    arg: &str,
) -> Result<JobId, LookupError> {
    if let Some(id) = execution_of(ledger, arg)? {
        return Ok(id);
    }
    match resolve(layout, ledger, arg) {
        Ok(id) => Err(LookupError::NotFound(no_row_yet(layout, ledger, &id)?)),
        Err(LookupError::NotFound(_)) => Err(LookupError::NotFound(format!(
            "no execution {arg:?} in the ledger {}; `jobwarden history list` lists them",
            ledger.path().display()
        ))),
        Err(e) => Err(e),
    }
}

/// Why job `id` has no execution row: it has not ended, or its row was
/// not written (which `history repair` backfills).
fn no_row_yet(layout: &Layout, ledger: &Ledger, id: &JobId) -> Result<String, LookupError> {
    let state = match jobwarden_model::job::JobRecord::load_job(layout, id) {
        Ok(rec) => Some(rec.state),
        Err(_) => ledger
            .indexed_job(id.as_str())?
            .and_then(|j| j.state.parse::<jobwarden_model::job::JobState>().ok()),
    };
    Ok(match state {
        Some(s) if s.is_terminal() => format!(
            "job {id} ({s}) has no execution in the ledger: its row was not written; `jobwarden history repair` backfills it from the job's record"
        ),
        Some(s) => format!(
            "job {id} ({s}) has no execution in the ledger yet: its row is written when it ends; `jobwarden show {id}` shows it now"
        ),
        None => format!(
            "job {id} has no execution in the ledger; `jobwarden show {id}` shows what is known of it"
        ),
    })
}

/// The execution `arg` names, if the ledger has one.
fn execution_of(ledger: &Ledger, arg: &str) -> Result<Option<JobId>, LookupError> {
    if arg.contains('/') {
        let (project, name) = split_prompt(arg)?;
        let newest = ledger.newest_execution_of(&project, &name)?;
        return one_of(arg, newest.into_iter().map(Candidate::from).collect());
    }
    if let Some(id) = id_like(arg)? {
        if ledger.has_execution(id.as_str())? {
            return Ok(Some(id));
        }
        if arg.len() >= MIN_PREFIX {
            let limit = MAX_CANDIDATES + 1;
            // Both, as for jobs: a custom id may start with another's short id.
            let mut found = ledger.executions_with_prefix(arg, limit)?;
            for e in ledger.executions_with_short_prefix(arg, limit)? {
                if !found.iter().any(|f| f.id == e.id) {
                    found.push(e);
                }
            }
            if let Some(id) = one_of(arg, exactly(arg, found))? {
                return Ok(Some(id));
            }
        }
    }
    if let Some(e) = ledger.newest_execution_of("", arg)? {
        return JobId::parse(&e.id).map(Some).map_err(LookupError::Invalid);
    }
    let projects = ledger.projects_with_execution_of(arg, MAX_CANDIDATES + 1)?;
    let mut newest = Vec::with_capacity(projects.len());
    for project in &projects {
        newest.extend(ledger.newest_execution_of(project, arg)?);
    }
    one_of(arg, newest.into_iter().map(Candidate::from).collect())
}
