//! `jobwarden history list` (being written).

use std::process::ExitCode;

use crate::cli::{GlobalArgs, HistoryListArgs};

pub fn run(_global: &GlobalArgs, _args: &HistoryListArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("history list is not available yet")
}
