//! Slurm's command-line clients as jobwarden runs them: each with a
//! deadline, its output capped, its failure said as Slurm said it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

use super::{QueueEntry, SlurmState, job_name};
use jobwarden_model::config::SlurmOptions;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::Layout;

/// How long a Slurm client may take before it is given up on (a
/// controller that does not answer makes them retry for a while).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The most of a client's output read.
pub(super) const MAX_OUTPUT: usize = 4 << 20;

/// Why a client failed: its program is missing (a setup fault), or it ran
/// and said why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error(
        "{0} is not installed or not in PATH; install Slurm's client commands (Debian: slurm-client) or add their folder to PATH"
    )]
    Missing(String),
    #[error("{program} did not answer within {after:?}; the Slurm controller may be unreachable")]
    Hung { program: String, after: Duration },
    #[error("{program} failed: {said}")]
    Failed { program: String, said: String },
}

impl ClientError {
    /// Slurm says the controller cannot be reached: waiting may fix it.
    pub fn unreachable(&self) -> bool {
        match self {
            ClientError::Hung { .. } => true,
            ClientError::Failed { said, .. } => {
                said.contains("Unable to contact slurm controller")
                    || said.contains("Connection refused")
                    || said.contains("Socket timed out")
            }
            ClientError::Missing(_) => false,
        }
    }
}

/// Run a Slurm client with `args` (and `env`, when given: the whole
/// environment), at most [`CLIENT_TIMEOUT`]; its stdout, or why not.
async fn client(
    program: &str,
    args: &[String],
    env: Option<&[(String, std::ffi::OsString)]>,
) -> Result<String, ClientError> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(env) = env {
        cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    }
    // A client dies with the process that runs it: an `sbatch` must not
    // submit on behalf of a monitor that is gone (the next one would not
    // know of it).
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ClientError::Missing(program.to_owned()));
        }
        Err(e) => {
            return Err(ClientError::Failed {
                program: program.to_owned(),
                said: e.to_string(),
            });
        }
    };
    let out = match tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            return Err(ClientError::Failed {
                program: program.to_owned(),
                said: e.to_string(),
            });
        }
        Err(_) => {
            return Err(ClientError::Hung {
                program: program.to_owned(),
                after: CLIENT_TIMEOUT,
            });
        }
    };
    let text = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(MAX_OUTPUT)]).into_owned();
    if out.status.success() {
        return Ok(text(&out.stdout));
    }
    let said = text(&out.stderr).trim().to_owned();
    Err(ClientError::Failed {
        program: program.to_owned(),
        said: if said.is_empty() {
            format!("exited with {}", out.status)
        } else {
            said
        },
    })
}

/// What a submission needs besides the profile's options.
pub struct Submission<'a> {
    pub job: &'a JobId,
    /// The job's batch folder (its output, its records, its script).
    pub dir: &'a Path,
    /// Where the command runs.
    pub cwd: &'a Path,
    /// The command, as the batch script's arguments.
    pub argv: &'a [String],
    /// The whole environment of the job (and of `sbatch`).
    pub env: &'a [(String, std::ffi::OsString)],
    /// Slurm's time limit when the profile sets none.
    pub time_limit: Duration,
}

/// `sbatch`'s arguments for `s`.
pub fn sbatch_args(s: &Submission<'_>, o: &SlurmOptions) -> Vec<String> {
    let limit = o.time_limit.unwrap_or(s.time_limit);
    // Whole minutes, rounded up: Slurm's unit.
    let minutes = limit.as_secs().div_ceil(60).max(1);
    let mut args = vec![
        "--parsable".to_owned(),
        format!("--job-name={}", job_name(s.job)),
        format!("--comment=jobwarden:{}", s.job),
        format!("--chdir={}", s.cwd.display()),
        format!("--output={}", Layout::slurm_output(s.dir).display()),
        "--open-mode=append".to_owned(),
        // Another attempt is jobwarden's to decide (its retry policy), never
        // Slurm's: a job requeued by Slurm would run twice.
        "--no-requeue".to_owned(),
        format!("--time={minutes}"),
    ];
    if let Some(p) = &o.partition {
        args.push(format!("--partition={p}"));
    }
    if let Some(a) = &o.account {
        args.push(format!("--account={a}"));
    }
    if let Some(c) = o.cpus {
        args.push(format!("--cpus-per-task={c}"));
    }
    if let Some(m) = &o.memory {
        args.push(format!("--mem={m}"));
    }
    args.extend(o.sbatch_args.iter().cloned());
    args.push(Layout::slurm_script(s.dir).display().to_string());
    args.extend(s.argv.iter().cloned());
    args
}

/// Submit: the Slurm job id (`sbatch --parsable` prints `id` or
/// `id;cluster`).
pub async fn submit(s: &Submission<'_>, o: &SlurmOptions) -> Result<String, ClientError> {
    let out = client("sbatch", &sbatch_args(s, o), Some(s.env)).await?;
    let id = out.trim().split(';').next().unwrap_or("").trim().to_owned();
    if !is_slurm_id(&id) {
        return Err(ClientError::Failed {
            program: "sbatch".into(),
            said: format!("printed no job id: {:?}", out.trim()),
        });
    }
    Ok(id)
}

/// The Slurm job named for `job`, if Slurm knows one (a submission whose
/// id was not recorded).
pub async fn find(job: &JobId) -> Result<Option<String>, ClientError> {
    let args = [
        "-h".to_owned(),
        "-t".into(),
        "all".into(),
        format!("--user={}", nix::unistd::getuid()),
        "-n".into(),
        job_name(job),
        "-o".into(),
        "%i".into(),
    ];
    let out = client("squeue", &args, None).await?;
    Ok(out
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned))
}

/// What Slurm says of each of `ids`, in one call: the jobs it still knows
/// (an ended job is known for `MinJobAge`). An id Slurm does not know is
/// left out.
pub async fn poll(ids: &[String]) -> Result<BTreeMap<String, QueueEntry>, ClientError> {
    // Only what can be a Slurm id is asked about: one that cannot (a
    // record a job wrote) would make squeue refuse the whole question.
    let ids: Vec<String> = ids.iter().filter(|i| is_slurm_id(i)).cloned().collect();
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let args = [
        "-h".to_owned(),
        "-t".into(),
        "all".into(),
        "-j".into(),
        ids.join(","),
        "-o".into(),
        "%i|%T|%j|%N|%r".into(),
    ];
    match client("squeue", &args, None).await {
        Ok(out) => Ok(parse_squeue(&out)),
        // A lone unknown id: squeue says so and fails (with several, it
        // lists those it knows).
        Err(ClientError::Failed { said, .. })
            if ids.len() == 1 && said.contains("Invalid job id specified") =>
        {
            Ok(BTreeMap::new())
        }
        Err(e) => Err(e),
    }
}

/// Can `id` be a Slurm job id (`123`, or an array task's `123_4`)?
pub fn is_slurm_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_digit() || b == b'_')
}

/// `squeue -o '%i|%T|%j|%N|%r'` lines.
pub fn parse_squeue(out: &str) -> BTreeMap<String, QueueEntry> {
    let mut jobs = BTreeMap::new();
    for line in out.lines() {
        let mut f = line.trim().splitn(5, '|');
        let (Some(id), Some(state), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let opt = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|v| !v.is_empty() && *v != "(null)" && *v != "None")
                .map(str::to_owned)
        };
        let (node, reason) = (opt(f.next()), opt(f.next()));
        if id.is_empty() || state.is_empty() {
            continue;
        }
        jobs.insert(
            id.trim().to_owned(),
            QueueEntry {
                state: SlurmState(state.trim().to_owned()),
                name: name.trim().to_owned(),
                node,
                reason,
                exit_code: None,
            },
        );
    }
    jobs
}

/// `scontrol show job -o <id>`: what the controller says of one job, with
/// its exit code; `None` when it no longer knows it.
pub async fn show(id: &str) -> Result<Option<QueueEntry>, ClientError> {
    if !is_slurm_id(id) {
        return Ok(None);
    }
    let args = ["show".to_owned(), "job".into(), "-o".into(), id.to_owned()];
    match client("scontrol", &args, None).await {
        Ok(out) => Ok(parse_scontrol(&out)),
        Err(ClientError::Failed { said, .. }) if said.contains("Invalid job id") => Ok(None),
        Err(e) => Err(e),
    }
}

/// One `scontrol show job -o` line.
pub fn parse_scontrol(out: &str) -> Option<QueueEntry> {
    let line = out.lines().find(|l| l.contains("JobState="))?;
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key))
            .map(str::to_owned)
            .filter(|v| !v.is_empty() && v != "(null)" && v != "None")
    };
    Some(QueueEntry {
        state: SlurmState(field("JobState=")?),
        name: field("JobName=").unwrap_or_default(),
        node: field("NodeList="),
        reason: field("Reason="),
        exit_code: field("ExitCode="),
    })
}

/// `scancel` of the Slurm job named for `job` (never by an id a record
/// gives, which a job could have forged): with `signal`, that signal to
/// the batch script and every step (`--full`), the job left to end by
/// itself; without, the job is cancelled (SIGTERM, then SIGKILL after the
/// cluster's `KillWait`). A pending job is cancelled either way.
pub async fn cancel(job: &JobId, signal: Option<&str>) -> Result<(), ClientError> {
    client("scancel", &cancel_args(job, signal), None)
        .await
        .map(drop)
}

fn cancel_args(job: &JobId, signal: Option<&str>) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(sig) = signal {
        args.push(format!("--signal={sig}"));
        args.push("--full".to_owned());
    }
    args.push(format!("--user={}", nix::unistd::getuid()));
    args.push(format!("--name={}", job_name(job)));
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_can_be_a_slurm_id_is_ever_put_to_squeue() {
        for good in ["1", "123", "123_4"] {
            assert!(is_slurm_id(good), "{good}");
        }
        for bad in [
            "",
            "12;rm -rf /",
            "-1",
            "1 2",
            "1,2",
            "abc",
            "１２",
            &"9".repeat(33),
        ] {
            assert!(!is_slurm_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn squeue_lines_are_read_field_by_field() {
        let out = "12|RUNNING|jw-abc|n1|None\n13|PENDING|jw-def||Resources\n\nbad line\n";
        let jobs = parse_squeue(out);
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs["12"].state.as_str(), "RUNNING");
        assert_eq!(jobs["12"].node.as_deref(), Some("n1"));
        assert_eq!(jobs["12"].reason, None);
        assert_eq!(jobs["13"].node, None);
        assert_eq!(jobs["13"].reason.as_deref(), Some("Resources"));
        assert!(jobs["13"].state.is_pending() && jobs["13"].state.is_active());
    }

    #[test]
    fn scontrol_gives_state_exit_code_and_node() {
        let out = "JobId=7 JobName=jw-x UserId=root(0) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=3:0 NodeList=n1\n";
        let e = parse_scontrol(out).expect("parsed");
        assert_eq!(e.state.as_str(), "FAILED");
        assert_eq!(e.exit_code.as_deref(), Some("3:0"));
        assert_eq!(e.node.as_deref(), Some("n1"));
        assert_eq!(e.name, "jw-x");
        assert!(!e.state.is_active());
        assert!(parse_scontrol("slurm_load_jobs error: Invalid job id specified").is_none());
    }

    #[test]
    fn sbatch_gets_the_job_s_name_output_and_a_time_limit_in_whole_minutes() {
        let id = JobId::generate();
        let env = Vec::new();
        let argv = vec!["codex".to_owned(), "exec".into()];
        let s = Submission {
            job: &id,
            dir: Path::new("/shared/jw/x"),
            cwd: Path::new("/srv/app"),
            argv: &argv,
            env: &env,
            time_limit: Duration::from_secs(61),
        };
        let o = SlurmOptions {
            partition: Some("debug".into()),
            memory: Some("8G".into()),
            sbatch_args: vec!["--qos=high".into()],
            ..SlurmOptions::default()
        };
        let args = sbatch_args(&s, &o);
        assert!(args.contains(&format!("--job-name=jw-{id}")));
        assert!(args.contains(&"--time=2".to_owned()));
        assert!(args.contains(&"--output=/shared/jw/x/slurm.out".to_owned()));
        assert!(args.contains(&"--mem=8G".to_owned()));
        let script = args
            .iter()
            .position(|a| a == "/shared/jw/x/slurm.sh")
            .expect("script");
        assert_eq!(&args[script + 1..], ["codex", "exec"]);
        assert!(args[..script].contains(&"--qos=high".to_owned()));
    }
}
