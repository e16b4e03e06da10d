//! `jobwarden monitor <job>` (hidden): one job's supervisor, started by the
//! daemon. Reads the daemon's framed config text on stdin, then runs on a
//! current-thread runtime (required by the parent-death signal, see
//! `monitor::spawn`).
//!
//! `jobwarden monitor --spare`: the same, started before its job exists so
//! that exec, config and runtime are off the claim path. After the config
//! it reads one line, the job's id, and becomes that job's monitor; the
//! end of stdin ends it unused. Its command line names no job, so it is
//! proven to be a job's monitor by the lock it holds (see `procfs.rs`).

use std::io::BufRead;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{GlobalArgs, MonitorArgs};
use crate::config::{self, ConfigSource, Env};
use crate::job::JobId;
use crate::layout::Layout;
use crate::monitor::{self, EXIT_ALREADY_SUPERVISED, EXIT_NO_STORAGE, Outcome};

pub fn run(global: &GlobalArgs, args: &MonitorArgs) -> anyhow::Result<ExitCode> {
    // A bug must not leave a monitor hanging on a full stderr (the default
    // hook's direct write): it exits, and the daemon, seeing its monitor
    // gone before the job ended, kills what is left of the job and ends it
    // `interrupted`, requeued as `max_interrupts` says.
    crate::logging::exit_on_panic(
        "the job's monitor",
        "exiting; the daemon kills what is left of the job and ends it interrupted",
    );
    // Without the daemon's complete config the job is left untouched: the
    // daemon (or the next one) sees this monitor exit and deals with it.
    let mut stdin = std::io::stdin().lock();
    let text = config::read_handover(&mut stdin).map_err(anyhow::Error::msg)?;
    let source = if text.is_empty() {
        ConfigSource::BuiltIn
    } else {
        ConfigSource::Inherited
    };
    let config = config::parse(&text, source)?;
    let root = config::resolve_root(&super::choices(global), &Env::from_process(), &config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    crate::cgroup::warm();
    // The pages freed by start-up (argument parsing, the config's text and
    // tables): a monitor lives as long as its job, and every running job
    // has one.
    crate::procfs::release_free_memory();
    let job = match &args.job {
        Some(job) => job.clone(),
        // A spare: ready before its job exists, it waits for the id. The
        // end of stdin (the daemon retired it, or is gone) ends it unused.
        None => match spare_job(&mut stdin)? {
            Some(job) => job,
            None => return Ok(ExitCode::SUCCESS),
        },
    };
    drop(stdin);
    let id = JobId::parse(&job).map_err(anyhow::Error::msg)?;
    // Everything this monitor logs is about one job: one span says which.
    let span = tracing::info_span!("job", id = %id);
    let outcome = runtime.block_on(tracing::Instrument::instrument(
        monitor::run(Layout::new(root), &config, id.clone()),
        span,
    ));
    // The job is over and recorded: no blocking thread is worth joining.
    runtime.shutdown_background();
    let outcome = outcome?;
    Ok(match outcome {
        Outcome::Finished(_) => {
            crate::fault::pause("monitor-exit");
            ExitCode::SUCCESS
        }
        Outcome::AlreadySupervised => {
            tracing::info!(job = %id, "another monitor already supervises this job");
            ExitCode::from(EXIT_ALREADY_SUPERVISED as u8)
        }
        Outcome::NoStorage(_) => ExitCode::from(EXIT_NO_STORAGE as u8),
    })
}

/// Longest line a spare reads for its job's id.
const JOB_LINE_MAX: u64 = 1024;

/// The job id a spare is handed: one line after the config frame; `None`
/// at the end of stdin.
fn spare_job(stdin: &mut impl BufRead) -> anyhow::Result<Option<String>> {
    let mut line = String::new();
    std::io::Read::take(stdin, JOB_LINE_MAX)
        .read_line(&mut line)
        .context("reading the job id from stdin")?;
    Ok(line
        .strip_suffix('\n')
        .filter(|id| !id.is_empty())
        .map(str::to_owned))
}
