//! Charts drawn by the server as SVG (no script, no library, nothing
//! fetched from the internet): jobs ended by outcome over a range,
//! durations by profile, and the queue's length over the range. Colours
//! are classes (the page's CSP allows no `style` attribute).

use std::collections::BTreeMap;

use super::html::esc;
use jobwarden_ledger::{Execution, IndexedJob};

const W: f64 = 640.0;
const H: f64 = 180.0;
const PAD: f64 = 28.0;

/// The class suffix of an outcome's colour (`o-ok`, …, in the page's CSS).
fn colour(outcome: &str) -> &'static str {
    match outcome {
        "success" => "ok",
        "failure" | "setup_failed" => "bad",
        "timeout" | "rate_limited" => "warn",
        "aborted" => "stop",
        "cancelled" => "cancel",
        _ => "other",
    }
}

fn frame(title: &str, inner: &str, legend: &str) -> String {
    format!(
        "<figure class=\"chart\"><figcaption>{}</figcaption><div class=\"scroll\" tabindex=\"0\" role=\"region\" aria-label=\"{} (scrolls sideways)\">\
         <svg viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\">\
         <line x1=\"{PAD}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"currentColor\" stroke-opacity=\".3\"/>\
         {inner}</svg></div><div class=\"muted\">{legend}</div></figure>",
        esc(title),
        esc(title),
        esc(title),
        y = H - PAD,
        x2 = W - 4.0,
    )
}

/// A range a chart covers: `1h`, `6h`, `24h` (the default), `7d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub name: &'static str,
    pub ms: u64,
}

pub const RANGES: &[Range] = &[
    Range {
        name: "1h",
        ms: 3_600_000,
    },
    Range {
        name: "6h",
        ms: 6 * 3_600_000,
    },
    Range {
        name: "24h",
        ms: 24 * 3_600_000,
    },
    Range {
        name: "7d",
        ms: 7 * 24 * 3_600_000,
    },
];

impl Range {
    /// The range `name` says, else 24 h.
    pub fn named(name: Option<&str>) -> Range {
        RANGES
            .iter()
            .copied()
            .find(|r| Some(r.name) == name)
            .unwrap_or(RANGES[2])
    }
}

/// Executions ended over `range` up to `now_ms`, in 24 bars stacked by
/// outcome.
pub fn per_hour(executions: &[Execution], now_ms: u64, range: Range) -> String {
    let bin = range.ms / 24;
    let start = now_ms.saturating_sub(range.ms);
    let mut bins: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); 24];
    for e in executions.iter().filter(|e| e.finished_at >= start) {
        let i = ((e.finished_at - start) / bin.max(1)).min(23) as usize;
        *bins[i].entry(e.outcome.to_string()).or_default() += 1;
    }
    let max = bins
        .iter()
        .map(|b| b.values().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let bar = (W - PAD - 4.0) / 24.0;
    let mut inner = String::new();
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for (i, bin) in bins.iter().enumerate() {
        let mut y = H - PAD;
        for (outcome, n) in bin {
            let h = (H - 2.0 * PAD) * (*n as f64) / max as f64;
            y -= h;
            inner.push_str(&format!(
                "<rect class=\"bar o-{}\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\"><title>{} {}</title></rect>",
                colour(outcome),
                PAD + i as f64 * bar + 1.0,
                bar - 2.0,
                n,
                esc(outcome)
            ));
            *seen.entry(outcome.clone()).or_default() += n;
        }
    }
    inner.push_str(&format!(
        "<text x=\"2\" y=\"{PAD}\">{max}</text>\
         <text x=\"{PAD}\" y=\"{}\">{} ago</text>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">now</text>",
        H - 8.0,
        range.name,
        W - 4.0,
        H - 8.0
    ));
    let legend: Vec<String> = seen
        .iter()
        .map(|(o, n)| format!("<span class=\"o-{}\">■</span> {} {n}", colour(o), esc(o)))
        .collect();
    frame(
        &format!("jobs ended by outcome ({})", range.name),
        &inner,
        &legend.join(" · "),
    )
}

/// How long executions took, per profile: counts in duration bands.
pub fn durations(executions: &[Execution]) -> String {
    const BANDS: [(u64, &str); 5] = [
        (10_000, "< 10 s"),
        (60_000, "< 1 min"),
        (600_000, "< 10 min"),
        (3_600_000, "< 1 h"),
        (u64::MAX, "≥ 1 h"),
    ];
    let mut by: BTreeMap<String, [u64; 5]> = BTreeMap::new();
    for e in executions {
        let Some(ms) = e.duration_ms else { continue };
        let i = BANDS.iter().position(|(b, _)| ms < *b).unwrap_or(4);
        by.entry(e.profile.clone().unwrap_or_else(|| "-".into()))
            .or_default()[i] += 1;
    }
    let max = by
        .values()
        .flat_map(|c| c.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    let rows = by.len().max(1) as f64;
    let row = (H - 2.0 * PAD) / rows;
    let cell = (W - 2.0 * PAD - 60.0) / 5.0;
    let mut inner = String::new();
    for (r, (profile, counts)) in by.iter().enumerate() {
        let y = PAD + r as f64 * row;
        inner.push_str(&format!(
            "<text x=\"2\" y=\"{:.1}\">{}</text>",
            y + row / 2.0,
            esc(profile)
        ));
        for (i, n) in counts.iter().enumerate() {
            let w = cell * (*n as f64) / max as f64;
            inner.push_str(&format!(
                "<rect class=\"bar band\" x=\"{:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill-opacity=\"{:.2}\"><title>{} {}: {n}</title></rect>",
                PAD + 60.0 + i as f64 * cell,
                y + 2.0,
                (row - 4.0).max(1.0),
                0.35 + 0.13 * i as f64,
                esc(profile),
                BANDS[i].1,
            ));
        }
    }
    let legend: Vec<String> = BANDS.iter().map(|(_, l)| (*l).to_owned()).collect();
    frame(
        "durations by profile",
        &inner,
        &format!("columns: {}", legend.join(", ")),
    )
}

/// Jobs queued (claimed, not yet started) over `range` up to `now_ms`:
/// 120 samples, the last of them now.
pub fn queue(jobs: &[IndexedJob], now_ms: u64, range: Range) -> String {
    let points = 120usize;
    let step = range.ms / points as u64;
    let start = now_ms.saturating_sub(range.ms);
    let counts: Vec<u64> = (0..=points)
        .map(|i| {
            let t = if i == points {
                now_ms
            } else {
                start + i as u64 * step
            };
            jobs.iter()
                .filter(|j| j.created_at <= t)
                .filter(|j| match (j.started_at, j.finished_at) {
                    (Some(s), _) => s > t,
                    (None, Some(f)) => f > t,
                    (None, None) => true,
                })
                .count() as u64
        })
        .collect();
    let max = counts.iter().copied().max().unwrap_or(0).max(1);
    let path: Vec<String> = counts
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let x = PAD + (W - PAD - 4.0) * i as f64 / points as f64;
            let y = H - PAD - (H - 2.0 * PAD) * (*n as f64) / max as f64;
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let now = counts.last().copied().unwrap_or(0);
    let inner = format!(
        "<polyline class=\"line\" fill=\"none\" stroke-width=\"2\" points=\"{}\"/>\
         <text x=\"2\" y=\"{PAD}\">{max}</text>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">now: {now}</text>",
        path.join(" "),
        W - 4.0,
        H - 8.0
    );
    frame(
        &format!("queue length ({})", range.name),
        &inner,
        &format!("jobs claimed and not yet started; {now} now"),
    )
}
