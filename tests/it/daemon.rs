//! The daemon process itself: single instance (and independent instances on
//! different roots), daemon.json and `status`, shutdown on SIGTERM with
//! running jobs detached, refusing a bad config at start.

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
    let sb = Sandbox::new();
    // A mount, not a symlink: a symlinked inbox is refused before this
    // check (see `untrusted`).
    fs::create_dir_all(sb.inbox()).expect("inbox");
    let Some(_mounted) = crate::storage::Tmpfs::mount(&sb.inbox(), "1m") else {
        return;
    };
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

/// Three prompts dropped at once all run and succeed.
fn three_prompts_succeed(sb: &Sandbox) {
    for name in ["a", "b", "c"] {
        sb.drop_prompt("proj", name, "found by a rescan\n");
    }
    for name in ["a", "b", "c"] {
        let job = sb.wait_done("proj", name, secs(10));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    }
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
    three_prompts_succeed(&sb);
}

/// Two daemons on two roots: each claims only its own inbox, each is alive
/// in its own `status`, and stopping one leaves the other working.
#[test]
fn daemons_on_different_roots_never_interfere() {
    let (a, b) = (Sandbox::new(), Sandbox::new());
    for sb in [&a, &b] {
        let script = sb.script(
            "who",
            r#"echo "$JOBWARDEN_RUN_DIR" > "$OUT/$JOBWARDEN_NAME""#,
        );
        sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    }
    let mut da = Daemon::start(&a);
    let _db = Daemon::start(&b);
    a.drop_prompt("proj", "in-a", "x\n");
    b.drop_prompt("proj", "in-b", "y\n");
    assert_eq!(a.wait_done("proj", "in-a", secs(15)).state(), "succeeded");
    assert_eq!(b.wait_done("proj", "in-b", secs(15)).state(), "succeeded");
    assert_eq!(a.jobs().len(), 1, "root a ran only its own prompt");
    assert_eq!(b.jobs().len(), 1, "root b ran only its own prompt");
    let ran = |sb: &Sandbox, name: &str| fs::read_to_string(sb.out().join(name)).ok();
    for (sb, name) in [(&a, "in-a"), (&b, "in-b")] {
        let run_dir = ran(sb, name).unwrap_or_default();
        assert!(
            run_dir.starts_with(&*sb.root.to_string_lossy()),
            "{name} ran under its own root: {run_dir:?}"
        );
    }

    for (sb, pid) in [(&a, da.pid), (&b, _db.pid)] {
        let out = sb.run(&["status", "--json"]);
        let st: Value = serde_json::from_str(&out.stdout).expect("status json");
        assert_eq!(st["daemon"]["alive"], true, "{st:#}");
        assert_eq!(st["daemon"]["pid"], pid, "{st:#}");
    }
    da.sigterm();
    assert_eq!(da.wait_exit(secs(10)).code(), Some(0));
    let out = a.run(&["status", "--json"]);
    let st: Value = serde_json::from_str(&out.stdout).expect("status json");
    assert_eq!(st["daemon"]["alive"], false, "{st:#}");
    b.drop_prompt("proj", "after", "z\n");
    assert_eq!(b.wait_done("proj", "after", secs(15)).state(), "succeeded");
}

/// `status` with no daemon: a normal answer (exit 3, as `systemctl
/// is-active`), in both forms.
#[test]
fn status_without_a_daemon_answers_not_running() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    let human = sb.run(&["status"]);
    assert_eq!(human.code(), 3, "{}", human.stderr);
    assert!(human.stdout.contains("not running"), "{}", human.stdout);
    assert!(
        human.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        human.stdout
    );
    let out = sb.run(&["status", "--json"]);
    assert_eq!(out.code(), 3, "{}", out.stderr);
    let st: Value = serde_json::from_str(&out.stdout).expect("status json");
    assert_eq!(st["daemon"]["alive"], false, "{st:#}");
    assert_eq!(st["daemon"]["pid"], Value::Null, "{st:#}");
    assert_eq!(st["storage"]["condition"], "ok", "{st:#}");
    for key in ["root", "version", "daemon", "storage"] {
        assert!(st.get(key).is_some(), "{key} missing: {st:#}");
    }
}

/// A `daemon.json` that cannot be parsed is moved aside and reported at
/// start, not silently replaced; `status` names it meanwhile.
#[test]
fn a_corrupt_daemon_json_is_moved_aside_not_reset() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    fs::write(sb.root.join("daemon.json"), "{\"pid\": 12").expect("corrupt daemon.json");
    let out = sb.run(&["status", "--json"]);
    assert_eq!(out.code(), 3, "no daemon runs: {}", out.stderr);
    let st: Value = serde_json::from_str(&out.stdout).expect("status json");
    let problem = st["daemon"]["problem"].as_str().unwrap_or_default();
    assert!(problem.contains("daemon.json"), "{st:#}");

    let d = Daemon::start(&sb);
    let aside: Vec<_> = fs::read_dir(&sb.root)
        .expect("root")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("daemon.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "moved aside once");
    assert_eq!(
        fs::read_to_string(aside[0].path()).expect("aside"),
        "{\"pid\": 12"
    );
    assert!(d.stderr().contains("moved aside"), "{}", d.stderr());
    assert_eq!(read_daemon_json(&sb)["pid"], d.pid);
}

/// A wrapper that runs the daemon in a user namespace whose inotify limit
/// `knob` (`max_inotify_instances`, `max_inotify_watches`) is `value`, so
/// the limit is exhausted for this daemon alone. `None` (with the reason
/// printed) where user namespaces are not available.
fn with_inotify_limit(sb: &Sandbox, knob: &str, value: u32) -> Option<std::path::PathBuf> {
    let probe = std::process::Command::new("unshare")
        .args(["-U", "-r", "sh", "-c"])
        .arg(format!("echo {value} > /proc/sys/user/{knob}"))
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot set an inotify limit in a user namespace here");
        return None;
    }
    let wrapper = sb.base.join("bin/limited-jobwarden");
    let script = format!(
        "#!/bin/sh\nexec unshare -U -r sh -c 'echo {value} > /proc/sys/user/{knob} && exec \"$0\" \"$@\"' {} \"$@\"\n",
        q(BIN)
    );
    fs::write(&wrapper, script).expect("wrapper");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).expect("chmod");
    Some(wrapper)
}

/// No inotify instance to be had: the daemon says so once, lives on
/// rescans, and still claims every prompt.
#[test]
fn inotify_unavailable_falls_back_to_rescans_and_says_so_once() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]).global("rescan_interval", "\"300ms\""));
    let Some(wrapper) = with_inotify_limit(&sb, "max_inotify_instances", 0) else {
        return;
    };
    let d = Daemon::start_of(&sb, &wrapper);
    assert_eq!(read_daemon_json(&sb)["watch"], "rescan");
    three_prompts_succeed(&sb);
    let log = d.stderr();
    assert_eq!(
        log.matches("falling back to rescanning").count(),
        1,
        "{log}"
    );
}

/// Watches run out (inbox folders beyond the limit): prompts in folders
/// that could not be watched are still claimed by rescans, which then come
/// every 2 s at most whatever `rescan_interval` says, and the loss is said
/// once.
#[test]
fn inotify_watch_limit_falls_back_to_rescans_and_says_so_once() {
    let sb = Sandbox::new();
    sb.configure(
        &ConfigToml::new(&["cat"])
            .global("rescan_interval", "\"1h\"")
            .global("settle", "\"100ms\""),
    );
    let Some(wrapper) = with_inotify_limit(&sb, "max_inotify_watches", 2) else {
        return;
    };
    let d = Daemon::start_of(&sb, &wrapper);
    let projects = ["p1", "p2", "p3", "p4"];
    for p in projects {
        sb.drop_prompt(p, "job", "in a folder past the watch limit\n");
    }
    for p in projects {
        let job = sb.wait_done(p, "job", secs(15));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    }
    wait_until("daemon.json says watching is degraded", secs(5), || {
        Some(read_daemon_json(&sb)).filter(|v| v["watch"] == "rescan")
    });
    let log = d.stderr();
    assert_eq!(
        log.matches("rescanning the inbox").count(),
        1,
        "said once: {log}"
    );
}
