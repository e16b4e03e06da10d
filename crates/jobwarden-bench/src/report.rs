//! Figures, their targets, and how they are printed: a table for people,
//! `--json` for machines.

use serde::Serialize;

/// One measured figure, next to its target (if DESIGN §12 sets one).
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub scenario: &'static str,
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
    /// The promise: `value <= target` (or `>=` when `at_least`).
    pub target: Option<f64>,
    pub at_least: bool,
    /// `met`, `missed`, or `info` (no target: context for the others).
    pub verdict: &'static str,
}

impl Figure {
    /// A figure that must stay at or below `target`.
    pub fn at_most(
        scenario: &'static str,
        name: &str,
        value: f64,
        unit: &'static str,
        target: f64,
    ) -> Self {
        Figure::judged(scenario, name, value, unit, Some(target), false)
    }

    /// A figure that must reach at least `target`.
    pub fn at_least(
        scenario: &'static str,
        name: &str,
        value: f64,
        unit: &'static str,
        target: f64,
    ) -> Self {
        Figure::judged(scenario, name, value, unit, Some(target), true)
    }

    /// Context without a target.
    pub fn info(scenario: &'static str, name: &str, value: f64, unit: &'static str) -> Self {
        Figure::judged(scenario, name, value, unit, None, false)
    }

    fn judged(
        scenario: &'static str,
        name: &str,
        value: f64,
        unit: &'static str,
        target: Option<f64>,
        at_least: bool,
    ) -> Self {
        let verdict = match target {
            None => "info",
            Some(t) if (at_least && value >= t) || (!at_least && value <= t) => "met",
            Some(_) => "missed",
        };
        Figure {
            scenario,
            name: name.to_owned(),
            value,
            unit,
            target,
            at_least,
            verdict,
        }
    }
}

/// The machine the figures came from.
#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub memory_gib: f64,
    /// Where the temporary roots are made (`TMPDIR`) and its filesystem's
    /// type: a job creates files, and what that costs is the filesystem's.
    pub roots_in: String,
    pub roots_filesystem: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let meminfo = read("/proc/meminfo");
        let mem_kb: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
                .unwrap_or_else(|| "unknown".into()),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            memory_gib: mem_kb / (1024.0 * 1024.0),
            roots_in: std::env::temp_dir().display().to_string(),
            roots_filesystem: filesystem_of(&std::env::temp_dir()),
        }
    }
}

/// The type of the filesystem `dir` is on, from the mount table (the
/// longest mount point it is under).
fn filesystem_of(dir: &std::path::Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let (point, kind) = (fields.nth(1)?, fields.next()?);
            dir.starts_with(point)
                .then(|| (point.len(), kind.to_owned()))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown".into(), |(_, kind)| kind)
}

fn shown(value: f64, unit: &str) -> String {
    match unit {
        "ms" if value < 1.0 => format!("{:.0} µs", value * 1000.0),
        "ms" => format!("{value:.2} ms"),
        "MiB" => format!("{value:.1} MiB"),
        "ratio" => format!("{value:.2}x"),
        "jobs/s" | "spawns/s" | "claims/s" => format!("{value:.0} {unit}"),
        "count" => format!("{value:.0}"),
        "bool" => (if value >= 1.0 { "yes" } else { "no" }).to_owned(),
        "s" => format!("{value:.1} s"),
        // Per-job counts: a whole run's few extra (the daemon's start and
        // stop, a folder synced for a group) show in the second decimal.
        "calls" | "files" | "folders" | "names" => format!("{value:.2} {unit}"),
        _ => format!("{value:.1} {unit}"),
    }
}

pub fn print_table(machine: &Machine, figures: &[Figure]) {
    println!(
        "machine: {} CPU(s), {}, kernel {}, {:.0} GiB; roots in {} ({})",
        machine.cpus,
        machine.cpu_model,
        machine.kernel,
        machine.memory_gib,
        machine.roots_in,
        machine.roots_filesystem
    );
    println!(
        "{:<13} {:<38} {:>14} {:>16}  verdict",
        "scenario", "figure", "value", "target"
    );
    for f in figures {
        let target = f.target.map_or_else(String::new, |t| {
            if f.unit == "bool" {
                return "yes".to_owned();
            }
            format!(
                "{}{}",
                if f.at_least { "≥ " } else { "≤ " },
                shown(t, f.unit)
            )
        });
        println!(
            "{:<13} {:<38} {:>14} {:>16}  {}",
            f.scenario,
            f.name,
            shown(f.value, f.unit),
            target,
            f.verdict
        );
    }
    let missed = figures.iter().filter(|f| f.verdict == "missed").count();
    let judged = figures.iter().filter(|f| f.verdict != "info").count();
    println!("{} of {judged} targets met", judged - missed);
}

pub fn print_json(machine: &Machine, figures: &[Figure]) -> anyhow::Result<()> {
    let out = serde_json::json!({ "machine": machine, "figures": figures });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// The `q`-quantile (0..=1) of `sorted` samples (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
