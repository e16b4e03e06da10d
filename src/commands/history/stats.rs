//! `jobwarden history stats [--since T] [--until T] [--project P] [--json]`:
//! counts by outcome, success rate, median and p95 duration, overall and per
//! project, from `executions` (lifetime unless `--since` or `--until`). The numbers are computed
//! in SQL by `ledger/history.rs`; this file prints them. An empty selection
//! is a valid answer (all zeros), so it exits 0.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::list::{Window, fmt_duration, print_json, timestamp};
use crate::cli::{GlobalArgs, HistoryStatsArgs};
use jobwarden_ledger::Outcome;
use jobwarden_ledger::history::{Filter, Stats, Summary};
use jobwarden_sys::clock::Timestamp;

pub fn run(global: &GlobalArgs, args: &HistoryStatsArgs) -> anyhow::Result<ExitCode> {
    let window = Window::parse(args.since.as_deref(), args.until.as_deref())?;
    let filter = Filter {
        project: args.project.clone(),
        since_ms: window.since_ms,
        until_ms: window.until_ms,
        ..Filter::default()
    };
    let (_, _, ledger) = super::open(global)?;
    let stats = ledger.stats(&filter)?;
    if args.json {
        print_json(&StatsJson::new(&filter, &stats))?;
    } else {
        print_human(&filter, &stats).context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `history stats --json` (docs/history-json.md).
#[derive(Serialize)]
struct StatsJson<'a> {
    since: Option<Timestamp>,
    until: Option<Timestamp>,
    project: Option<&'a str>,
    #[serde(flatten)]
    overall: &'a Summary,
    projects: &'a std::collections::BTreeMap<String, Summary>,
}

impl<'a> StatsJson<'a> {
    fn new(f: &'a Filter, s: &'a Stats) -> Self {
        StatsJson {
            since: f.since_ms.map(timestamp),
            until: f.until_ms.map(timestamp),
            project: f.project.as_deref(),
            overall: &s.overall,
            projects: &s.projects,
        }
    }
}

fn print_human(f: &Filter, s: &Stats) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let span = match (f.since_ms, f.until_ms) {
        (Some(s), Some(u)) => format!("since {}, until {}", timestamp(s), timestamp(u)),
        (Some(s), None) => format!("since {}", timestamp(s)),
        (None, Some(u)) => format!("until {}", timestamp(u)),
        (None, None) => "lifetime".to_owned(),
    };
    writeln!(out, "executions ({span}):")?;
    print_summary(&mut out, "all projects", &s.overall)?;
    if f.project.is_none() {
        for (project, summary) in &s.projects {
            print_summary(&mut out, &project_label(project), summary)?;
        }
    }
    Ok(())
}

fn project_label(project: &str) -> String {
    if project.is_empty() {
        "(inbox top)".to_owned()
    } else {
        project.to_owned()
    }
}

/// `label: total N, success rate R, median M, p95 P` and a line of
/// the outcomes that occurred.
fn print_summary(out: &mut impl Write, label: &str, s: &Summary) -> std::io::Result<()> {
    let rate = s
        .success_rate
        .map_or_else(|| "n/a".to_owned(), |r| format!("{:.1}%", r * 100.0));
    let ms = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), fmt_duration);
    writeln!(
        out,
        "{label}: total {}, success rate {rate}, median {}, p95 {}",
        s.total,
        ms(s.median_duration_ms),
        ms(s.p95_duration_ms)
    )?;
    if s.total > 0 {
        writeln!(out, "  {}", outcome_counts(s))?;
    }
    Ok(())
}

/// Non-zero outcome counts, in the order outcomes are listed everywhere
/// (success first); outcomes this build does not know come last.
fn outcome_counts(s: &Summary) -> String {
    let rank = |name: &str| {
        Outcome::ALL
            .iter()
            .position(|o| o.as_str() == name)
            .unwrap_or(Outcome::ALL.len())
    };
    let mut counts: Vec<(&String, &u64)> = s.by_outcome.iter().filter(|(_, n)| **n > 0).collect();
    counts.sort_by_key(|(name, _)| rank(name));
    let mut parts: Vec<String> = counts.iter().map(|(o, n)| format!("{o} {n}")).collect();
    // Merged work is counted among the successes, and named after them.
    if s.merged > 0 {
        let at = usize::from(counts.first().is_some_and(|(o, _)| o.as_str() == "success"));
        parts.insert(at, format!("(of which merged {})", s.merged));
    }
    parts.join(", ")
}
