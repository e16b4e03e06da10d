//! One file per subcommand. This is the CLI edge: it reads the process
//! environment, installs signal handlers, prints, and maps results to exit
//! codes (0 success, 1 a clean "no", 2 error). Output formatting lives here
//! only.

mod abort;
mod config;
mod daemon;
mod gc;
mod history;
mod monitor;
mod output;
mod status;
mod submit;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::config::{Config, Env};
use crate::layout::Layout;

/// Exit status for a clean "no": not found, nothing matched.
pub const EXIT_NO: u8 = 1;

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Daemon => daemon::run(&cli.global),
        Command::Submit(args) => submit::run(&cli.global, &args),
        Command::Status(args) => status::run(&cli.global, &args),
        Command::Abort(args) => abort::run(&cli.global, &args),
        Command::Config(cmd) => config::run(&cli.global, &cmd),
        Command::Monitor(args) => monitor::run(&cli.global, &args),
        Command::History(cmd) => history::run(&cli.global, &cmd),
        Command::Gc(args) => gc::run(&cli.global, &args),
    }
}

/// The validated config and the layout of the root it selects.
fn load(global: &crate::cli::GlobalArgs) -> anyhow::Result<(Config, Layout)> {
    let env = Env::from_process();
    let config = crate::config::load(global, &env)?;
    let root = crate::config::resolve_root(global, &env, &config)?;
    Ok((config, Layout::new(root)))
}
