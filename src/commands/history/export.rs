//! `jobwarden history export` (being written).

use std::process::ExitCode;

use crate::cli::{GlobalArgs, HistoryExportArgs};

pub fn run(_global: &GlobalArgs, _args: &HistoryExportArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("history export is not available yet")
}
