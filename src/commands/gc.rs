//! `jobwarden gc` (being written).

use std::process::ExitCode;

use crate::cli::{GcArgs, GlobalArgs};

pub fn run(_global: &GlobalArgs, _args: &GcArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("gc is not available yet")
}
