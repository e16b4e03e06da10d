//! A job's placeholders and its workdir: the values its profile's and
//! route's templates are filled with, resolved the one way, for the
//! monitor that runs its commands and the daemon that schedules it (one
//! job per repository checkout).

use std::path::PathBuf;

use crate::config::{Profile, Route, Vars};
use crate::job::{JobId, JobRecord};
use crate::layout::Layout;

/// What a job runs with: its profile, the route it came through, its record.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    pub layout: &'a Layout,
    pub profile: &'a Profile,
    pub route: Option<&'a Route>,
    pub rec: &'a JobRecord,
}

/// The placeholder values of a job (the route's captures included) and
/// its workdir: the route's `workdir` if it sets one, else the profile's.
pub fn vars(job: &Job<'_>) -> (Vars, PathBuf) {
    let (layout, rec) = (job.layout, job.rec);
    let id = &rec.job_id;
    let mut vars: Vars = rec.captures.clone();
    vars.extend(crate::config::vars([
        ("job_id", id.to_string()),
        ("run_dir", layout.run_dir(id).display().to_string()),
        (
            "prompt_file",
            prompt_input(layout, id).display().to_string(),
        ),
        ("project", rec.project.clone()),
        ("name", rec.name.clone()),
        ("attempt", rec.attempt.to_string()),
        ("root", layout.root().display().to_string()),
        ("job_workdir", layout.job_workdir(id).display().to_string()),
    ]));
    let template = job
        .route
        .and_then(|r| r.workdir.as_ref())
        .unwrap_or(&job.profile.workdir);
    let workdir = layout.workdir(&template.render(&vars));
    vars.insert("workdir".into(), workdir.display().to_string());
    (vars, workdir)
}

/// The file holding what the command is given as its prompt: the body
/// (`body.md`, written by the claim only for a prompt with front matter),
/// else the prompt as claimed.
pub fn prompt_input(layout: &Layout, id: &JobId) -> PathBuf {
    let body = layout.prompt_body(id);
    match std::fs::symlink_metadata(&body) {
        Ok(meta) if meta.is_file() => body,
        _ => layout.prompt_copy(id),
    }
}
