//! Charts drawn by the server as SVG (no script, no library, nothing
//! fetched from the internet): jobs per hour by outcome, durations by
//! profile, and the queue's length over time.

use std::collections::BTreeMap;

use super::html::esc;
use jobwarden_ledger::{Execution, IndexedJob};

const W: f64 = 640.0;
const H: f64 = 180.0;
const PAD: f64 = 28.0;

fn colour(outcome: &str) -> &'static str {
    match outcome {
        "success" => "#2da44e",
        "failure" | "setup_failed" => "#cf222e",
        "timeout" | "rate_limited" => "#bf8700",
        "aborted" | "cancelled" => "#8250df",
        _ => "#6e7781",
    }
}

fn frame(title: &str, inner: &str, legend: &str) -> String {
    format!(
        "<figure class=\"chart\"><figcaption>{}</figcaption>\
         <svg viewBox=\"0 0 {W} {H}\" width=\"100%\" role=\"img\" aria-label=\"{}\" \
         style=\"max-width:{W}px\"><line x1=\"{PAD}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"currentColor\" stroke-opacity=\".3\"/>\
         {inner}</svg><div class=\"muted\">{legend}</div></figure>",
        esc(title),
        esc(title),
        y = H - PAD,
        x2 = W - 4.0,
    )
}

/// Finished executions per hour over the last 24 h, stacked by outcome.
pub fn per_hour(executions: &[Execution], now_ms: u64) -> String {
    let hour = 3_600_000u64;
    let start = now_ms.saturating_sub(24 * hour);
    let mut bins: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); 24];
    for e in executions.iter().filter(|e| e.finished_at >= start) {
        let i = ((e.finished_at - start) / hour).min(23) as usize;
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
                "<rect class=\"bar\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{} {}</title></rect>",
                PAD + i as f64 * bar + 1.0,
                bar - 2.0,
                colour(outcome),
                n,
                esc(outcome)
            ));
            *seen.entry(outcome.clone()).or_default() += n;
        }
    }
    inner.push_str(&format!(
        "<text x=\"2\" y=\"{PAD}\" font-size=\"11\" fill=\"currentColor\">{max}</text>\
         <text x=\"{PAD}\" y=\"{}\" font-size=\"11\" fill=\"currentColor\">24 h ago</text>\
         <text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"currentColor\" text-anchor=\"end\">now</text>",
        H - 8.0,
        W - 4.0,
        H - 8.0
    ));
    let legend: Vec<String> = seen
        .iter()
        .map(|(o, n)| {
            format!(
                "<span style=\"color:{}\">■</span> {} {n}",
                colour(o),
                esc(o)
            )
        })
        .collect();
    frame(
        "jobs per hour by outcome (24 h)",
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
            "<text x=\"2\" y=\"{:.1}\" font-size=\"11\" fill=\"currentColor\">{}</text>",
            y + row / 2.0,
            esc(profile)
        ));
        for (i, n) in counts.iter().enumerate() {
            let w = cell * (*n as f64) / max as f64;
            inner.push_str(&format!(
                "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"#0969da\" fill-opacity=\"{:.2}\"><title>{} {}: {n}</title></rect>",
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

/// Jobs queued (claimed, not yet started) over the last 24 h, every 15 min.
pub fn queue(jobs: &[IndexedJob], now_ms: u64) -> String {
    let step = 900_000u64;
    let points = 96usize;
    let start = now_ms.saturating_sub(step * points as u64);
    let counts: Vec<u64> = (0..=points)
        .map(|i| {
            let t = start + i as u64 * step;
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
    let inner = format!(
        "<polyline class=\"line\" fill=\"none\" stroke=\"#0969da\" stroke-width=\"2\" points=\"{}\"/>\
         <text x=\"2\" y=\"{PAD}\" font-size=\"11\" fill=\"currentColor\">{max}</text>",
        path.join(" ")
    );
    frame(
        "queue length (24 h)",
        &inner,
        "jobs claimed and not yet started",
    )
}
