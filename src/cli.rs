//! Command-line types (clap derive) and nothing else: parsing only, no behaviour.
//! Each subcommand's behaviour lives in `commands/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// jobwarden: claims prompt files from an inbox and runs each as a monitored job.
#[derive(Debug, Parser)]
#[command(name = "jobwarden", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand accepts.
#[derive(Debug, Args, Clone, Default)]
pub struct GlobalArgs {
    /// State directory (inbox/, runs/, archive/). Overrides JOBWARDEN_HOME and the config's `root`.
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Config file. Overrides JOBWARDEN_CONFIG and the default locations.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground: watch the inbox, claim prompts, start jobs.
    Daemon,

    /// Ask jobs to stop by writing their ABORT marker.
    Abort(AbortArgs),

    /// Validate or print the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),

    /// Supervise one job (started by the daemon; not for interactive use).
    #[command(hide = true)]
    Monitor(MonitorArgs),
}

#[derive(Debug, Args)]
pub struct AbortArgs {
    /// Job ids to abort.
    #[arg(required = true, value_name = "JOB")]
    pub jobs: Vec<String>,

    /// Why the job is being aborted; stored in the marker and the job record.
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration; exit 0 when valid, 2 with the fault named otherwise.
    Check,
    /// Print the effective configuration (defaults filled in) and where it came from.
    Show,
}

#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// The job to supervise; its record must exist under runs/.
    pub job: String,
}
