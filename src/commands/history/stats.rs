//! `jobwarden history stats` (being written).

use std::process::ExitCode;

use crate::cli::{GlobalArgs, HistoryStatsArgs};

pub fn run(_global: &GlobalArgs, _args: &HistoryStatsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("history stats is not available yet")
}
