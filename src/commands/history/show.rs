//! `jobwarden history show` (being written).

use std::process::ExitCode;

use crate::cli::{GlobalArgs, HistoryShowArgs};

pub fn run(_global: &GlobalArgs, _args: &HistoryShowArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("history show is not available yet")
}
