//! `jobwarden history who-touched` (being written).

use std::process::ExitCode;

use crate::cli::{GlobalArgs, WhoTouchedArgs};

pub fn run(_global: &GlobalArgs, _args: &WhoTouchedArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("history who-touched is not available yet")
}
