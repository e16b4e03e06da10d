//! Prometheus metrics in the text exposition format (version 0.0.4), the
//! same for `jobwarden metrics` (node_exporter's textfile collector) and
//! the web process's `/metrics`. Read from what is on disk: the ledger's
//! kept counters, `daemon.json` (what only the running daemon knows: its
//! queue, cooldowns, claim latency, dropped lines), the ledger's size.
//! Names follow Prometheus conventions: `jobwarden_` prefix, counters end
//! in `_total`, times in `_seconds`, sizes in `_bytes`.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use jobwarden_ledger::Ledger;
use jobwarden_model::job::JobState;
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;

/// The claim latency histogram's bounds (ms): from the prompt's drop (its
/// file's mtime) to its claim.
pub const CLAIM_LATENCY_BOUNDS_MS: [u64; 12] =
    [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000];

/// The job duration histogram's bounds (ms).
pub const DURATION_BOUNDS_MS: [u64; 12] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000, 7_200_000,
    14_400_000, 28_800_000,
];

/// A histogram the daemon keeps in memory and writes into `daemon.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// Upper bounds, ascending (ms).
    pub bounds_ms: Vec<u64>,
    /// Observations per bound, not cumulative; one more for above the last.
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum_ms: u64,
}

impl Histogram {
    pub fn new(bounds_ms: &[u64]) -> Self {
        Histogram {
            bounds_ms: bounds_ms.to_vec(),
            counts: vec![0; bounds_ms.len() + 1],
            count: 0,
            sum_ms: 0,
        }
    }

    pub fn observe(&mut self, ms: u64) {
        let i = self.bounds_ms.partition_point(|&b| b < ms);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.count += 1;
        self.sum_ms = self.sum_ms.saturating_add(ms);
    }
}

/// What the daemon writes for the metrics (`daemon.json` `metrics`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonMetrics {
    /// From a prompt's drop to its claim, since the daemon started.
    pub claim_latency: Histogram,
    /// Log lines dropped because stderr was closed or full, since start.
    pub log_lines_dropped: u64,
    /// Notifications dropped because too many deliveries were pending.
    pub notifications_dropped: u64,
    /// Prompts in cooldown now.
    pub cooldowns: u64,
}

/// What `daemon.json` says that the metrics need.
#[derive(Debug, Deserialize)]
struct DaemonView {
    heartbeat_at: Timestamp,
    running: u64,
    queued: u64,
    #[serde(default)]
    metrics: Option<DaemonMetrics>,
}

/// The whole exposition.
pub fn render(layout: &Layout, ledger: Option<&Ledger>, daemon_running: bool) -> String {
    let mut out = Exposition::default();
    out.gauge(
        "jobwarden_daemon_up",
        "1 when a daemon holds the root's lock, else 0.",
        &[(vec![], u64::from(daemon_running) as f64)],
    );
    let daemon = jobwarden_sys::fsio::read_capped(layout.root(), &layout.daemon_json(), 1 << 20)
        .ok()
        .and_then(|(bytes, _)| serde_json::from_slice::<DaemonView>(&bytes).ok())
        .filter(|_| daemon_running);
    if let Some(d) = &daemon {
        out.gauge(
            "jobwarden_daemon_heartbeat_age_seconds",
            "Seconds since the daemon last wrote daemon.json (every heartbeat_interval).",
            &[(vec![], d.heartbeat_at.age().as_secs_f64())],
        );
        out.gauge(
            "jobwarden_running_monitors",
            "Jobs the daemon supervises now (a monitor each).",
            &[(vec![], d.running as f64)],
        );
        out.gauge(
            "jobwarden_queue_length",
            "Jobs claimed and waiting for a slot.",
            &[(vec![], d.queued as f64)],
        );
        if let Some(m) = &d.metrics {
            out.gauge(
                "jobwarden_cooldowns_active",
                "Prompts deferred by a cooldown now.",
                &[(vec![], m.cooldowns as f64)],
            );
            out.counter(
                "jobwarden_log_lines_dropped_total",
                "Log lines dropped because stderr was closed or full, since the daemon started.",
                &[(vec![], m.log_lines_dropped as f64)],
            );
            out.counter(
                "jobwarden_notifications_dropped_total",
                "Notifications dropped because too many deliveries were pending, since the daemon started.",
                &[(vec![], m.notifications_dropped as f64)],
            );
            out.histogram(
                "jobwarden_claim_latency_seconds",
                "From a prompt's drop (its file's mtime) to its claim, since the daemon started.",
                &[(
                    vec![],
                    cumulative(&m.claim_latency),
                    m.claim_latency.sum_ms,
                    m.claim_latency.count,
                )],
            );
        }
    }
    if let Some(ledger) = ledger {
        ledger_metrics(&mut out, ledger);
    }
    let size: u64 = ["", "-wal"]
        .iter()
        .filter_map(|suffix| {
            let mut path = layout.ledger().into_os_string();
            path.push(suffix);
            std::fs::metadata(path).ok().map(|m| m.len())
        })
        .sum();
    out.gauge(
        "jobwarden_ledger_bytes",
        "Size of ledger.db and its write-ahead log.",
        &[(vec![], size as f64)],
    );
    out.text
}

/// `(bound in ms, cumulative count)` of a kept histogram.
fn cumulative(h: &Histogram) -> Vec<(u64, u64)> {
    let mut total = 0;
    h.bounds_ms
        .iter()
        .zip(&h.counts)
        .map(|(&b, &c)| {
            total += c;
            (b, total)
        })
        .collect()
}

fn ledger_metrics(out: &mut Exposition, ledger: &Ledger) {
    if let Ok(counts) = ledger.count_jobs_by_state() {
        let by: BTreeMap<String, u64> = counts.into_iter().collect();
        let samples: Vec<_> = JobState::ALL
            .iter()
            .map(|s| {
                let n = by.get(s.as_str()).copied().unwrap_or(0);
                (vec![("state", s.as_str().to_owned())], n as f64)
            })
            .collect();
        out.gauge(
            "jobwarden_jobs",
            "Jobs whose run folder exists, by state.",
            &samples,
        );
    }
    let counts = ledger.metric_counts().unwrap_or_default();
    let outcomes: Vec<_> = counts
        .iter()
        .map(|(project, profile, outcome, n)| {
            let labels = vec![
                ("project", project.clone()),
                ("profile", profile.clone()),
                ("outcome", outcome.clone()),
            ];
            (labels, *n as f64)
        })
        .collect();
    out.counter(
        "jobwarden_executions_total",
        "Finished attempts recorded in the ledger, by project, profile and outcome.",
        &outcomes,
    );
    let mut claims: BTreeMap<String, u64> = BTreeMap::new();
    for (project, _, _, n) in &counts {
        *claims.entry(project.clone()).or_default() += n;
    }
    for (project, n) in ledger.live_jobs_by_project().unwrap_or_default() {
        *claims.entry(project).or_default() += n;
    }
    let claims: Vec<_> = claims
        .into_iter()
        .map(|(project, n)| (vec![("project", project)], n as f64))
        .collect();
    out.counter(
        "jobwarden_claims_total",
        "Prompts claimed, by project: every finished attempt and every job not ended yet.",
        &claims,
    );
    if let Ok(histograms) = ledger.duration_histograms(&DURATION_BOUNDS_MS) {
        let series: Vec<_> = histograms
            .into_iter()
            .map(|d| {
                let buckets = d.buckets.iter().map(|b| (b.le_ms, b.count)).collect();
                (vec![("project", d.project)], buckets, d.sum_ms, d.count)
            })
            .collect();
        out.histogram(
            "jobwarden_job_duration_seconds",
            "How long finished jobs ran (from their first command's start to their end), by project.",
            &series,
        );
    }
}

type Labels = Vec<(&'static str, String)>;

/// One series of a histogram: its labels, `(bound ms, cumulative count)`
/// per bound, the sum (ms) and the count.
type Series = (Labels, Vec<(u64, u64)>, u64, u64);

/// The text being written.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn gauge(&mut self, name: &str, help: &str, samples: &[(Labels, f64)]) {
        self.header(name, help, "gauge");
        for (labels, v) in samples {
            self.sample(name, labels, *v);
        }
    }

    fn counter(&mut self, name: &str, help: &str, samples: &[(Labels, f64)]) {
        self.header(name, help, "counter");
        for (labels, v) in samples {
            self.sample(name, labels, *v);
        }
    }

    /// Series of `(labels, (bound ms, cumulative count)…, sum ms, count)`.
    fn histogram(&mut self, name: &str, help: &str, series: &[Series]) {
        self.header(name, help, "histogram");
        for (labels, buckets, sum_ms, count) in series {
            for (le_ms, n) in buckets {
                let mut l = labels.clone();
                l.push(("le", seconds(*le_ms)));
                self.sample(&format!("{name}_bucket"), &l, *n as f64);
            }
            let mut l = labels.clone();
            l.push(("le", "+Inf".to_owned()));
            self.sample(&format!("{name}_bucket"), &l, *count as f64);
            self.sample(&format!("{name}_sum"), labels, *sum_ms as f64 / 1000.0);
            self.sample(&format!("{name}_count"), labels, *count as f64);
        }
    }

    fn sample(&mut self, name: &str, labels: &Labels, value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let parts: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(self.text, "{{{}}}", parts.join(","));
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// A bound in seconds, as Prometheus writes one (`0.005`, `10`).
fn seconds(ms: u64) -> String {
    let s = ms as f64 / 1000.0;
    format!("{s}")
}

/// A label value escaped as the format asks: `\`, `"` and newlines.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_each_observation_under_its_first_bound() {
        let mut h = Histogram::new(&[10, 100]);
        for ms in [0, 10, 11, 100, 5000] {
            h.observe(ms);
        }
        assert_eq!(h.counts, vec![2, 2, 1]);
        assert_eq!(cumulative(&h), vec![(10, 2), (100, 4)]);
        assert_eq!((h.count, h.sum_ms), (5, 5121));
    }

    #[test]
    fn label_values_are_escaped_and_bounds_written_in_seconds() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(seconds(5), "0.005");
        assert_eq!(seconds(10_000), "10");
    }
}
