//! The benchmark harness's own plumbing (its figures are never asserted:
//! they depend on the machine): it refuses unknown scenarios naming the
//! known ones and a history size that is not a number, skips pueue when it
//! is not installed saying how to get it, its job helpers stamp the shared
//! monotonic clock, and started as `jobwarden` it is jobwarden.

use std::os::unix::process::CommandExt;
use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_jobwarden-bench");

#[test]
fn unknown_scenarios_are_refused_naming_the_known_ones() {
    let out = Command::new(BENCH).arg("warp-speed").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for name in [
        "claim-latency",
        "abort-latency",
        "throughput",
        "syscalls",
        "idle",
        "queries",
        "burst",
        "footprint",
        "startup",
        "pueue",
        "all",
    ] {
        assert!(err.contains(name), "{name}: {err}");
    }
}

#[test]
fn a_history_size_that_is_not_a_number_is_refused_naming_it() {
    let out = Command::new(BENCH)
        .args(["startup", "--history", "lots"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--history") && err.contains("\"lots\""),
        "{err}"
    );
}

#[test]
fn pueue_is_skipped_saying_how_to_get_it_when_it_is_not_on_path() {
    let sb = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BENCH)
        .args(["pueue", "--json"])
        .env("PATH", sb.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cargo install pueue --locked"), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let figures = report["figures"].as_array().expect("figures");
    assert_eq!(figures.len(), 1, "{report}");
    assert_eq!(figures[0]["scenario"], "pueue");
    assert_eq!(figures[0]["unit"], "skipped");
}

#[test]
fn the_stamp_helper_writes_the_monotonic_clock_and_runs_as_jobwarden() {
    let sb = tempfile::tempdir().expect("tempdir");
    let file = sb.path().join("t.stamp");
    let status = Command::new(BENCH)
        .args(["stamp", &file.to_string_lossy()])
        .status()
        .expect("stamp");
    assert!(status.success());
    let stamp: u64 = std::fs::read_to_string(&file)
        .expect("stamp file")
        .trim()
        .parse()
        .expect("a number");
    let uptime_ns = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
        .map(|s| (s * 1e9) as u64)
        .expect("uptime");
    // CLOCK_MONOTONIC counts from boot, like /proc/uptime (within a few s).
    assert!(
        stamp.abs_diff(uptime_ns) < 5_000_000_000,
        "{stamp} vs {uptime_ns}"
    );
    let out = Command::new(BENCH)
        .arg0("jobwarden")
        .arg("--version")
        .output()
        .expect("as jobwarden");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("jobwarden "));
}

#[test]
fn the_startup_scenario_runs_through_daemon_restarts_with_monitors_kept_between_jobs() {
    // Each round starts a daemon, waits for its job, stops it and waits
    // for the job's monitor to leave (an idle monitor waits for its next
    // job until its daemon is gone): it must finish, with every figure.
    let sb = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BENCH)
        .args(["startup", "--history", "20", "--json"])
        .env("TMPDIR", sb.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let figures = report["figures"].as_array().expect("figures");
    let figure = |name: &str| {
        figures
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {report}"))
    };
    assert_eq!(figure("finished jobs on disk")["value"], 20.0, "{report}");
    assert!(
        figure("start → job, long history (median)")["value"].is_number(),
        "{report}"
    );
}
