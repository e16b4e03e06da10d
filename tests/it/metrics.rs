//! `jobwarden metrics`: the Prometheus text format, parsed as a scraper
//! would, names by Prometheus conventions, and values that match what the
//! daemon did.

use std::collections::BTreeMap;
use std::fs;

use crate::support::*;

/// A sample: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// Parse the exposition strictly: every line a `# HELP`, a `# TYPE` or a
/// sample of a metric whose TYPE came first; returns the types and samples.
fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("HELP: {line}"));
            assert!(!help.is_empty() && name.starts_with("jobwarden_"), "{line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("TYPE: {line}"));
            assert!(["gauge", "counter", "histogram"].contains(&kind), "{line}");
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "TYPE twice: {line}"
            );
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("sample: {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), BTreeMap::new()),
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("labels: {line}"));
                let labels = inner
                    .split("\",")
                    .map(|kv| {
                        let (k, v) = kv
                            .split_once("=\"")
                            .unwrap_or_else(|| panic!("label: {line}"));
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
        };
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|b| types.get(*b).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(&name)
            .to_owned();
        let kind = types
            .get(&base)
            .unwrap_or_else(|| panic!("no TYPE before {line}"));
        let valid = base.starts_with("jobwarden_")
            && base.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        assert!(valid, "name {base}");
        match kind.as_str() {
            "counter" => assert!(base.ends_with("_total"), "counter {base}"),
            "histogram" => assert!(base.ends_with("_seconds"), "histogram {base}"),
            _ => assert!(!base.ends_with("_total"), "gauge {base}"),
        }
        samples.push((name, labels, value));
    }
    (types, samples)
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
}

#[test]
fn metrics_follow_the_conventions_and_count_what_happened() {
    let sb = Sandbox::new();
    let job = sb.script(
        "job",
        r#"body=$(cat); case "$body" in *fail*) exit 3;; esac; sleep 0.2"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]));
    let mut d = Daemon::start(&sb);
    for (n, body) in [("a", "ok"), ("b", "ok"), ("c", "fail")] {
        sb.drop_prompt("p", n, body);
    }
    for n in ["a", "b", "c"] {
        sb.wait_done("p", n, secs(20));
    }
    // daemon.json carries the claim latencies from the next heartbeat on.
    let text = wait_until("the claims in daemon.json", secs(10), || {
        let out = sb.run(&["metrics"]);
        assert_eq!(out.code(), 0, "{out:?}");
        let (_, s) = parse(&out.stdout);
        (value(&s, "jobwarden_claim_latency_seconds_count", &[]) == Some(3.0)).then_some(out.stdout)
    });
    let (types, s) = parse(&text);
    assert_eq!(value(&s, "jobwarden_daemon_up", &[]), Some(1.0));
    assert_eq!(
        value(&s, "jobwarden_jobs", &[("state", "succeeded")]),
        Some(2.0)
    );
    assert_eq!(
        value(&s, "jobwarden_jobs", &[("state", "failed")]),
        Some(1.0)
    );
    let failures = [
        ("project", "p"),
        ("profile", "default"),
        ("outcome", "failure"),
    ];
    assert_eq!(
        value(&s, "jobwarden_executions_total", &failures),
        Some(1.0)
    );
    assert_eq!(
        value(&s, "jobwarden_claims_total", &[("project", "p")]),
        Some(3.0)
    );
    assert_eq!(value(&s, "jobwarden_queue_length", &[]), Some(0.0));
    assert!(value(&s, "jobwarden_ledger_bytes", &[]).is_some_and(|b| b > 0.0));
    assert!(value(&s, "jobwarden_daemon_heartbeat_age_seconds", &[]).is_some_and(|a| a < 10.0));
    for needed in [
        "jobwarden_running_monitors",
        "jobwarden_cooldowns_active",
        "jobwarden_log_lines_dropped_total",
        "jobwarden_job_duration_seconds",
        "jobwarden_claim_latency_seconds",
    ] {
        assert!(types.contains_key(needed), "{needed} missing:\n{text}");
    }
    // Histograms: cumulative buckets, +Inf equal to the count.
    for h in [
        "jobwarden_job_duration_seconds",
        "jobwarden_claim_latency_seconds",
    ] {
        let buckets: Vec<f64> = s
            .iter()
            .filter(|(n, _, _)| *n == format!("{h}_bucket"))
            .map(|(_, _, v)| *v)
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{h}: {buckets:?}");
        let inf = value(&s, &format!("{h}_bucket"), &[("le", "+Inf")]);
        assert_eq!(inf, value(&s, &format!("{h}_count"), &[]), "{h}");
    }
    let durations = value(
        &s,
        "jobwarden_job_duration_seconds_count",
        &[("project", "p")],
    );
    assert_eq!(durations, Some(3.0));
    // For node_exporter's textfile collector: written whole.
    let file = sb.base.join("textfile/jobwarden.prom");
    fs::create_dir_all(file.parent().expect("folder")).expect("folder");
    let out = sb.run(&["metrics", "--output", &file.display().to_string()]);
    assert_eq!(out.code(), 0, "{out:?}");
    parse(&fs::read_to_string(&file).expect("written"));
    // No daemon: said, and the ledger's counts still there.
    d.sigterm();
    d.wait_exit(secs(20));
    let (_, s) = parse(&sb.run(&["metrics"]).stdout);
    assert_eq!(value(&s, "jobwarden_daemon_up", &[]), Some(0.0));
    assert_eq!(
        value(&s, "jobwarden_claims_total", &[("project", "p")]),
        Some(3.0)
    );
    assert_eq!(
        value(&s, "jobwarden_queue_length", &[]),
        None,
        "not known without a daemon"
    );
}
