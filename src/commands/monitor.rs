//! `jobwarden monitor <job>` (hidden): one job's supervisor, started by the
//! daemon. Reads the daemon's framed config text on stdin, then runs on a
//! current-thread runtime (required by the parent-death signal, see
//! `monitor::spawn`).
//!
//! `jobwarden monitor --spare`: the same, started before its job exists so
//! that exec, config and runtime are off the claim path. After the config
//! it reads one line, the job's id, and becomes that job's monitor; when
//! the job is over it says so on stdout and waits for the next id (see
//! `handover.rs`); the end of stdin ends it. Its command line
//! names no job, so it is proven to be a job's monitor by the lock it
//! holds (see `procfs.rs`).

use std::io::BufRead;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{GlobalArgs, MonitorArgs};
use jobwarden_engine::handover::{self, EXIT_ALREADY_SUPERVISED, EXIT_NO_STORAGE};
use jobwarden_engine::terminal;
use jobwarden_model::config::{self, ConfigSource, Env};
use jobwarden_model::job::JobId;
use jobwarden_model::layout::Layout;
use jobwarden_monitor::{self as monitor, Outcome};

pub fn run(global: &GlobalArgs, args: &MonitorArgs) -> anyhow::Result<ExitCode> {
    // A bug must not leave a monitor hanging on a full stderr (the default
    // hook's direct write): it exits, and the daemon, seeing its monitor
    // gone before the job ended, kills what is left of the job and ends it
    // `interrupted`, requeued as `max_interrupts` says.
    jobwarden_sys::logging::exit_on_panic(
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
    jobwarden_sys::cgroup::warm();
    // The pages freed by start-up (argument parsing, the config's text and
    // tables): a monitor lives as long as its job, and every running job
    // has one.
    jobwarden_sys::memory::release_free_memory();
    let mut job = match &args.job {
        Some(job) => job.clone(),
        // A spare: ready before its job exists, it waits for the id. The
        // end of stdin (the daemon retired it, or is gone) ends it unused.
        None => match next_job(&mut stdin)? {
            Some(job) => job,
            None => return Ok(ExitCode::SUCCESS),
        },
    };
    let layout = Layout::new(root);
    // Only a monitor that reports to a daemon hands its ends over.
    let hand_over = args.job.is_none();
    let code = loop {
        let id = JobId::parse(&job).map_err(anyhow::Error::msg)?;
        // Everything this monitor logs about a job names it: one span says which.
        let span = tracing::info_span!("job", id = %id);
        let outcome = runtime.block_on(tracing::Instrument::instrument(
            monitor::run(layout.clone(), &config, id.clone(), hand_over),
            span,
        ))?;
        let handed = match outcome {
            Outcome::Finished(_, handed) => {
                jobwarden_sys::fault::pause("monitor-exit");
                handed
            }
            Outcome::AlreadySupervised => {
                tracing::info!(job = %id, "another monitor already supervises this job");
                break ExitCode::from(EXIT_ALREADY_SUPERVISED as u8);
            }
            Outcome::NoStorage(_) => break ExitCode::from(EXIT_NO_STORAGE as u8),
        };
        if !hand_over {
            break ExitCode::SUCCESS; // started for this one job
        }
        let (line, handed) = match handed {
            Some(h) => match handover::handed_line(&job, &h) {
                Some(line) => (line, Some(h)),
                None => {
                    // Too long to hand over: recorded here, before the report.
                    terminal::complete_handed(&layout, &config, &id, &h);
                    (handover::ended_line(&job), None)
                }
            },
            None => (handover::ended_line(&job), None),
        };
        if !handover::report(&mut std::io::stdout().lock(), &line) {
            // Nobody listens: the daemon is gone. Finish alone, and leave.
            if let Some(handed) = &handed {
                terminal::complete_handed(&layout, &config, &id, handed);
            }
            break ExitCode::SUCCESS;
        }
        jobwarden_sys::memory::release_free_memory();
        match next_job(&mut stdin)? {
            Some(next) => job = next,
            None => break ExitCode::SUCCESS,
        }
    };
    // The last job is over and recorded: no blocking thread is worth joining.
    runtime.shutdown_background();
    Ok(code)
}

/// The next job's id from the daemon; `None` at the end of stdin.
fn next_job(stdin: &mut impl BufRead) -> anyhow::Result<Option<String>> {
    handover::next_job(stdin).context("reading the job id from stdin")
}
