//! `jobwarden-bench <scenario|all> [--json]`: measures the performance
//! promises (DESIGN §12) against the real daemon, in a temporary root of
//! its own, and reports each figure next to its target as met or missed.
//! Nothing here asserts: machines are noisy, so this reports.
//!
//! The daemon is the `jobwarden` binary next to this one when it was built
//! (`cargo build --release`); otherwise this binary runs the same code in
//! its place (started as `jobwarden`, it is jobwarden). The helpers the
//! jobs run (`stamp`, `await-term`) are this binary too, so that a job's
//! start and a signal's arrival are stamped with `CLOCK_MONOTONIC`, which
//! every process on the machine shares.
//!
//! Layout: `main.rs` (arguments, job helpers), `rig.rs` (the temporary
//! root, the daemon, waits, `/proc` readings), `scenarios/` (one module per
//! concern: `latency.rs` with `bare.rs` its inotify baseline, `load.rs`
//! throughput and burst, `syscalls.rs` the system calls, fsyncs and files
//! of a job under `strace`, `footprint.rs` memory and the idle daemon,
//! `startup.rs` start-up and queries with a long history, `pueue.rs` the
//! same scenarios through pueue, `slurm.rs` a job's start on a Slurm
//! cluster next to a bare `sbatch`), `fixtures.rs` (finished jobs and ledger
//! rows generated directly), `report.rs` (figures, verdicts, printing).

// A measuring harness run by hand, not a command of the product: its
// report may print with the plain macros.
#![allow(clippy::disallowed_macros)]

mod fixtures;
mod report;
mod rig;
mod scenarios;

use std::path::Path;
use std::process::ExitCode;

use report::Figure;

/// Every scenario, in the order `all` runs them (`pueue` after the
/// scenarios whose jobwarden figures it divides by).
const SCENARIOS: &[&str] = &[
    "claim-latency",
    "abort-latency",
    "throughput",
    "syscalls",
    "burst",
    "footprint",
    "idle",
    "startup",
    "queries",
    "pueue",
];

/// Scenarios that need something `all` cannot assume (a Slurm cluster):
/// run only when named.
const ON_REQUEST: &[&str] = &["slurm-latency"];

/// Finished jobs on disk for `startup` when `--history` is not given.
const DEFAULT_HISTORY: usize = 100_000;

fn main() -> ExitCode {
    // A sandboxed job's init, started through /proc/self/exe.
    if let Some(code) = jobwarden_sys::child::init::run_if_asked() {
        return code;
    }
    let args: Vec<String> = std::env::args().collect();
    // Started as `jobwarden` (the daemon, or a monitor it starts through
    // /proc/self/exe), this binary is jobwarden.
    let arg0 = args.first().map(Path::new).and_then(|p| p.file_name());
    if arg0.is_some_and(|n| n == "jobwarden") {
        return jobwarden::commands::main();
    }
    match args.get(1).map(String::as_str) {
        Some("stamp") => return helper(stamp(args.get(2))),
        Some("await-term") => return helper(await_term(args.get(2), args.get(3))),
        _ => {}
    }
    match run(args.get(1..).unwrap_or_default()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("jobwarden-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn usage() -> String {
    format!(
        "usage: jobwarden-bench <{}|all|{}>... [--history N] [--no-sandbox] [--json]",
        SCENARIOS.join("|"),
        ON_REQUEST.join("|")
    )
}

/// What the command line asks for.
struct Options {
    scenarios: Vec<&'static str>,
    json: bool,
    /// Finished jobs on disk for `startup`.
    history: usize,
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut opts = Options {
        scenarios: Vec::new(),
        json: false,
        history: DEFAULT_HISTORY,
    };
    let mut args = args.iter().map(String::as_str);
    while let Some(arg) = args.next() {
        match arg {
            "--json" => opts.json = true,
            "--no-sandbox" => scenarios::without_sandbox(),
            "--history" => {
                let n = args.next().unwrap_or_default().replace('_', "");
                opts.history = n.parse().map_err(|_| {
                    anyhow::anyhow!(
                        "--history takes a number of finished jobs (e.g. 1000000), not {n:?}; {}",
                        usage()
                    )
                })?;
            }
            "all" => opts.scenarios.extend_from_slice(SCENARIOS),
            name => match SCENARIOS.iter().chain(ON_REQUEST).find(|s| **s == name) {
                Some(s) => opts.scenarios.push(s),
                None => anyhow::bail!("unknown scenario {name:?}; {}", usage()),
            },
        }
    }
    if opts.scenarios.is_empty() {
        anyhow::bail!("{}", usage());
    }
    // Each scenario once, in the order asked.
    let mut seen = std::collections::HashSet::new();
    opts.scenarios.retain(|s| seen.insert(*s));
    Ok(opts)
}

fn run(args: &[String]) -> anyhow::Result<ExitCode> {
    let opts = parse(args)?;
    let machine = report::Machine::probe();
    let mut figures: Vec<Figure> = Vec::new();
    for scenario in &opts.scenarios {
        eprintln!("jobwarden-bench: {scenario} …");
        let got = match *scenario {
            "claim-latency" => scenarios::latency::claim_latency()?,
            "abort-latency" => scenarios::latency::abort_latency()?,
            "throughput" => scenarios::load::throughput()?,
            "syscalls" => scenarios::syscalls::syscalls()?,
            "burst" => scenarios::load::burst()?,
            "footprint" => scenarios::footprint::footprint()?,
            "idle" => scenarios::footprint::idle()?,
            "startup" => scenarios::startup::startup(opts.history)?,
            "queries" => scenarios::startup::queries()?,
            "slurm-latency" => scenarios::slurm::slurm_latency()?,
            _ => scenarios::pueue::pueue(&figures)?,
        };
        figures.extend(got);
    }
    if opts.json {
        report::print_json(&machine, &figures)?;
    } else {
        report::print_table(&machine, &figures);
    }
    Ok(ExitCode::SUCCESS)
}

fn helper(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jobwarden-bench helper: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC`: comparable between processes.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// `stamp FILE`: a job that writes the time it started.
fn stamp(file: Option<&String>) -> anyhow::Result<()> {
    let now = monotonic_ns();
    let file = file.ok_or_else(|| anyhow::anyhow!("stamp needs a file"))?;
    write_new(Path::new(file), &now.to_string())
}

/// `await-term READY STAMP`: a job that says it is ready, then writes the
/// time SIGTERM reached it (taken with the signal blocked and waited for,
/// so no polling delay is added).
fn await_term(ready: Option<&String>, file: Option<&String>) -> anyhow::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let (Some(ready), Some(file)) = (ready, file) else {
        anyhow::bail!("await-term needs a ready file and a stamp file");
    };
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.thread_block()?;
    write_new(Path::new(ready), "ready")?;
    set.wait()?;
    let now = monotonic_ns();
    write_new(Path::new(file), &now.to_string())
}

/// Write `text` to a new file under a temporary name, then rename it in:
/// the harness never reads half a stamp.
pub fn write_new(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    #[allow(clippy::disallowed_methods)] // a scratch file, not jobwarden state
    std::fs::write(&tmp, text)?;
    #[allow(clippy::disallowed_methods)]
    std::fs::rename(&tmp, path)?;
    Ok(())
}
