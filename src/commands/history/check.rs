//! `jobwarden history check <project> <name> [--cooldown SECS]`: the script
//! interface kept from the tool jobwarden replaces. Exit 0 when the prompt
//! is in cooldown, 1 when it is eligible, 2 on error; nothing on stdout.

use std::process::ExitCode;
use std::time::Duration;

use crate::cli::{GlobalArgs, HistoryCheckArgs};
use crate::clock::Timestamp;
use crate::layout;
use crate::ledger::Cooldowns;

pub fn run(global: &GlobalArgs, args: &HistoryCheckArgs) -> anyhow::Result<ExitCode> {
    layout::validate_project(&args.project)
        .map_err(|e| anyhow::anyhow!("project {:?}: {e}", args.project))?;
    layout::validate_segment(&args.name)
        .map_err(|e| anyhow::anyhow!("name {:?} {e}", args.name))?;
    let (config, _, ledger) = super::open(global)?;
    let profile = config.default_profile();
    let cooldowns = match args.cooldown {
        Some(secs) => Cooldowns {
            failure: Duration::from_secs(secs),
            rate_limited: Duration::from_secs(secs),
        },
        None => Cooldowns {
            failure: profile.cooldown,
            rate_limited: profile.rate_limit.cooldown,
        },
    };
    let until = ledger.cooldown_until(
        &args.project,
        &args.name,
        cooldowns,
        Timestamp::now().epoch_ms(),
    )?;
    Ok(ExitCode::from(if until.is_some() {
        0
    } else {
        crate::commands::EXIT_NO
    }))
}
