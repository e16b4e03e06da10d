//! `jobwarden logs` (being written).

use std::process::ExitCode;

use crate::cli::GlobalArgs;

pub fn run<A>(_global: &GlobalArgs, _args: &A) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`jobwarden logs` is not available yet")
}
