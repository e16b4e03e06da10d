//! The daemon process itself: single instance, daemon.json, shutdown on
//! SIGTERM with running jobs detached, refusing a bad config at start.

use std::fs;
use std::time::Instant;

use serde_json::Value;

use crate::support::*;

fn read_daemon_json(sb: &Sandbox) -> Value {
    let bytes = fs::read(sb.root.join("daemon.json")).expect("daemon.json");
    serde_json::from_slice(&bytes).expect("daemon.json parses")
}

#[test]
fn second_daemon_on_the_same_root_is_refused() {
    let sb = Sandbox::new();
    let script = sb.script("ok", "echo ok");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let mut first = Daemon::start(&sb);

    let mut second = Daemon::spawn(&sb, &[]);
    let status = second.wait_exit(secs(10));
    assert_eq!(
        status.code(),
        Some(2),
        "second daemon exits 2: {}",
        second.stderr()
    );
    assert!(
        second.stderr().contains("daemon.lock"),
        "stderr mentions daemon.lock: {}",
        second.stderr()
    );

    assert!(first.is_running(), "the first daemon is unaffected");
    assert_eq!(
        read_daemon_json(&sb)["pid"],
        first.pid,
        "daemon.json still names the first"
    );
    sb.drop_prompt("proj", "still-works", "after the refused start\n");
    let job = sb.wait_done("proj", "still-works", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
}

#[test]
fn daemon_json_names_pid_version_and_a_live_heartbeat() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    let d = Daemon::start(&sb);

    let info = read_daemon_json(&sb);
    assert_eq!(info["pid"], d.pid, "{info:#}");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"), "{info:#}");
    let started = parse_rfc3339_ms(info["started_at"].as_str().expect("started_at"));
    let first_hb = parse_rfc3339_ms(info["heartbeat_at"].as_str().expect("heartbeat_at"));
    assert!(started <= first_hb, "{info:#}");
    assert!(
        sb.inbox().is_dir() && sb.runs().is_dir(),
        "the daemon creates its folders"
    );
    assert!(sb.root.join("daemon.lock").exists());

    wait_until("daemon.json heartbeat_at to advance", secs(10), || {
        let bytes = fs::read(sb.root.join("daemon.json")).ok()?;
        let v: Value = serde_json::from_slice(&bytes).ok()?;
        let hb = parse_rfc3339_ms(v["heartbeat_at"].as_str()?);
        (hb > first_hb).then_some(())
    });
}

#[test]
fn sigterm_stops_the_daemon_but_a_running_job_completes() {
    let sb = Sandbox::new();
    let script = sb.script(
        "survivor",
        r#"echo before
while [ ! -e "$OUT/release" ]; do sleep 0.05; done
echo "after release""#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("proj", "survivor", "outlive the daemon\n");
    let job = sb.wait_state("proj", "survivor", "running", secs(15));
    let pid = job.pid().expect("pid");
    let monitor = job.int_field("monitor_pid").expect("monitor_pid") as i32;
    assert_ne!(monitor, d.pid, "the monitor is its own process");
    let daemon_session = session_id(d.pid).expect("daemon session");
    let monitor_session = session_id(monitor).expect("monitor session");
    assert_ne!(
        monitor_session, daemon_session,
        "the monitor is detached in its own session"
    );

    let t0 = Instant::now();
    d.sigterm();
    let status = d.wait_exit(secs(5));
    assert_eq!(
        status.code(),
        Some(0),
        "daemon exits 0 on SIGTERM: {}",
        tail(&d.stderr(), 30)
    );
    assert!(t0.elapsed() < secs(3), "promptly: {:?}", t0.elapsed());

    let now = sb.job(&job.id).expect("job record");
    assert_eq!(
        now.state(),
        "running",
        "the job keeps running: {:#}",
        now.record
    );
    assert!(pid_alive(pid), "job process survives the daemon");
    assert!(pid_alive(monitor), "monitor survives the daemon");

    fs::write(sb.out().join("release"), "").expect("release");
    let done = sb.wait_done("proj", "survivor", secs(15));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(done.record["exit_code"], 0);
    assert!(
        done.log().contains("after release"),
        "the log goes on: {:?}",
        done.log()
    );
    let archive = done.str_field("archive_path").expect("archive_path");
    assert!(
        sb.root.join(archive).is_file(),
        "the monitor archived the prompt"
    );
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
    wait_until("the monitor to exit", secs(5), || {
        (!pid_alive(monitor)).then_some(())
    });
}

#[test]
fn daemon_refuses_to_start_with_an_invalid_config() {
    let sb = Sandbox::new();
    sb.write_config("max_jobs = 2\nbogus_setting = true\n");
    let mut d = Daemon::spawn(&sb, &[]);
    let status = d.wait_exit(secs(10));
    assert_eq!(status.code(), Some(2), "stderr: {}", d.stderr());
    assert!(
        d.stderr().contains("bogus_setting"),
        "names the key: {}",
        d.stderr()
    );
}

#[test]
fn prompts_dropped_before_the_daemon_starts_are_run() {
    let sb = Sandbox::new();
    let script = sb.script("ok", "echo ok");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    sb.drop_prompt("early", "one", "was here first\n");
    sb.drop_prompt("", "two", "also early\n");
    let _d = Daemon::start(&sb);
    for (project, name) in [("early", "one"), ("", "two")] {
        let job = sb.wait_done(project, name, secs(15));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    }
}

#[test]
fn inbox_on_another_filesystem_is_refused_naming_both_paths() {
    let shm = std::path::Path::new("/dev/shm");
    let same_fs = |a: &std::path::Path, b: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(a).expect("stat").dev() == fs::metadata(b).expect("stat").dev()
    };
    let sb = Sandbox::new();
    if !shm.is_dir() || same_fs(shm, &sb.root) {
        eprintln!("skipped: no second filesystem at /dev/shm to put the inbox on");
        return;
    }
    let elsewhere = tempfile::tempdir_in(shm).expect("tempdir on /dev/shm");
    std::os::unix::fs::symlink(elsewhere.path(), sb.root.join("inbox")).expect("symlink inbox");
    sb.configure(&ConfigToml::new(&["true"]));

    let mut d = Daemon::spawn(&sb, &[]);
    let status = d.wait_exit(secs(10));
    assert_eq!(status.code(), Some(2), "refused: {}", d.stderr());
    let err = d.stderr();
    assert!(err.contains("different filesystems"), "{err}");
    assert!(
        err.contains(&sb.root.join("inbox").display().to_string()),
        "names the inbox: {err}"
    );
    assert!(
        err.contains(&sb.root.join("runs").display().to_string()),
        "names runs/: {err}"
    );
}

#[test]
fn rescan_only_watch_still_claims_every_prompt_and_says_so() {
    let sb = Sandbox::new();
    let cfg = ConfigToml::new(&["cat"])
        .global("watch", "\"rescan\"")
        .global("rescan_interval", "\"300ms\"")
        .global("settle", "\"100ms\"");
    sb.configure(&cfg);
    let _d = Daemon::start(&sb);
    assert_eq!(read_daemon_json(&sb)["watch"], "rescan");
    for name in ["a", "b", "c"] {
        sb.drop_prompt("proj", name, "found by a rescan\n");
    }
    for name in ["a", "b", "c"] {
        let job = sb.wait_done("proj", name, secs(10));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    }
}
