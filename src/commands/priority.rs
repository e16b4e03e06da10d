//! `jobwarden priority <job> <n>`: change a queued job's priority (-1000 to
//! 1000, higher first). The request goes where the job is scheduled
//! ([`jobwarden_model::priority`]): with a daemon running, its
//! `runs/<id>/PRIORITY`, which the daemon takes at once (this command
//! waits for that, a few seconds at most); without one, the record is
//! changed here, under the claim turn so that no starting daemon sees it
//! half-done. The `priority` event records it either way. A job that is
//! not queued is refused (exit 1: a clean "no").

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::No;
use super::output::print_line;
use super::queue_view::daemon_alive;
use crate::cli::{GlobalArgs, PriorityArgs};
use jobwarden_model::events::EventLog;
use jobwarden_model::job::JobRecord;
use jobwarden_model::priority;

/// How long the command waits for the daemon to take its request.
const PATIENCE: Duration = Duration::from_secs(10);

pub fn run(global: &GlobalArgs, args: &PriorityArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    super::root_must_exist(&layout)?;
    let ledger = super::open_ledger(&layout)?;
    let id = super::resolve_job(&layout, ledger.as_ref(), &args.job)?;
    let rec = JobRecord::load_job(&layout, &id)?;
    if let Some(why) = priority::not_queued(&rec) {
        return Err(No(why).into());
    }
    let from = rec.priority;
    priority::request(&layout, &id, args.priority, &super::operator())
        .map_err(|e| anyhow::anyhow!("priority: {e}"))?;
    if daemon_alive(&layout, None) {
        let deadline = Instant::now() + PATIENCE;
        while std::fs::symlink_metadata(layout.priority_request(&id)).is_ok() {
            if Instant::now() >= deadline {
                print_line(format_args!(
                    "asked for priority {} of {id}; the daemon has not taken it yet (it does at its next tick)",
                    args.priority
                ))?;
                return Ok(ExitCode::SUCCESS);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    } else {
        let _turn =
            jobwarden_engine::cancel::take_turn(&layout, jobwarden_engine::cancel::TURN_PATIENCE)?;
        let mut rec = JobRecord::load_job(&layout, &id)?;
        let mut events =
            EventLog::open(layout.root(), &layout.events(&id), config.events_for(&rec));
        priority::take(&layout, &mut rec, &mut events)?;
    }
    let now = JobRecord::load_job(&layout, &id)?;
    if let Some(why) = priority::not_queued(&now).filter(|_| now.priority == from) {
        return Err(No(format!("{why}; its priority stays {from}")).into());
    }
    if now.priority == from {
        print_line(format_args!("priority of {id} is {from} already"))?;
    } else {
        print_line(format_args!("priority of {id}: {from} → {}", now.priority))?;
    }
    Ok(ExitCode::SUCCESS)
}
