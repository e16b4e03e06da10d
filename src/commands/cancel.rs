//! `jobwarden abort` on what has not started: it cancels it
//! ([`jobwarden_engine::cancel`]).
//!
//! - A prompt waiting in the inbox is claimed here and ended `cancelled`
//!   at once, with or without a daemon. If the daemon claims it first,
//!   the job it made is found in the job index and gets its ABORT marker,
//!   and `abort` waits (bounded) for that job to end, so that once it
//!   returns 0 the prompt's command never starts.
//! - A queued job gets its ABORT marker, and `abort` waits (bounded) for
//!   it to end; with no daemon running, nothing would see the
//!   marker before the next start, so the job is ended here.

use std::time::{Duration, Instant};

use super::abort::Marking;
use super::output::{final_state, prompt_label};
use jobwarden_engine::cancel::{self, Canceller, WaitingCancelled};
use jobwarden_ledger::Ledger;
use jobwarden_model::config::Config;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::{Layout, PromptName};

/// Beyond `abort_grace`, how long such a job is given to end, and how long
/// a queued job marked is given to end.
pub(super) const END_PATIENCE: Duration = Duration::from_secs(10);
/// How often both look again.
const POLL: Duration = Duration::from_millis(20);

/// What cancelling needs: the root, its config, and the ledger to write
/// the end to (opened, created if missing, when first needed).
pub(super) struct Context<'a> {
    pub layout: &'a Layout,
    pub config: &'a Config,
    pub reason: Option<&'a str>,
    ledger: Option<Option<Ledger>>,
}

impl<'a> Context<'a> {
    pub fn new(layout: &'a Layout, config: &'a Config, reason: Option<&'a str>) -> Self {
        Context {
            layout,
            config,
            reason,
            ledger: None,
        }
    }

    /// The ledger, for writing. Without one the end is still recorded in
    /// the job's record, and the daemon's next start backfills the row.
    fn ledger(&mut self) -> Option<&mut Ledger> {
        let layout = self.layout;
        self.ledger
            .get_or_insert_with(|| match Ledger::open(&layout.ledger()) {
                Ok(l) => Some(l),
                Err(e) => {
                    jobwarden_sys::logging::line(format_args!(
                        "jobwarden: warning: {e}; the end is recorded in the job's record and reaches the ledger at the daemon's next start"
                    ));
                    None
                }
            })
            .as_mut()
    }

    fn canceller<'s>(&'s mut self, host: &'s str) -> Canceller<'s> {
        let (layout, config) = (self.layout, self.config);
        Canceller {
            layout,
            config,
            host,
            ledger: self.ledger(),
            view_owed: false,
        }
    }
}

/// Cancel the prompt waiting as `prompt` (`before`: its newest job when it
/// was found waiting): the job it became, and what was done.
pub(super) fn waiting(
    cx: &mut Context<'_>,
    prompt: &PromptName,
    before: Option<&str>,
) -> anyhow::Result<(Option<JobId>, Marking)> {
    let (layout, config, reason) = (cx.layout, cx.config, cx.reason);
    let done =
        cancel::cancel_waiting_by_hand(layout, config, cx.ledger(), prompt, before, reason, None)?;
    let (rec, text) = match done {
        WaitingCancelled::Ended(rec) => {
            let text = format!(
                "{prompt}: cancelled before it started (it was waiting in the inbox), as job {}; prompt kept at {}",
                rec.job_id,
                rec.archive_path.as_deref().unwrap_or("?")
            );
            (rec, text)
        }
        WaitingCancelled::Rejected(rec) => {
            let text = format!(
                "{prompt}: claimed to cancel it, and {} as job {}",
                final_state(&rec),
                rec.job_id
            );
            (rec, text)
        }
        WaitingCancelled::ClaimedAs(id) => return claimed_meanwhile(cx, prompt, id),
        WaitingCancelled::Gone => {
            let text = format!(
                "{prompt}: no longer waiting in the inbox, and no job of it appeared; nothing was cancelled"
            );
            return Ok((None, Marking::Missing(text)));
        }
    };
    Ok((Some(rec.job_id), Marking::Marked(text)))
}

/// The prompt was claimed by another (the daemon) as job `id` before this
/// cancel could: abort that job, and wait for its end.
fn claimed_meanwhile(
    cx: &mut Context<'_>,
    prompt: &PromptName,
    id: JobId,
) -> anyhow::Result<(Option<JobId>, Marking)> {
    let marking = super::abort::mark(cx.layout, &id, cx.reason, false)?;
    let patience = cx.config.abort_grace + END_PATIENCE;
    let ended = wait_for_end(cx.layout, &id, patience);
    let said = |text: &str| match &ended {
        Some(rec) => format!(
            "{prompt}: claimed by the daemon meanwhile as job {id}, which ended {}",
            final_state(rec)
        ),
        None => format!("{prompt}: claimed by the daemon meanwhile; {text}"),
    };
    let marking = match marking {
        Marking::Marked(text) => Marking::Marked(said(&text)),
        Marking::AlreadyRequested(text) => Marking::AlreadyRequested(said(&text)),
        Marking::Ended(text) => Marking::Ended(said(&text)),
        other => other,
    };
    Ok((Some(id), marking))
}

/// Job `id`'s record once it is terminal, if it is within `patience`.
/// For a job marked while queued: once it ended (`cancelled` by whoever
/// holds it, or `aborted` if its monitor had passed its marker check
/// before the marker came), its command is not running and never starts.
pub(super) fn wait_for_end(layout: &Layout, id: &JobId, patience: Duration) -> Option<JobRecord> {
    wait_until_record(layout, id, patience, |rec| rec.state.is_terminal())
}

fn wait_until_record(
    layout: &Layout,
    id: &JobId,
    patience: Duration,
    done: impl Fn(&JobRecord) -> bool,
) -> Option<JobRecord> {
    let deadline = Instant::now() + patience;
    loop {
        match JobRecord::load_job(layout, id) {
            Ok(rec) if done(&rec) => return Some(rec),
            Err(_) => return None,
            Ok(_) if Instant::now() >= deadline => return None,
            Ok(_) => std::thread::sleep(POLL),
        }
    }
}

/// Cancel queued job `id` here if no daemon runs to see its marker;
/// `None` when the marker alone must ask (a daemon runs, or a monitor
/// took the job).
pub(super) fn queued_alone(cx: &mut Context<'_>, id: &JobId) -> anyhow::Result<Option<Marking>> {
    if cancel::daemon_running(cx.layout) != Some(false) {
        return Ok(None);
    }
    let Some(_turn) = cancel::take_turn(cx.layout, cancel::TURN_PATIENCE)? else {
        return Ok(None);
    };
    let host = jobwarden_sys::host::hostname();
    let reason = cx.reason;
    let Some((rec, _)) = cx.canceller(&host).cancel_queued_alone(id, reason)? else {
        return Ok(None);
    };
    Ok(Some(Marking::Marked(format!(
        "{id}: cancelled while queued (no daemon running) {}",
        prompt_label(&rec.project, &rec.name)
    ))))
}
