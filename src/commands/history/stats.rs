//! `jobwarden history stats [--since T] [--until T] [--project P]
//! [--by project|prompt|profile] [--json]`: counts by outcome, success rate,
//! median and p95 duration, overall and per project (or prompt, or profile), from `executions` (lifetime unless `--since` or `--until`). The numbers are computed
//! in SQL by `ledger/history.rs`; this file prints them. An empty selection
//! is a valid answer (all zeros), so it exits 0.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::list::{Window, fmt_duration, print_json, timestamp};
use crate::cli::{GlobalArgs, HistoryStatsArgs, StatsBy};
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
    let stats = ledger.stats_by(&filter, args.by.group())?;
    if args.json {
        print_json(&StatsJson::new(&filter, args.by, &stats))?;
    } else {
        print_human(&filter, args.by, &stats).context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `history stats --json` (docs/history-json.md).
#[derive(Serialize)]
struct StatsJson<'a> {
    since: Option<Timestamp>,
    until: Option<Timestamp>,
    project: Option<&'a str>,
    /// `project`, `prompt` or `profile`: what the groups are.
    by: &'static str,
    #[serde(flatten)]
    overall: &'a Summary,
    /// The groups, under `projects`, `prompts` or `profiles`.
    #[serde(flatten)]
    groups: std::collections::BTreeMap<&'static str, &'a Groups>,
}

type Groups = std::collections::BTreeMap<String, Summary>;

impl<'a> StatsJson<'a> {
    fn new(f: &'a Filter, by: StatsBy, s: &'a Stats) -> Self {
        StatsJson {
            since: f.since_ms.map(timestamp),
            until: f.until_ms.map(timestamp),
            project: f.project.as_deref(),
            by: by_name(by),
            overall: &s.overall,
            groups: [(groups_key(by), &s.projects)].into(),
        }
    }
}

/// The `--by` value's name.
fn by_name(by: StatsBy) -> &'static str {
    match by {
        StatsBy::Project => "project",
        StatsBy::Prompt => "prompt",
        StatsBy::Profile => "profile",
    }
}

/// The JSON key of the groups of `by`.
fn groups_key(by: StatsBy) -> &'static str {
    match by {
        StatsBy::Project => "projects",
        StatsBy::Prompt => "prompts",
        StatsBy::Profile => "profiles",
    }
}

fn print_human(f: &Filter, by: StatsBy, s: &Stats) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let span = match (f.since_ms, f.until_ms) {
        (Some(s), Some(u)) => format!("since {}, until {}", timestamp(s), timestamp(u)),
        (Some(s), None) => format!("since {}", timestamp(s)),
        (None, Some(u)) => format!("until {}", timestamp(u)),
        (None, None) => "lifetime".to_owned(),
    };
    writeln!(out, "executions ({span}):")?;
    print_summary(&mut out, "all projects", &s.overall)?;
    if f.project.is_none() || by != StatsBy::Project {
        for (key, summary) in &s.projects {
            print_summary(&mut out, &group_label(by, key), summary)?;
        }
    }
    Ok(())
}

/// A group's label: its key, or what an empty key means.
fn group_label(by: StatsBy, key: &str) -> String {
    match (by, key) {
        (StatsBy::Project, "") => "(inbox top)".to_owned(),
        (StatsBy::Profile, "") => "(no profile)".to_owned(),
        (StatsBy::Prompt, k) => format!("prompt {k}"),
        (StatsBy::Profile, k) => format!("profile {k}"),
        (StatsBy::Project, k) => k.to_owned(),
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
    // Merged work, and work whose branch was deleted unmerged, is counted
    // among the successes, and named after them.
    let of_which: Vec<String> = [
        ("merged", s.merged),
        ("branch deleted unmerged", s.branch_deleted),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(what, n)| format!("{what} {n}"))
    .collect();
    if !of_which.is_empty() {
        let at = usize::from(counts.first().is_some_and(|(o, _)| o.as_str() == "success"));
        parts.insert(at, format!("(of which {})", of_which.join(", ")));
    }
    parts.join(", ")
}
