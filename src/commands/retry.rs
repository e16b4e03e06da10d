//! `jobwarden retry <job> [--now]`: put the prompt of a job that has ended
//! back in the inbox for another attempt ([`jobwarden_engine::retry::by_hand`] says
//! how). A job that has not ended, or a prompt of that name already
//! waiting or running, is refused (exit 2); a job another retry already
//! put back is a clean "no" (exit 1).

use std::process::ExitCode;

use super::output::print_line;
use crate::cli::{GlobalArgs, RetryArgs};
use jobwarden_engine::retry::by_hand;

pub fn run(global: &GlobalArgs, args: &RetryArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    super::root_must_exist(&layout)?;
    let ledger = super::open_ledger(&layout)?;
    let id = super::resolve_job(&layout, ledger.as_ref(), &args.job)?;
    let by = super::operator();
    let (rec, retried) = by_hand::retry(&layout, &config, ledger.as_ref(), &id, args.now, &by)?;
    print_line(format_args!(
        "{}",
        retried.say(&rec.prompt_name().to_string(), &id)
    ))?;
    Ok(ExitCode::SUCCESS)
}
