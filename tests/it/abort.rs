//! Stopping jobs: the ABORT marker (running and queued), the escalation from
//! SIGTERM to SIGKILL over the whole process group, timeouts, and the
//! `jobwarden abort` command.

use std::fs;
use std::time::Instant;

use serde_json::Value;

use crate::support::*;

/// A job script that waits until `$OUT/release` exists.
const BLOCKER: &str = r#"echo ready
while [ ! -e "$OUT/release" ]; do sleep 0.05; done
echo released"#;

/// The `signal` events of a job, as text, in order.
fn signal_events(job: &Job) -> Vec<String> {
    job.events()
        .iter()
        .filter(|e| e["op"] == "signal")
        .map(Value::to_string)
        .collect()
}

fn wait_log_contains(sb: &Sandbox, id: &str, needle: &str) {
    wait_until(&format!("{needle:?} in job.log of {id}"), secs(10), || {
        let job = sb.job(id)?;
        (job.state() == "running" && job.log().contains(needle)).then_some(())
    });
}

#[test]
fn abort_escalates_to_sigkill_for_a_tree_that_ignores_sigterm() {
    let sb = Sandbox::new();
    let script = sb.script(
        "stubborn",
        r#"trap '' TERM
echo $$ > "$OUT/leader.pid"
sleep 1000 &
echo $! > "$OUT/child.pid"
echo ready
while :; do sleep 0.1; done"#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .unsandboxed()
            .global("abort_grace", "\"700ms\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "stubborn", "ignore SIGTERM\n");

    let job = sb.wait_state("proj", "stubborn", "running", secs(15));
    wait_log_contains(&sb, &job.id, "ready");
    let leader = wait_pid_file(&sb.out().join("leader.pid"), secs(5));
    let child = wait_pid_file(&sb.out().join("child.pid"), secs(5));
    let pgid = sb
        .job(&job.id)
        .and_then(|j| j.int_field("pgid"))
        .expect("pgid") as i32;
    assert_eq!(job.pid(), Some(leader), "pid is the command's pid");
    assert!(
        group_members(pgid).contains(&child),
        "the job runs in its own process group"
    );

    let marker = job.dir.join("ABORT");
    let t0 = Instant::now();
    fs::write(&marker, "stop\n").expect("write ABORT");
    let done = sb.wait_id(&job.id, "job to be aborted", secs(10), |j| j.is_terminal());
    let elapsed = t0.elapsed();

    assert_eq!(done.state(), "aborted", "{:#}", done.record);
    assert!(
        elapsed >= millis(600),
        "SIGKILL only after abort_grace (700ms); terminal after {elapsed:?}"
    );
    assert_eq!(
        done.str_field("signal"),
        Some("SIGKILL"),
        "{:#}",
        done.record
    );
    assert_exit_by_signal(&done.record);
    assert!(
        done.record["abort_requested_at"].is_string(),
        "{:#}",
        done.record
    );

    let signals = signal_events(&done);
    let term = signals.iter().position(|s| s.contains("SIGTERM"));
    let kill = signals.iter().position(|s| s.contains("SIGKILL"));
    assert!(
        matches!((term, kill), (Some(t), Some(k)) if t < k),
        "SIGTERM then SIGKILL signal events: {signals:?}"
    );
    let ops = check_events(&done);
    assert!(ops.iter().any(|o| o == "abort_requested"), "{ops:?}");

    wait_until("the whole process group to be gone", secs(3), || {
        group_members(pgid).is_empty().then_some(())
    });
    assert!(!pid_alive(leader) && !pid_alive(child));
    assert!(marker.exists(), "the ABORT marker is never removed");

    let done = sb.wait_done("proj", "stubborn", secs(5));
    let expected = format!("archive/aborted/proj/stubborn.{}.md", done.id);
    assert_eq!(done.str_field("archive_path"), Some(expected.as_str()));
    assert!(sb.root.join(&expected).is_file());
}

#[test]
fn abort_kills_a_forked_grandchild() {
    let sb = Sandbox::new();
    let script = sb.script(
        "forker",
        r#"sleep 1000 &
echo $! > "$OUT/grandchild.pid"
echo ready
wait"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).unsandboxed());
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "forker", "fork and wait\n");

    let job = sb.wait_state("proj", "forker", "running", secs(15));
    wait_log_contains(&sb, &job.id, "ready");
    let grandchild = wait_pid_file(&sb.out().join("grandchild.pid"), secs(5));
    assert!(pid_alive(grandchild), "grandchild runs before the abort");

    let t0 = Instant::now();
    fs::write(job.dir.join("ABORT"), "").expect("write ABORT");
    let done = sb.wait_id(&job.id, "job to be aborted", secs(10), |j| j.is_terminal());
    assert_eq!(done.state(), "aborted", "{:#}", done.record);
    assert!(
        t0.elapsed() < secs(3),
        "a job that obeys SIGTERM is aborted promptly ({:?})",
        t0.elapsed()
    );
    assert_eq!(
        done.str_field("signal"),
        Some("SIGTERM"),
        "{:#}",
        done.record
    );
    assert_exit_by_signal(&done.record);
    wait_until("the grandchild to be dead", secs(3), || {
        (!pid_alive(grandchild)).then_some(())
    });
    assert!(
        job.dir.join("ABORT").exists(),
        "the ABORT marker stays in place"
    );
}

#[test]
fn abort_while_queued_never_starts_the_job() {
    let sb = Sandbox::new();
    let script = sb.script("block", BLOCKER);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "1"));
    let _d = Daemon::start(&sb);

    sb.drop_prompt("proj", "first", "occupies the only slot\n");
    let first = sb.wait_state("proj", "first", "running", secs(15));
    sb.drop_prompt("proj", "second", "waits for the slot\n");
    let queued = sb.wait_state("proj", "second", "queued", secs(10));

    fs::write(queued.dir.join("ABORT"), "not needed any more\n").expect("write ABORT");
    let aborted = sb.wait_id(&queued.id, "queued job to be cancelled", secs(5), |j| {
        j.is_terminal()
    });
    // Nothing of it ran: it is cancelled, not aborted.
    assert_eq!(aborted.state(), "cancelled", "{:#}", aborted.record);
    assert_eq!(
        aborted.str_field("state_reason"),
        Some("cancelled by request: not needed any more"),
        "{:#}",
        aborted.record
    );
    assert!(
        aborted.record["pid"].is_null(),
        "never started: {:#}",
        aborted.record
    );
    assert!(
        aborted.record["started_at"].is_null(),
        "{:#}",
        aborted.record
    );
    assert!(
        aborted.record["exit_code"].is_null(),
        "never ran: {:#}",
        aborted.record
    );
    let first_now = sb.job(&first.id).expect("first job");
    assert_eq!(
        first_now.state(),
        "running",
        "aborting one job leaves the other alone"
    );

    fs::write(sb.out().join("release"), "").expect("release");
    let first_done = sb.wait_done("proj", "first", secs(10));
    assert_eq!(first_done.state(), "succeeded", "{:#}", first_done.record);

    let second = sb.wait_done("proj", "second", secs(5));
    assert_eq!(second.id, aborted.id);
    assert_eq!(second.state(), "cancelled");
    assert!(
        second.record["pid"].is_null(),
        "still never started: {:#}",
        second.record
    );
    let ops = second.ops();
    assert!(
        !ops.iter().any(|o| o == "started"),
        "no started event: {ops:?}"
    );
    let expected = format!("archive/cancelled/proj/second.{}.md", second.id);
    assert_eq!(second.str_field("archive_path"), Some(expected.as_str()));
    assert_eq!(
        fs::read_to_string(sb.root.join(&expected)).expect("archived"),
        "waits for the slot\n"
    );
    assert!(second.dir.join("ABORT").exists());
    assert_eq!(sb.jobs().len(), 2, "no job was created for a requeue");
}

#[test]
fn a_queued_job_s_marker_written_by_hand_is_seen_at_once_not_at_the_tick() {
    let sb = Sandbox::new();
    let script = sb.script("block", BLOCKER);
    // The tick, which reads every queued job's marker, is a minute away:
    // only the watch of the queued job's run folder can see it in time.
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script, "{name}"])
            .global("max_jobs", "1")
            .global("heartbeat_interval", "\"60s\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "first", "occupies the only slot\n");
    sb.wait_state("proj", "first", "running", secs(15));
    let mut queued = Vec::new();
    for name in ["second", "third"] {
        sb.drop_prompt("proj", name, "waits for the slot\n");
        queued.push(sb.wait_state("proj", name, "queued", secs(10)));
    }
    // Moved in, as an editor or `mv` would: the watch sees renames too.
    let staged = sb.out().join("ABORT.staged");
    fs::write(&staged, "by hand\n").expect("stage ABORT");
    fs::rename(&staged, queued[1].dir.join("ABORT")).expect("move ABORT in");
    let third = sb.wait_id(&queued[1].id, "third to be cancelled", secs(3), |j| {
        j.is_terminal()
    });
    assert_eq!(third.state(), "cancelled", "{:#}", third.record);
    fs::write(queued[0].dir.join("ABORT"), "by hand\n").expect("write ABORT");
    let second = sb.wait_id(&queued[0].id, "second to be cancelled", secs(3), |j| {
        j.is_terminal()
    });
    assert_eq!(second.state(), "cancelled", "{:#}", second.record);
    fs::write(sb.out().join("release"), "").expect("release");
    assert_eq!(sb.wait_done("proj", "first", secs(10)).state(), "succeeded");
}

#[test]
fn timeout_marks_the_job_timed_out() {
    let sb = Sandbox::new();
    let script = sb.script("slow", "echo slow; sleep 1000");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).profile("timeout", "\"1s\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "slow", "takes forever\n");

    let job = sb.wait_done("proj", "slow", secs(15));
    assert_eq!(job.state(), "timed_out", "{:#}", job.record);
    let ran_ms = job.time_ms("finished_at") - job.time_ms("started_at");
    assert!(
        (900..8000).contains(&ran_ms),
        "ran about the 1s timeout, took {ran_ms} ms"
    );
    assert_eq!(job.str_field("signal"), Some("SIGTERM"), "{:#}", job.record);
    assert_eq!(job.int_field("exit_code"), Some(143), "{:#}", job.record);
    let ops = check_events(&job);
    assert!(ops.iter().any(|o| o == "timeout"), "{ops:?}");
    let expected = format!("archive/timed_out/proj/slow.{}.md", job.id);
    assert_eq!(job.str_field("archive_path"), Some(expected.as_str()));
    assert!(sb.root.join(&expected).is_file());
    if let Some(pgid) = job.int_field("pgid") {
        wait_until("the timed-out group to be gone", secs(3), || {
            group_members(pgid as i32).is_empty().then_some(())
        });
    }
}

#[test]
fn abort_command_writes_the_marker_and_the_job_is_aborted() {
    let sb = Sandbox::new();
    let script = sb.script("block", BLOCKER);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "victim", "to be aborted from the CLI\n");
    let job = sb.wait_state("proj", "victim", "running", secs(15));

    let reason = "operator said stop";
    let out = sb.run(&["abort", &job.id, "--reason", reason]);
    assert_eq!(out.code(), 0, "abort exits 0: {out:?}");
    let marker = job.dir.join("ABORT");
    assert!(marker.is_file(), "abort wrote the ABORT marker");
    let marker_text = fs::read_to_string(&marker).expect("read marker");
    assert!(
        marker_text.contains(reason),
        "the reason is stored in the marker: {marker_text:?}"
    );

    let done = sb.wait_id(&job.id, "job to be aborted", secs(10), |j| j.is_terminal());
    assert_eq!(done.state(), "aborted", "{:#}", done.record);
    assert!(
        done.str_field("state_reason")
            .unwrap_or_default()
            .contains(reason),
        "the reason reaches the job record: {:#}",
        done.record
    );
}

#[test]
fn abort_command_refuses_unknown_and_unsafe_ids() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    fs::create_dir_all(sb.runs()).expect("runs dir");

    let unknown = "01900000-0000-7000-8000-000000000000";
    let out = sb.run(&["abort", unknown]);
    assert_ne!(out.code(), 0, "unknown job: {out:?}");
    assert!(
        !sb.run_dir(unknown).exists(),
        "no run dir is created for an unknown id"
    );
    assert!(
        out.stderr.contains(unknown),
        "the error names the id: {:?}",
        out.stderr
    );

    for bad in ["../../escape", "/tmp/jw-it-abs", "..", "abc"] {
        let out = sb.run(&["abort", bad]);
        assert_ne!(out.code(), 0, "id {bad:?} must be refused: {out:?}");
    }
    assert!(
        !sb.base.join("escape").exists(),
        "nothing written outside runs/"
    );
    assert!(!std::path::Path::new("/tmp/jw-it-abs/ABORT").exists());
    let stray: Vec<_> = sb
        .files_under(&sb.base)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "ABORT"))
        .collect();
    assert!(stray.is_empty(), "no ABORT marker anywhere: {stray:?}");
}

#[test]
fn abort_command_on_a_finished_job_changes_nothing() {
    let sb = Sandbox::new();
    let script = sb.script("ok", "echo ok");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "finished", "already done\n");
    let job = sb.wait_done("proj", "finished", secs(15));
    assert_eq!(job.state(), "succeeded");

    let out = sb.run(&["abort", &job.id]);
    assert_eq!(
        out.code(),
        1,
        "a clean no for a job that already ended: {out:?}"
    );
    assert!(
        !job.dir.join("ABORT").exists(),
        "no marker for an ended job"
    );
    let after = sb.job(&job.id).expect("record");
    assert_eq!(
        after.state(),
        "succeeded",
        "terminal states have no way out"
    );
}

/// Abort and timeout end every process the job started, also those that
/// left its process group (`setpgrp`) or session (`setsid`) and whose
/// parent exited.
#[test]
fn abort_and_timeout_kill_processes_that_left_the_job_s_group_or_session() {
    use crate::limits::{SETPGRP_ESCAPEE, SETSID_ESCAPEE, wait_escapee_gone};
    for (what, escape) in [("setsid", SETSID_ESCAPEE), ("setpgrp", SETPGRP_ESCAPEE)] {
        for ending in ["abort", "timeout"] {
            let sb = Sandbox::new();
            let script = sb.script(
                "detach",
                &format!("{escape}\necho ready\nwhile :; do sleep 0.1; done"),
            );
            let mut cfg = ConfigToml::new(&["/bin/sh", &script]).unsandboxed();
            if ending == "timeout" {
                cfg = cfg.profile("timeout", "\"3s\"");
            }
            sb.configure(&cfg);
            let _d = Daemon::start(&sb);
            sb.drop_prompt("proj", "detach", "detach\n");
            let job = sb.wait_state("proj", "detach", "running", secs(15));
            let escapee = wait_pid_file(&sb.out().join("escapee.pid"), secs(10));
            assert!(pid_alive(escapee), "{what}: the escapee runs");
            if ending == "abort" {
                fs::write(job.dir.join("ABORT"), "stop\n").expect("write ABORT");
            }
            let done = sb.wait_id(&job.id, "the job to end", secs(20), |j| j.is_terminal());
            let expected = if ending == "abort" {
                "aborted"
            } else {
                "timed_out"
            };
            assert_eq!(done.state(), expected, "{what}/{ending}: {:#}", done.record);
            wait_escapee_gone(&sb, &format!("{what}/{ending}"));
            let signals = signal_events(&done);
            assert!(
                signals
                    .iter()
                    .any(|s| s.contains("SIGTERM") && !s.contains("\"others\":0")),
                "{what}/{ending}: SIGTERM reached the escapee too: {signals:?}"
            );
        }
    }
}
