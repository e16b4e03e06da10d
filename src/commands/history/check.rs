//! `jobwarden history check <project> <name> [--cooldown SECS]`: the script
//! interface kept from the tool jobwarden replaces. Exit 0 when the prompt
//! is in cooldown, 1 when it is eligible, 2 on error; nothing on stdout.
//!
//! `<project>` is an inbox project, or an absolute path (a script's
//! `${PROJECT_DIR}`) kept as its own key. Without `--cooldown` the answer
//! is the daemon's: the cooldowns of the profile the last run used (the
//! default profile's when that one is gone), and a `retry --now` waiting
//! for the prompt lifts it.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::{GlobalArgs, HistoryCheckArgs};
use jobwarden_engine::retry;
use jobwarden_ledger::Cooldowns;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::{self, PromptName};
use jobwarden_sys::clock::Timestamp;

pub fn run(global: &GlobalArgs, args: &HistoryCheckArgs) -> anyhow::Result<ExitCode> {
    layout::validate_history_project(&args.project)
        .map_err(|e| anyhow::anyhow!("project {:?}: {e}", args.project))?;
    layout::validate_segment(&args.name)
        .map_err(|e| anyhow::anyhow!("name {:?} {e}", args.name))?;
    let (config, layout, ledger) = super::open(global)?;
    let now = Timestamp::now().epoch_ms();
    let last = ledger.last_run(&args.project, &args.name)?;
    let in_cooldown = match (args.cooldown, last) {
        (_, None) => false,
        (Some(secs), Some(last)) => {
            let given = Cooldowns {
                failure: Duration::from_secs(secs),
                rate_limited: Duration::from_secs(secs),
            };
            last.cooldown_end(given, now).is_some()
        }
        (None, Some(last)) => {
            let request = (!layout::is_external_project(&args.project))
                .then(|| JobId::parse(&last.id).ok())
                .flatten()
                .and_then(|id| {
                    let prompt = PromptName {
                        project: args.project.clone(),
                        name: args.name.clone(),
                    };
                    retry::request::pending_for(&layout, &prompt, &id)
                });
            retry::deferral(&config, Some(&last), request.as_ref(), now).is_some()
        }
    };
    Ok(ExitCode::from(if in_cooldown {
        0
    } else {
        crate::commands::EXIT_NO
    }))
}
