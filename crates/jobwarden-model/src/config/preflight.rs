//! What `config check` warns about in a valid configuration: what it names
//! on this machine that is not there — a program not found on PATH, a
//! workdir (or the folder a workdir template starts with) that does not
//! exist — and routes that overlap. Warnings, not errors: the daemon may
//! run with another PATH, and a folder may be made before the first job.
//! What cannot be checked (a program or folder made of placeholders) gets a
//! note saying so. Reads the filesystem, changes nothing.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::template::{Template, vars};
use super::{Config, Problem, Profile};
use crate::layout::Layout;

/// The PATH a job gets when the daemon has none (as the monitor does).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Warnings and notes about a valid configuration.
#[derive(Debug, Default)]
pub struct Findings {
    pub warnings: Vec<Problem>,
    pub notes: Vec<Problem>,
}

impl Findings {
    fn warn(&mut self, key: &str, message: String) {
        let key = key.to_owned();
        self.warnings.push(Problem { key, message });
    }

    fn note(&mut self, key: &str, message: String) {
        let key = key.to_owned();
        self.notes.push(Problem { key, message });
    }
}

/// Check `config` against this machine: programs on `path_var` (the
/// profile's own `env.PATH` wins) and workdirs under `layout`'s root.
pub fn preflight(config: &Config, layout: &Layout, path_var: Option<&OsStr>) -> Findings {
    let mut f = Findings::default();
    for (name, profile) in &config.profiles {
        let key = |k: &str| format!("profiles.{name}.{k}");
        let path: OsString = match profile.env.get("PATH") {
            Some(p) => p.into(),
            None => path_var.unwrap_or(OsStr::new(DEFAULT_PATH)).to_owned(),
        };
        program(&mut f, &key("command"), &profile.command, &path);
        for (which, phase) in [("prepare", &profile.prepare), ("publish", &profile.publish)] {
            if let Some(phase) = phase {
                program(
                    &mut f,
                    &key(&format!("{which}.command")),
                    &phase.command,
                    &path,
                );
            }
        }
        workdir(&mut f, &key("workdir"), &profile.workdir, profile, layout);
        if profile.executor.slurm().is_some() {
            let missing: Vec<&str> = ["sbatch", "squeue", "scontrol", "scancel"]
                .into_iter()
                .filter(|client| on_path(client, &path) != Some(true))
                .collect();
            if !missing.is_empty() {
                f.warn(
                    &key("executor"),
                    format!(
                        "{}: Slurm's {} not found on PATH ({}); install Slurm's client commands (Debian: slurm-client) where the daemon runs",
                        key("executor"),
                        missing.join(", "),
                        path.to_string_lossy()
                    ),
                );
            }
        }
    }
    for (i, route) in config.routes.iter().enumerate() {
        let (Some(w), Some(profile)) = (&route.workdir, config.profiles.get(&route.profile)) else {
            continue;
        };
        workdir(&mut f, &format!("route[{i}].workdir"), w, profile, layout);
    }
    for (j, message) in config.overlapping_routes() {
        f.warn(&format!("route[{j}]"), message);
    }
    f
}

/// Is the program of `argv` (at `key`) there to run?
fn program(f: &mut Findings, key: &str, argv: &[Template], path: &OsStr) {
    let Some(first) = argv.first() else { return };
    let (program, placeholder) = first.prefix(&Default::default());
    if placeholder.is_some() {
        f.note(
            key,
            format!(
                "{key}: program {:?} is made of placeholders; not checked",
                first.source()
            ),
        );
        return;
    }
    let fix = format!("install it, or set {key} to its full path");
    if program.contains('/') {
        if !program.starts_with('/') {
            f.note(
                key,
                format!("{key}: program {program:?} is relative to the job's folder; not checked"),
            );
            return;
        }
        match executable(Path::new(&program)) {
            Some(true) => {}
            Some(false) => f.warn(key, format!("{key}: program {program} is not executable")),
            None => f.warn(
                key,
                format!("{key}: program {program} does not exist; {fix}"),
            ),
        }
        return;
    }
    match on_path(&program, path) {
        Some(true) => {}
        Some(false) => f.warn(
            key,
            format!("{key}: program {program:?} is on PATH but not executable; {fix}"),
        ),
        None => f.warn(
            key,
            format!(
                "{key}: program {program:?} not found on PATH ({}); {fix}",
                path.to_string_lossy()
            ),
        ),
    }
}

/// Is `program` on `path`: `Some(is_executable)` for the best file of
/// that name found, `None` when there is none.
fn on_path(program: &str, path: &OsStr) -> Option<bool> {
    std::env::split_paths(path)
        .filter_map(|dir| executable(&dir.join(program)))
        .max()
}

/// `Some(is_executable)` for an existing regular file, `None` otherwise.
fn executable(path: &Path) -> Option<bool> {
    let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
    Some(meta.permissions().mode() & 0o111 != 0)
}

/// Does the workdir `t` (at `key`, for jobs of `profile`) exist, or at
/// least the folder its literal beginning names?
fn workdir(f: &mut Findings, key: &str, t: &Template, profile: &Profile, layout: &Layout) {
    let root = vars([("root", layout.root().display().to_string())]);
    let (text, placeholder) = t.prefix(&root);
    // Folders jobwarden makes for each job.
    if text.is_empty() && matches!(placeholder, Some("job_workdir" | "run_dir")) {
        return;
    }
    if profile.prepare.is_some() {
        f.note(
            key,
            format!(
                "{key}: {:?} is left to profiles.{}.prepare to make; not checked",
                t.source(),
                profile.name
            ),
        );
        return;
    }
    let folder = match placeholder {
        None => text.as_str(),
        Some(_) => match text.rfind('/') {
            Some(end) => &text[..=end],
            None => {
                f.note(
                    key,
                    format!(
                        "{key}: {:?} starts with a placeholder; not checked",
                        t.source()
                    ),
                );
                return;
            }
        },
    };
    let path = layout.workdir(folder);
    if path.is_dir() {
        return;
    }
    let message = match placeholder {
        None => format!(
            "{key}: workdir {} does not exist (or is not a folder); create it, or jobs of profile {:?} fail at start",
            path.display(),
            profile.name
        ),
        Some(_) => format!(
            "{key}: {} does not exist (or is not a folder), and workdir {:?} is under it; create it, or jobs of profile {:?} fail at start",
            path.display(),
            t.source(),
            profile.name
        ),
    };
    f.warn(key, message);
}
