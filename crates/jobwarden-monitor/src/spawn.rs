//! Turning a profile into a running process: the argv with placeholders
//! filled, the working folder, the clean environment, stdin; then the spawn
//! in a new process group whose leader dies with the monitor.
//!
//! The prompt the command receives (on stdin, as an argument, as a file,
//! `{prompt_file}`, `JOBWARDEN_PROMPT_FILE`) is its body without front
//! matter: `body.md` when the claim wrote one, else `prompt.md`.
//!
//! Everything that can be wrong with the plan (program not found, workdir
//! missing) is found here, before the fork, so the job's `state_reason`
//! names it plainly, with the fix. Such faults of the setup, which waiting
//! will not fix, are told apart from passing ones ([`NotStarted`]): the job
//! ends `setup_failed`, not `failed`, and starts no cooldown.
//!
//! The process itself is started by `child.rs`, without copying the
//! monitor; before its `exec` it confines itself ([`Confinement`]): it
//! joins the job's cgroup if there is one and sets the profile's rlimits.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::sandbox::Prepared;
use jobwarden_model::placeholders::{Job, vars};
use jobwarden_sys::child;
pub use jobwarden_sys::child::{CPU_HARD_GRACE_SECS, Confinement, Started};

use jobwarden_model::config::{PromptVia, Vars};

/// Variables passed through from the monitor's environment to every job.
const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "SHELL",
    // How a Slurm client finds its cluster (a profile with `executor = "slurm"`).
    "SLURM_CONF",
];
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Why one of a job's commands could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotStarted {
    /// The setup is wrong and waiting will not fix it: a program not
    /// found or not executable, a workdir missing, a profile gone. The
    /// reason says what to fix.
    Setup(String),
    /// Anything else (the prompt unreadable, the fork refused, the record
    /// not written): it may pass.
    Other(String),
}

impl NotStarted {
    pub fn reason(&self) -> &str {
        match self {
            NotStarted::Setup(r) | NotStarted::Other(r) => r,
        }
    }

    /// The same fault with its reason rewritten by `f`.
    pub fn map(self, f: impl FnOnce(String) -> String) -> NotStarted {
        match self {
            NotStarted::Setup(r) => NotStarted::Setup(f(r)),
            NotStarted::Other(r) => NotStarted::Other(f(r)),
        }
    }

    /// A failed `spawn`: a program the kernel cannot run (missing, a
    /// script whose `#!` interpreter is missing, no permission, not an
    /// executable format) is the setup's fault; a refused fork is not.
    fn of_spawn(program: &Path, e: &std::io::Error) -> NotStarted {
        use std::io::ErrorKind;
        const ENOEXEC: i32 = libc::ENOEXEC;
        if let Some(sandbox) = e
            .get_ref()
            .and_then(|e| e.downcast_ref::<child::SandboxError>())
        {
            return NotStarted::Setup(format!(
                "cannot start {} in its sandbox: {sandbox}; fix what it names, or set sandbox = false in the job's profile",
                program.display()
            ));
        }
        let setup = matches!(
            e.kind(),
            ErrorKind::NotFound | ErrorKind::PermissionDenied | ErrorKind::NotADirectory
        ) || e.raw_os_error() == Some(ENOEXEC);
        let reason = format!("cannot start {}: {e}", program.display());
        if setup {
            NotStarted::Setup(format!(
                "{reason}; check the program and the interpreter on its #! line"
            ))
        } else {
            NotStarted::Other(reason)
        }
    }
}

/// Which of a job's commands a plan is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The profile's `prepare` command: runs in the run folder (the workdir
    /// may not exist yet: creating it is often its job), stdin /dev/null.
    Prepare,
    /// The main command: runs in the workdir, gets the prompt.
    Run,
    /// The profile's `publish` command: runs in the workdir, stdin /dev/null.
    Publish,
}

impl Stage {
    /// As `failure_stage` and `JOBWARDEN_PHASE` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Prepare => "prepare",
            Stage::Run => "run",
            Stage::Publish => "publish",
        }
    }
}

/// A job's process, decided but not yet started.
#[derive(Debug)]
pub struct Plan {
    program: PathBuf,
    /// argv as run, argv[0] as configured.
    pub argv: Vec<String>,
    /// argv as recorded: a prompt passed as an argument is elided.
    pub recorded_argv: Vec<String>,
    /// The job's workdir (the main command's and publish's cwd).
    pub workdir: PathBuf,
    /// Where this stage runs.
    pub cwd: PathBuf,
    env: Vec<(String, OsString)>,
    stdin: Option<PathBuf>,
}

impl Plan {
    /// The command's whole environment.
    pub fn env(&self) -> &[(String, OsString)] {
        &self.env
    }

    /// What its stdin reads (the prompt), if anything.
    pub fn stdin(&self) -> Option<&Path> {
        self.stdin.as_deref()
    }
}

/// Build the plan of `stage` for `job`, or say why it cannot run. `None`
/// when the profile has no such stage.
pub fn plan(job: &Job<'_>, stage: Stage) -> Result<Option<Plan>, NotStarted> {
    let profile = job.profile;
    let (vars, workdir) = vars(job);
    let (templates, key) = match stage {
        Stage::Prepare => match &profile.prepare {
            Some(p) => (&p.command, "prepare.command"),
            None => return Ok(None),
        },
        Stage::Run => (&profile.command, "command"),
        Stage::Publish => match &profile.publish {
            Some(p) => (&p.command, "publish.command"),
            None => return Ok(None),
        },
    };
    let cwd = match stage {
        Stage::Prepare => job.layout.run_dir(&job.rec.job_id),
        Stage::Run | Stage::Publish => workdir.clone(),
    };
    if !cwd.is_dir() {
        let fix = if profile.prepare.is_some() {
            format!("profiles.{}.prepare should have created it", profile.name)
        } else {
            format!(
                "create it or fix the workdir of profiles.{} (or of its route)",
                profile.name
            )
        };
        return Err(NotStarted::Setup(format!(
            "workdir {} does not exist or is not a folder; {fix}",
            cwd.display()
        )));
    }
    let mut argv: Vec<String> = templates.iter().map(|t| t.render(&vars)).collect();
    let mut recorded_argv = argv.clone();
    let prompt_file = PathBuf::from(&vars["prompt_file"]);
    if stage == Stage::Run {
        match profile.prompt_via {
            PromptVia::Stdin => {}
            PromptVia::Arg => {
                let text = std::fs::read_to_string(&prompt_file).map_err(|e| {
                    NotStarted::Other(format!("reading the prompt {}: {e}", prompt_file.display()))
                })?;
                recorded_argv.push(format!("<prompt: {} bytes>", text.len()));
                argv.push(text);
            }
            PromptVia::File if !profile.command.iter().any(|t| t.uses("prompt_file")) => {
                argv.push(vars["prompt_file"].clone());
                recorded_argv.push(vars["prompt_file"].clone());
            }
            PromptVia::File => {}
        }
    }
    let env = environment(job, &vars, stage);
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let key = format!("profiles.{}.{key}", profile.name);
    let program = resolve_program(&argv[0], &cwd, &path_var, &key).map_err(NotStarted::Setup)?;
    let stdin =
        (stage == Stage::Run && profile.prompt_via == PromptVia::Stdin).then_some(prompt_file);
    Ok(Some(Plan {
        program,
        argv,
        recorded_argv,
        workdir,
        cwd,
        env,
        stdin,
    }))
}

/// The job's whole environment: the allowlist and the profile's
/// passthrough names from ours, the profile's fixed values, the route's,
/// then ours (`JOBWARDEN_*`, `GIT_TERMINAL_PROMPT=0`: a job never waits
/// for a password on a terminal it does not have).
fn environment(job: &Job<'_>, vars: &Vars, stage: Stage) -> Vec<(String, OsString)> {
    let (profile, rec) = (job.profile, job.rec);
    let mut env: Vec<(String, OsString)> = Vec::new();
    let mut set = |k: &str, v: OsString| {
        env.retain(|(name, _)| name != k);
        env.push((k.to_owned(), v));
    };
    for (k, v) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let allowed = ENV_ALLOWLIST.contains(&k)
            || k.starts_with("LC_")
            || profile.env_passthrough.iter().any(|p| p == k);
        if allowed {
            set(k, v);
        }
    }
    if std::env::var_os("PATH").is_none() {
        set("PATH", DEFAULT_PATH.into());
    }
    set("GIT_TERMINAL_PROMPT", "0".into());
    for (k, v) in &profile.env {
        set(k, v.into());
    }
    for (k, t) in job.route.map(|r| &r.env).into_iter().flatten() {
        set(k, t.render(vars).into());
    }
    set("JOBWARDEN_JOB_ID", rec.job_id.as_str().into());
    set("JOBWARDEN_RUN_DIR", vars["run_dir"].clone().into());
    set("JOBWARDEN_PROMPT_FILE", vars["prompt_file"].clone().into());
    set("JOBWARDEN_ATTEMPT", rec.attempt.to_string().into());
    set("JOBWARDEN_PROJECT", rec.project.clone().into());
    set("JOBWARDEN_NAME", rec.name.clone().into());
    set("JOBWARDEN_WORKDIR", vars["workdir"].clone().into());
    set("JOBWARDEN_PHASE", stage.as_str().into());
    if let Some(git) = &rec.git {
        set("JOBWARDEN_GIT_REPO", git.repo.clone().into());
        set("JOBWARDEN_GIT_BRANCH", git.branch.clone().into());
        set("JOBWARDEN_GIT_TARGET", git.target.clone().into());
        if let Some(w) = &git.worktree {
            set("JOBWARDEN_GIT_WORKTREE", w.clone().into());
        }
    }
    env
}

/// Find the program the way `execvp` would, so that "not found" and "not
/// executable" are reported by name before anything is started.
fn resolve_program(
    program: &str,
    workdir: &Path,
    path_var: &OsString,
    key: &str,
) -> Result<PathBuf, String> {
    let fix = format!("install it or set {key} to its full path");
    let not_executable = |path: &Path| {
        format!(
            "program `{program}` is not executable ({}); make it executable (chmod +x) or set {key} to another program",
            path.display()
        )
    };
    if program.contains('/') {
        let path = workdir.join(program);
        return match executable(&path) {
            Some(true) => Ok(path),
            Some(false) => Err(not_executable(&path)),
            None => Err(format!(
                "program `{program}` not found: {} does not exist; {fix}",
                path.display()
            )),
        };
    }
    let mut not_executable_at = None;
    for dir in std::env::split_paths(path_var) {
        let candidate = workdir.join(dir).join(program);
        match executable(&candidate) {
            Some(true) => return Ok(candidate),
            Some(false) => not_executable_at = not_executable_at.or(Some(candidate)),
            None => {}
        }
    }
    match not_executable_at {
        Some(p) => Err(not_executable(&p)),
        None => Err(format!(
            "program `{program}` not found on the job's PATH ({}); {fix}",
            path_var.to_string_lossy()
        )),
    }
}

/// `Some(is_executable)` for an existing regular file, `None` otherwise.
fn executable(path: &Path) -> Option<bool> {
    let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
    Some(meta.permissions().mode() & 0o111 != 0)
}

/// Start the plan: its own process group (pgid = pid), stdout and stderr
/// piped for the log, SIGKILL to the leader if the monitor dies, confined
/// as `confinement` says.
///
/// Must be called from the monitor's main thread: the parent-death signal
/// fires when the *thread* that started the child exits, and the monitor's
/// runtime is single-threaded so that this thread lives as long as the
/// monitor.
pub fn spawn(
    plan: &Plan,
    confinement: &Confinement,
    sandbox: Option<Prepared>,
) -> Result<Started, NotStarted> {
    let stdin = match &plan.stdin {
        Some(p) => File::open(p)
            .map_err(|e| NotStarted::Other(format!("opening the prompt {}: {e}", p.display())))?,
        None => File::open("/dev/null")
            .map_err(|e| NotStarted::Other(format!("opening /dev/null: {e}")))?,
    };
    let started = child::start(child::Command {
        program: &plan.program,
        argv: &plan.argv,
        env: &plan.env,
        cwd: &plan.cwd,
        stdin: stdin.into(),
        confinement: *confinement,
        sandbox: sandbox.as_ref().map(Prepared::sandboxed),
    });
    let mut started = started.map_err(|e| NotStarted::of_spawn(&plan.program, &e))?;
    if let Some(sandbox) = sandbox {
        match sandbox.started() {
            Ok(link) => started.init = Some(link),
            Err(e) => {
                // The init has ended, or never said it started: make sure.
                let _ = nix::sys::signal::kill(started.pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(started.pid, None);
                return Err(NotStarted::of_spawn(&plan.program, &e));
            }
        }
    }
    Ok(started)
}
