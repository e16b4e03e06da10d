//! Command-line types (clap derive) and nothing else: parsing only, no behaviour.
//! Each subcommand's behaviour lives in `commands/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// jobwarden: claims prompt files from an inbox and runs each as a monitored job.
#[derive(Debug, Parser)]
#[command(
    name = "jobwarden",
    version,
    about,
    propagate_version = true,
    after_long_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// The end of `jobwarden --help` (and of the manual page).
const AFTER_HELP: &str = "\
Exit status: 0 success; 1 a clean \"no\" (not found, nothing matched); 2 an error. \
Commands whose status says more (history check, submit --wait) say so in their help.

Output: data on stdout; errors, warnings, progress and the log on stderr.

Environment: JOBWARDEN_HOME (the root), JOBWARDEN_CONFIG (the config file), \
JOBWARDEN_LOG_FORMAT (text or json), RUST_LOG (what the log shows), NO_COLOR.

Files: the config is --config, else JOBWARDEN_CONFIG, else \
$XDG_CONFIG_HOME/jobwarden/config.toml (~/.config/jobwarden/config.toml), else \
/etc/jobwarden/config.toml, else built-in defaults. The root is --root, else \
JOBWARDEN_HOME, else the config's root, else /var/lib/jobwarden as root and \
$XDG_DATA_HOME/jobwarden (~/.local/share/jobwarden) otherwise.";

/// The heading the flags every subcommand accepts are listed under in
/// `--help`, after the command's own.
pub const GLOBAL_HEADING: &str = "Global options";

/// Flags every subcommand accepts.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = GLOBAL_HEADING)]
pub struct GlobalArgs {
    /// State directory (inbox/, runs/, archive/). Overrides JOBWARDEN_HOME and the config's `root`.
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Config file. Overrides JOBWARDEN_CONFIG and the default locations.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// How the log on stderr is written: human lines, or one JSON object
    /// per event (for log collectors). RUST_LOG filters it.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        value_name = "FORMAT",
        env = "JOBWARDEN_LOG_FORMAT"
    )]
    pub log_format: jobwarden_sys::logging::LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground: watch the inbox, claim prompts, start jobs.
    Daemon,

    /// Drop a prompt into the inbox atomically and print its job id.
    Submit(SubmitArgs),

    /// Is the daemon alive, and does the root accept writes? Exit 3 when no daemon runs.
    Status(StatusArgs),

    /// List prompts waiting in the inbox (waiting, deferred) and jobs, newest first.
    #[command(after_help = jobwarden_ledger::Outcome::vocabulary())]
    Jobs(JobsArgs),

    /// Show one job: its record, files, ledger row and the end of its log.
    Show(ShowArgs),

    /// Print a job's log; `-f` follows it until the job ends.
    ///
    /// On a pipe or a file the log is printed byte for byte; on a terminal,
    /// control characters a job wrote are shown (`^[`), never obeyed.
    Logs(LogsArgs),

    /// Print a job's lifecycle events.
    Events(EventsArgs),

    /// Block until jobs have ended; exit 0 only if all succeeded (codes in docs/exit-codes.md).
    Wait(WaitArgs),

    /// Ask jobs to stop by writing their ABORT marker; cancel what has not started.
    Abort(AbortArgs),

    /// Put a finished job's prompt back in the inbox for another attempt.
    Retry(RetryArgs),

    /// Start no new job (the whole daemon, one profile or one project) until resumed;
    /// prompts are still claimed and queued, running jobs go on.
    Pause(PauseArgs),

    /// Lift a pause: queued jobs start again.
    Resume(ResumeArgs),

    /// Acknowledge failures that need attention, so that `status` stops reporting them.
    Ack(AckArgs),

    /// Change a queued job's priority (higher starts first); the queue follows at once.
    Priority(PriorityArgs),

    /// Set how many jobs run at once (the whole daemon, one profile or one
    /// project) without editing the config, or clear that; alone, list the limits.
    Limit(LimitArgs),

    /// Validate or print the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),

    /// Make the running daemon reload its config (SIGHUP) and say what
    /// changed, or every error that got it refused (exit 2); exit 1 when no
    /// daemon runs.
    Reload(ReloadArgs),

    /// Which route, profile and commands a prompt at a path would get (runs nothing).
    Route(RouteArgs),

    /// Query and maintain the execution-history ledger.
    #[command(subcommand)]
    History(HistoryCommand),

    /// Apply retention: prune old run folders, archived prompts and artifacts.
    Gc(GcArgs),

    /// Serve the local web page (its own process): status, jobs, a job's
    /// log live, abort, ack, pause, and /metrics, behind a token.
    Web(WebArgs),

    /// Print Prometheus metrics (text format), or write them atomically to a
    /// file for node_exporter's textfile collector.
    Metrics(MetricsArgs),

    /// The `[[notify]]` hooks: fire one by hand.
    #[command(subcommand)]
    Notify(NotifyCommand),

    /// Print a shell's completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// The script asks `jobwarden` (on PATH) at each Tab, so that it
    /// completes job ids (the short ids tables show) and prompt names of the
    /// root the line names, besides commands and flags. Load it from the
    /// shell's startup file, e.g. `source <(jobwarden completions bash)` in
    /// ~/.bashrc, `source <(jobwarden completions zsh)` in ~/.zshrc,
    /// `jobwarden completions fish | source` in fish's config; or install it
    /// where the shell looks (install.sh does).
    Completions(CompletionsArgs),

    /// Print the manual page (roff), or write one page per command to a folder.
    Man(ManArgs),

    /// Print the command-line reference in Markdown (docs/cli-reference.md).
    #[command(hide = true)]
    CliReference,

    /// Supervise one job (started by the daemon; not for interactive use).
    #[command(hide = true)]
    Monitor(MonitorArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write jobwarden.1 and a page per command (jobwarden-submit.1, ...)
    /// into this folder instead of printing jobwarden.1; prints the files written.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The prompt file, or `-` to read it from stdin.
    #[arg(value_name = "FILE|-")]
    pub file: PathBuf,

    /// Inbox folder to drop it into, `a/b` for a nested one (default: the top of the inbox).
    #[arg(long, default_value = "", hide_default_value = true)]
    pub project: String,

    /// The prompt's name (default: the file name without `.prompt.md` or `.md`; required with `-`).
    #[arg(long)]
    pub name: Option<String>,

    /// The job's id (default: the file's front-matter `job_id`, else a new UUIDv7).
    #[arg(long, value_name = "ID")]
    pub job_id: Option<String>,

    /// Run it on this profile (front matter `profile`).
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,

    /// Its place among queued jobs, -1000 to 1000, higher first (front matter `priority`).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<i32>,

    /// Its main command's timeout, e.g. 30m (front matter `timeout`).
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,

    /// Attempts in all, 1 to 100 (front matter `max_attempts`).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,

    /// Start only once this job ended `succeeded` (an id, an id prefix or
    /// project/name); repeat it to wait for several (front matter `after`).
    #[arg(long, value_name = "JOB")]
    pub after: Vec<String>,

    /// Not before this time: a local HH:MM (today, or tomorrow if past), a
    /// duration from now (2h) or an RFC 3339 time (front matter `not_before`,
    /// written as the instant it means now).
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,

    /// Wait until the job (and any retry of it) ends, saying each change on
    /// stderr; exit with its outcome's code (docs/exit-codes.md).
    #[arg(long)]
    pub wait: bool,

    /// Print one JSON object (`job_id`, `prompt_path`, `project`, `name`; with --wait the end too).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RouteArgs {
    /// A prompt's path relative to inbox/ (`acme/api/main/fix.prompt.md`),
    /// or under the root's inbox/ as an absolute path; a folder means a prompt
    /// in it. A file name the daemon ignores (not `*.prompt.md`, like `fix.md`)
    /// is an error that says so and names the name it would need.
    #[arg(value_name = "PATH")]
    pub path: String,

    /// Print one JSON object (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print one JSON object (shape in docs/status-json.md).
    #[arg(long)]
    pub json: bool,

    /// Draw the status again in place every second on a terminal, until Ctrl-C.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
}

#[derive(Debug, Args)]
pub struct AbortArgs {
    /// Jobs to abort: ids, unique prefixes (4+ characters) of ids or short ids, or
    /// prompt names (project/name: its job while one is live, else the prompt
    /// waiting in the inbox, which is cancelled; project/name.prompt.md: only the
    /// waiting file). A queued job or a waiting prompt ends `cancelled`.
    #[arg(
        value_name = "JOB",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub jobs: Vec<String>,

    /// Abort every job that has not ended (queued, preparing, running or publishing).
    #[arg(long)]
    pub all: bool,

    /// Why the job is being aborted; stored in the marker and the job record.
    #[arg(long)]
    pub reason: Option<String>,

    /// Return only when each job has ended, printing each final state.
    #[arg(long)]
    pub wait: bool,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Jobs to wait for: ids, unique prefixes (4+ characters) of ids or short ids, or
    /// prompt names (project/name: its live job, else its newest).
    #[arg(
        value_name = "JOB",
        required_unless_present_any = ["project", "all"],
        conflicts_with = "all"
    )]
    pub jobs: Vec<String>,

    /// Also every job of this project that has not ended, or is claimed while
    /// waiting, and its prompts waiting in the inbox (repeatable). The jobs
    /// of the project's current batch that ended before the wait count too,
    /// each prompt by its newest (docs/cli-json.md).
    #[arg(long, value_name = "P")]
    pub project: Vec<String>,

    /// Until nothing is waiting: no job queued or running, no prompt in the
    /// inbox that can be claimed (prompts in cooldown are listed, not waited for).
    #[arg(long, conflicts_with = "project")]
    pub all: bool,

    /// Give up after this long (`30s`, `2h`), with exit code 5.
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub timeout: Option<std::time::Duration>,

    /// Print one JSON object at the end (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}

/// How the `<job>` argument reads, for every command that takes one.
pub const JOB_ARG_HELP: &str = "A job id, a unique prefix (4+ characters) of an id or of a short id (as tables show it), or a prompt's project/name or name, meaning its live job, else its newest job (for history show: its newest execution)";

/// How the `<job>` argument reads for the commands that also take a prompt
/// waiting in the inbox (`show`, `logs`, `events`).
pub const TARGET_ARG_HELP: &str = "A job id, a unique prefix (4+ characters) of an id or of a short id (as tables show it), or a prompt name (project/name): its live job, else the prompt waiting in the inbox (project/name.prompt.md: only that), else its newest job";

#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Only rows in these states (repeatable, or comma-separated): job states, or
    /// `waiting` / `deferred` for prompts in the inbox that have no job yet.
    #[arg(long, value_name = "STATE", value_delimiter = ',')]
    pub state: Vec<String>,

    /// Only jobs of this project (prompt folder relative to inbox/).
    #[arg(long)]
    pub project: Option<String>,

    /// Only jobs of prompts with this name.
    #[arg(long)]
    pub name: Option<String>,

    /// Only jobs that ran under this profile. Prompts still waiting in the
    /// inbox are left out: their profile is chosen when they are claimed
    /// (`jobwarden route` says which it would be).
    #[arg(long)]
    pub profile: Option<String>,

    /// Only jobs claimed at or after WHEN: a duration ago (`2h`, `3d`), a date
    /// (`2026-11-25`, UTC) or an RFC 3339 time (`2026-11-25T10:00:00Z`, `…+02:00`).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,

    /// Only jobs claimed before WHEN (same forms as --since).
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,

    /// At most this many rows; 0 for all. When more match, stderr says how many.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub limit: u32,

    /// Print a JSON array (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,

    /// Draw the list again in place every second on a terminal, until Ctrl-C.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[arg(value_name = "JOB", help = TARGET_ARG_HELP)]
    pub job: String,

    /// Print one JSON object (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[arg(value_name = "JOB", help = TARGET_ARG_HELP)]
    pub job: String,

    /// Only the last N lines.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub tail: Option<u32>,

    /// Keep printing as the log grows; end when the job ends, printing its
    /// final state on stderr and exiting with its outcome's code.
    #[arg(short, long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[arg(value_name = "JOB", help = TARGET_ARG_HELP)]
    pub job: String,

    /// Only the last N events (after the other filters).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub last: Option<u32>,

    /// Only events with these ops (repeatable, or comma-separated).
    #[arg(
        long,
        value_name = "OP",
        value_delimiter = ',',
        value_parser = clap::builder::PossibleValuesParser::new(
            jobwarden_model::events::Op::ALL.iter().map(|op| op.as_str())
        )
    )]
    pub op: Vec<String>,

    /// Only the event with this sequence number (exit 1, naming the numbers there are, if it
    /// has none).
    #[arg(long, value_name = "N", conflicts_with_all = ["from_seq", "last", "op", "inputs_only"])]
    pub seq: Option<u64>,

    /// Only events from this sequence number on.
    #[arg(long, value_name = "N")]
    pub from_seq: Option<u64>,

    /// Only what was done to the job from outside: the drop that was claimed, abort and cancel,
    /// retry, acknowledgement, a priority changed, pause and resume, what the reconcile found.
    #[arg(long)]
    pub inputs_only: bool,

    /// Counts per op and the time span instead of the events.
    #[arg(long)]
    pub summary: bool,

    /// Print one JSON object (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    #[arg(value_name = "JOB", help = JOB_ARG_HELP)]
    pub job: String,

    /// Start it without waiting for the prompt's cooldown (after a failure,
    /// timeout or rate limit).
    #[arg(long)]
    pub now: bool,
}

#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// How long to wait for the daemon to report the reload's result.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,

    /// Print one JSON object (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}

/// What a pause or resume is about: no flag means the whole daemon.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub struct PauseScopeArgs {
    /// Only the jobs of this profile.
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,

    /// Only the jobs of prompts in this inbox folder (`acme/api`; not its sub-folders).
    #[arg(long, value_name = "PROJECT")]
    pub project: Option<String>,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub scope: PauseScopeArgs,

    /// Why; kept in the marker and shown by `status` and `jobs`.
    #[arg(long)]
    pub reason: Option<String>,

    /// Print one JSON object (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub scope: PauseScopeArgs,

    /// Lift every pause: the daemon's, and every profile's and project's.
    #[arg(long, conflicts_with_all = ["profile", "project"])]
    pub all: bool,

    /// Print one JSON object (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LimitArgs {
    #[command(flatten)]
    pub scope: PauseScopeArgs,

    /// At most this many at once, 1 to 4096 (in place of the config's
    /// `max_jobs`; a project has none in the config).
    #[arg(value_name = "N", conflicts_with = "clear")]
    pub max_jobs: Option<usize>,

    /// Give the config's value back (remove the limit set by hand).
    #[arg(long)]
    pub clear: bool,
}

#[derive(Debug, Args)]
pub struct PriorityArgs {
    /// The queued job: an id, a unique prefix (4+ characters) of an id or short id,
    /// or a prompt name (project/name: its live job, else its newest).
    #[arg(value_name = "JOB")]
    pub job: String,

    /// Its new priority, -1000 to 1000 (0 is the default; higher starts first).
    #[arg(value_name = "N", allow_negative_numbers = true)]
    pub priority: i32,
}

#[derive(Debug, Args)]
pub struct AckArgs {
    /// Jobs whose failure to acknowledge: ids, unique prefixes (4+ characters) of ids or
    /// short ids, or prompt names (project/name: its last run, even while a retry of
    /// it waits or runs). Each must be its prompt's last run.
    #[arg(
        value_name = "JOB",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub jobs: Vec<String>,

    /// Acknowledge every prompt that needs attention now.
    #[arg(long)]
    pub all: bool,

    /// Print one JSON object (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration: exit 0 when valid (warnings on stderr about
    /// programs not on PATH and missing workdirs), 2 with every problem named.
    Check(ConfigCheckArgs),
    /// Print the effective configuration (defaults filled in) and where it came from.
    Show,
}

#[derive(Debug, Args)]
pub struct ConfigCheckArgs {
    /// Print one JSON object: problems, warnings and notes (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// The job to supervise; its record must exist under runs/.
    #[arg(required_unless_present = "spare")]
    pub job: Option<String>,
    /// Start ready, and take the job whose id follows the config on stdin.
    #[arg(long, conflicts_with = "job")]
    pub spare: bool,
}

#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address and port to serve on. One already in use is an error (exit
    /// 2) that names it; nothing is made under the root then.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    pub listen: std::net::SocketAddr,
    /// Serve on an address other than the loopback (anyone who can reach
    /// it and has the token can act on your jobs).
    #[arg(long)]
    pub allow_remote: bool,
    /// Print the page's address with its token (made if there is none) and
    /// exit.
    #[arg(long)]
    pub print_url: bool,
}

#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Write to this file (replaced atomically: a scraper never reads half
    /// of it) instead of stdout, e.g.
    /// /var/lib/node_exporter/textfile/jobwarden.prom.
    #[arg(long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Deliver a `test` notice by the hook named NAME once, now, and say how
    /// it went: exit 0 delivered, 4 failed (the reason on stderr), 1 no such
    /// hook.
    Test(NotifyTestArgs),
}

#[derive(Debug, Args)]
pub struct NotifyTestArgs {
    /// The hook's `name` in the config.
    pub name: String,
    /// Print the result as JSON (`hook`, `delivered`, `error`, `elapsed_ms`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Executions, newest first.
    #[command(after_help = jobwarden_ledger::Outcome::vocabulary())]
    List(HistoryListArgs),
    /// One execution with its artifacts and paths.
    Show(HistoryShowArgs),
    /// Lifetime counts by outcome, success rate and durations, per project (or prompt, or profile).
    Stats(HistoryStatsArgs),
    /// Exit 0 if a prompt is in cooldown, 1 if it is eligible, 2 on error; prints nothing.
    Check(HistoryCheckArgs),
    /// Record a run jobwarden did not supervise.
    Record(HistoryRecordArgs),
    /// Export executions as JSON.
    Export(HistoryExportArgs),
    /// Executions that ran on or changed a path.
    WhoTouched(WhoTouchedArgs),
    /// Compiler and linter diagnostics of executions: which produced a code and which later run
    /// got rid of it (--code), which files carry the most (--files), one execution's (--job);
    /// without these, the codes and files seen most.
    Diagnostics(HistoryDiagnosticsArgs),
    /// Backfill missing rows from runs/*/job.json (idempotent).
    Repair(RepairArgs),
}

#[derive(Debug, Args)]
pub struct HistoryListArgs {
    /// Only this project ("" for the top of the inbox).
    #[arg(long)]
    pub project: Option<String>,
    /// Only this prompt name.
    #[arg(long)]
    pub name: Option<String>,
    /// Only this outcome (success, failure, timeout, rate_limited, aborted, interrupted, rejected,
    /// cancelled, setup_failed).
    #[arg(long)]
    pub outcome: Option<String>,
    /// Only executions that finished at or after WHEN: a duration ago (`12h`), a date
    /// (`2026-11-25`, UTC) or an RFC 3339 time (`2026-11-25T10:00:00Z`, `…+02:00`).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only executions that finished before WHEN (same forms as --since).
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Only executions whose prompt text holds TEXT, case ignored (a plain substring, not a
    /// pattern). The ledger keeps the first 64 KiB of each prompt; rows recorded before it kept
    /// prompts, and `history record` rows, have none and never match.
    #[arg(long, value_name = "TEXT")]
    pub grep: Option<String>,
    /// At most this many rows; 0 for all. When more match, stderr says how many.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub limit: u32,
    /// Print a JSON array (shape in docs/history-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryDiagnosticsArgs {
    /// The executions whose output held this code (E0425, TS2304, no-unused-vars), newest first,
    /// each with the first later run that worked where it did (the same prompt, working folder or
    /// repository) whose output no longer did.
    #[arg(long, value_name = "CODE", conflicts_with_all = ["files", "job"])]
    pub code: Option<String>,
    /// The files diagnostics named most.
    #[arg(long, conflicts_with = "job")]
    pub files: bool,
    /// The diagnostics of one execution.
    #[arg(long, value_name = "JOB")]
    pub job: Option<String>,
    /// Only executions that finished at or after WHEN: a duration ago (`7d`), a date or an RFC
    /// 3339 time.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// At most this many rows.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Print JSON (shapes in docs/history-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryShowArgs {
    #[arg(value_name = "JOB", help = JOB_ARG_HELP)]
    pub job: String,
    /// Print the text of the prompt the execution ran (as the ledger keeps it: its first 64
    /// KiB) instead of the execution; exit 1 if the ledger has none for it.
    #[arg(long, conflicts_with = "json")]
    pub prompt: bool,
    /// Print one JSON object (shape in docs/history-json.md).
    #[arg(long)]
    pub json: bool,
}

/// `history stats --by`: what the counts are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsBy {
    /// The prompt's project.
    Project,
    /// The prompt itself (project/name).
    Prompt,
    /// The profile it ran under ("(none)" for rows without one).
    Profile,
}

impl StatsBy {
    /// The ledger's grouping of the same name.
    pub fn group(self) -> jobwarden_ledger::history::GroupBy {
        use jobwarden_ledger::history::GroupBy;
        match self {
            StatsBy::Project => GroupBy::Project,
            StatsBy::Prompt => GroupBy::Prompt,
            StatsBy::Profile => GroupBy::Profile,
        }
    }
}

#[derive(Debug, Args)]
pub struct HistoryStatsArgs {
    /// Only executions that finished at or after WHEN: a duration ago (`12h`), a date
    /// (`2026-11-25`, UTC) or an RFC 3339 time (`2026-11-25T10:00:00Z`, `…+02:00`).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only executions that finished before WHEN (same forms as --since).
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Only this project.
    #[arg(long)]
    pub project: Option<String>,
    /// Group the counts and rates by project, by prompt (project/name) or by profile.
    #[arg(long, value_enum, default_value_t = StatsBy::Project)]
    pub by: StatsBy,
    /// Print one JSON object (shape in docs/history-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryCheckArgs {
    /// The prompt's project ("" for the top of the inbox), or an absolute path (a script's
    /// project folder), kept as its own key as given.
    pub project: String,
    /// The prompt's name (without .prompt.md; for an absolute project, as the script names it).
    pub name: String,
    /// Cooldown in seconds for failure, timeout and rate_limited (default: the cooldowns of the
    /// profile its last run used, as the daemon decides).
    #[arg(long, value_name = "SECS")]
    pub cooldown: Option<u64>,
}

#[derive(Debug, Args)]
pub struct HistoryRecordArgs {
    /// The prompt's project ("" for the top of the inbox), or an absolute path (a script's
    /// project folder), kept as its own key as given.
    pub project: String,
    /// The prompt's name (without .prompt.md; for an absolute project, as the script names it).
    pub name: String,
    /// success, failure, timeout, rate_limited, aborted, interrupted, rejected, cancelled or
    /// setup_failed.
    pub outcome: String,
    /// The run's exit code.
    #[arg(long)]
    pub exit_code: Option<i32>,
    /// Which attempt at the prompt the run was (1 for the first).
    #[arg(long, default_value_t = 1)]
    pub attempt: u32,
    /// When the run started (a duration ago such as `90s`, a date or an RFC 3339 time); with
    /// it the row has a duration.
    #[arg(long, value_name = "WHEN")]
    pub started_at: Option<String>,
    /// When the run finished (same forms; default: now). The row is the prompt's newest
    /// whatever this time: the ledger's order is the order rows are recorded.
    #[arg(long, value_name = "WHEN")]
    pub finished_at: Option<String>,
}

#[derive(Debug, Args)]
pub struct HistoryExportArgs {
    /// `json`: every execution; `night-watch`: {projectDir: {prdFile: {records: [...]}}}, newest 10 per prompt.
    #[arg(long, default_value = "json")]
    pub format: String,
}

#[derive(Debug, Args)]
pub struct WhoTouchedArgs {
    /// A file or folder path (absolute, or relative to the current folder).
    pub path: std::path::PathBuf,
    /// Only executions with this outcome (success, failure, timeout, rate_limited, aborted,
    /// interrupted, rejected, cancelled, setup_failed).
    #[arg(long)]
    pub outcome: Option<String>,
    /// Only executions that finished at or after WHEN: a duration ago (`12h`), a date
    /// (`2026-11-25`, UTC) or an RFC 3339 time.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Print a JSON array (shape in docs/history-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// Print one JSON object (shape in docs/history-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Say what would be pruned, prune nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON object (shape in docs/cli-json.md).
    #[arg(long)]
    pub json: bool,
}
