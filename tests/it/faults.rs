//! Fault injection with real processes: the daemon killed with running jobs,
//! a restart from an upgraded binary, a backlog dropped while it was down,
//! a record whose monitor pid now belongs to a stranger, and a daemon task
//! that panics.

use std::fs;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::*;

/// Appends its name to `$OUT/ran`, then runs until `$OUT/release` exists.
const GATED: &str = r#"echo "$1" >> "$OUT/ran"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#;

fn ran(sb: &Sandbox) -> Vec<String> {
    let text = fs::read_to_string(sb.out().join("ran")).unwrap_or_default();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

#[test]
fn kill_9_of_the_daemon_with_four_jobs_running_loses_and_repeats_nothing() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate, "{name}"]).global("max_jobs", "4"));
    let mut first = Daemon::start(&sb);
    let names = ["j1", "j2", "j3", "j4"];
    for n in names {
        sb.drop_prompt("proj", n, "x\n");
    }
    for n in names {
        sb.wait_state("proj", n, "running", secs(15));
    }
    kill(Pid::from_raw(first.pid), Signal::SIGKILL).expect("kill -9 the daemon");
    first.wait_exit(secs(5));

    let _second = Daemon::start(&sb);
    fs::write(sb.out().join("release"), "").expect("release");
    for n in names {
        let job = sb.wait_done("proj", n, secs(15));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
        assert!(
            job.ops().iter().any(|o| o == "adopted"),
            "{n} was adopted: {:?}",
            job.ops()
        );
        check_events(&job);
    }
    assert_eq!(ran(&sb), names, "each job ran exactly once");
    assert_eq!(sb.jobs().len(), 4);
}

#[test]
fn restart_from_an_upgraded_binary_adopts_running_jobs_and_runs_new_ones() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate, "{name}"]));
    let mut old = Daemon::start(&sb);
    sb.drop_prompt("proj", "before", "x\n");
    let before = sb.wait_state("proj", "before", "running", secs(15));
    old.sigterm();
    assert_eq!(old.wait_exit(secs(5)).code(), Some(0));

    let upgraded = sb.base.join("bin/jobwarden-next");
    fs::copy(BIN, &upgraded).expect("install the new binary");
    let _new = Daemon::start_of(&sb, &upgraded);
    sb.drop_prompt("proj", "after", "y\n");
    sb.wait_state("proj", "after", "running", secs(15));
    fs::write(sb.out().join("release"), "").expect("release");
    let before = wait_until("the adopted job to finish", secs(15), || {
        sb.job(&before.id).filter(Job::is_done)
    });
    assert_eq!(before.state(), "succeeded", "{:#}", before.record);
    assert_eq!(sb.wait_done("proj", "after", secs(15)).state(), "succeeded");
    assert_eq!(ran(&sb), vec!["after", "before"]);
}

#[test]
fn a_thousand_prompts_dropped_while_stopped_are_each_claimed_once() {
    let sb = Sandbox::new();
    let script = sb.script("count", r#"echo "$JOBWARDEN_NAME" >> "$OUT/ran""#);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .global("max_jobs", "8")
            .global("settle", "\"50ms\""),
    );
    let dir = sb.project_dir("backlog");
    fs::create_dir_all(&dir).expect("project dir");
    for i in 0..1000 {
        fs::write(dir.join(format!("p{i:04}.prompt.md")), "x\n").expect("prompt");
    }
    // The daemon reports itself running after its first rescan, which
    // claims the whole backlog: give a loaded machine time for that.
    let mut d = Daemon::spawn(&sb, &[]);
    d.wait_ready(&sb, secs(90));
    wait_until_every(
        "all 1000 archived as succeeded",
        secs(120),
        millis(250),
        || {
            let done = sb
                .files_under(&sb.root.join("archive/succeeded/backlog"))
                .len();
            (done == 1000).then_some(())
        },
    );
    let ran = ran(&sb);
    let expected: Vec<String> = (0..1000).map(|i| format!("p{i:04}")).collect();
    assert_eq!(ran, expected, "every prompt ran exactly once");
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
}

#[test]
fn a_live_stranger_with_the_recorded_monitor_pid_is_not_mistaken_for_the_monitor() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    // A job recorded as running whose monitor pid is now someone else's
    // (this test process: alive, and certainly not a jobwarden monitor).
    let id = "01a20000-0000-7000-8000-00000000f00d";
    let dir = sb.project_dir("proj");
    fs::create_dir_all(&dir).expect("project dir");
    fs::write(dir.join("reused.running.md"), "x\n").expect("held prompt");
    let run = sb.run_dir(id);
    fs::create_dir_all(&run).expect("run dir");
    let host = nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8");
    let rec = serde_json::json!({
        "schema_version": 1, "job_id": id, "attempt": 1, "project": "proj", "name": "reused",
        "inbox_path": "inbox/proj/reused.running.md", "state": "running",
        "created_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:00.000Z",
        "started_at": "2026-01-01T00:00:00.000Z", "monitor_pid": std::process::id(),
        "monitor_start_time": 1, "pid": null, "pgid": null, "log_bytes": 0, "log_truncated": false,
        "host": host, "version": "0.1.0"
    });
    fs::write(
        run.join("job.json"),
        serde_json::to_vec(&rec).expect("json"),
    )
    .expect("job.json");

    let _d = Daemon::start(&sb);
    let old = wait_until("the stale job judged", secs(10), || {
        sb.job(id).filter(Job::is_terminal)
    });
    assert_eq!(old.state(), "interrupted", "{:#}", old.record);
    let retry = sb.wait_done_excluding("proj", "reused", &[id.to_owned()], secs(15));
    assert_eq!(retry.state(), "succeeded");
    assert_eq!(retry.int_field("attempt"), Some(2));
}

/// DESIGN §10: a panicking task takes the daemon down (exit 70, with a
/// message) instead of leaving a process that looks alive but claims
/// nothing; the running job lives on and the next daemon adopts it.
#[test]
fn a_panicking_daemon_task_stops_the_daemon_and_its_jobs_live_on() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate, "{name}"]));
    let trigger = sb.out().join("panic-now");
    let trigger_env = trigger.display().to_string();
    let mut first = Daemon::start_with_env(
        &sb,
        &[
            ("JOBWARDEN_TEST_FAULT", "daemon-tick"),
            ("JOBWARDEN_TEST_FAULT_WHEN", &trigger_env),
        ],
    );
    sb.drop_prompt("proj", "survivor", "x\n");
    let job = sb.wait_state("proj", "survivor", "running", secs(15));
    fs::write(&trigger, "").expect("arm the fault");
    let status = first.wait_exit(secs(10));
    assert_eq!(status.code(), Some(70), "{}", first.stderr());
    let stderr = first.stderr();
    assert!(
        stderr.contains("injected fault at daemon-tick") && stderr.contains("stopping so that"),
        "{stderr}"
    );
    let monitor = job.int_field("monitor_pid").expect("monitor pid") as i32;
    assert!(pid_alive(monitor), "the job's monitor outlives the daemon");

    let _second = Daemon::start(&sb);
    fs::write(sb.out().join("release"), "").expect("release");
    let done = wait_until("the adopted job to finish", secs(15), || {
        sb.job(&job.id).filter(Job::is_done)
    });
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(ran(&sb), vec!["survivor"]);
}
