//! Jobs through `systemctl restart`, `stop` and `start`, in each shutdown
//! mode, as the unit's comments describe them: `detach` (the default)
//! leaves running jobs to their monitors and the next daemon re-adopts
//! them; `drain` makes `systemctl stop` wait for them; `abort` ends them.
//! Every prompt runs and is recorded exactly once.

use std::process::Stdio;

use super::{Service, state_of};
use crate::support::*;

/// The processes left in the unit's cgroup (pids, one per line).
fn unit_processes(svc: &Service) -> String {
    svc.sys
        .ok("cat /sys/fs/cgroup/system.slice/jobwarden.service/cgroup.procs 2>/dev/null || true")
}

#[test]
fn detach_jobs_outlive_restart_and_stop_and_the_next_daemon_adopts_and_records_them_once() {
    let Some(svc) = Service::up("") else { return };
    let a = svc.submit("p", "a");
    let b = svc.submit("p", "b");
    let monitors: Vec<i64> = [&a, &b]
        .iter()
        .map(|id| {
            let rec = svc.wait_state(id, "running", secs(20));
            rec["monitor_pid"]
                .as_i64()
                .expect("a running job names its monitor")
        })
        .collect();
    let first = svc.main_pid();

    svc.sys.ok("systemctl restart jobwarden");
    let second = svc.main_pid();
    assert!(
        second > 0 && second != first,
        "a new daemon: {first} → {second}"
    );
    assert_eq!(svc.property("ActiveState"), "active");
    for pid in &monitors {
        assert!(svc.alive(*pid), "monitor {pid} lives through the restart");
    }
    for id in [&a, &b] {
        svc.wait_journal("", &format!("re-adopted a running job job={id}"));
        assert_eq!(state_of(&svc.show(id)), "running");
    }
    // The documented, expected note about each process left running.
    for pid in &monitors {
        svc.wait_journal("", &format!("Found left-over process {pid} "));
    }

    // Stopped: the jobs go on, nothing new is claimed.
    svc.sys.ok("systemctl stop jobwarden");
    assert_eq!(svc.property("ActiveState"), "inactive");
    for pid in &monitors {
        assert!(svc.alive(*pid), "monitor {pid} lives through the stop");
    }
    let c = svc.submit("p", "c");
    svc.release("a");
    svc.wait_state(&a, "succeeded", secs(20));
    let waiting = svc.sys.ok("jobwarden jobs --json");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&waiting).expect("jobs --json");
    let row = rows.iter().find(|r| r["label"] == "p/c");
    assert_eq!(
        row.map(state_of),
        Some("waiting"),
        "not claimed while stopped: {waiting}"
    );

    svc.sys.ok("systemctl start jobwarden");
    svc.release("b");
    svc.release("c");
    svc.wait_state(&c, "succeeded", secs(20));
    svc.wait_state(&b, "succeeded", secs(20));
    for name in ["a", "b", "c"] {
        assert_eq!(svc.runs(name), 1, "{name} ran once");
        let rows = svc.recorded_of("p", name);
        assert_eq!(rows.len(), 1, "{name} recorded once: {rows:?}");
        assert_eq!(rows[0]["outcome"], "success", "{rows:?}");
    }
}

#[test]
fn drain_makes_stop_wait_for_running_jobs_and_abort_ends_them() {
    let Some(svc) = Service::up("shutdown = \"drain\"") else {
        return;
    };
    let d = svc.submit("p", "d");
    svc.wait_state(&d, "running", secs(20));
    let mut stop = svc
        .sys
        .command(&["systemctl", "stop", "jobwarden"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("systemctl stop");
    wait_until("the daemon to drain", secs(10), || {
        (svc.property("ActiveState") == "deactivating").then_some(())
    });
    // Draining: the stop waits while the job runs.
    assert!(matches!(stop.try_wait(), Ok(None)), "stop returned early");
    assert_eq!(state_of(&svc.show(&d)), "running");
    svc.release("d");
    let status = stop.wait().expect("systemctl stop");
    assert!(status.success(), "systemctl stop: {status}");
    let rec = svc.show(&d);
    assert_eq!(state_of(&rec), "succeeded", "{rec:#}");
    assert_eq!(svc.recorded_of("p", "d").len(), 1);
    assert_eq!(unit_processes(&svc).trim(), "", "nothing left running");

    // abort: stopping ends the running job, recorded as aborted.
    svc.configure("shutdown = \"abort\"");
    svc.sys.ok("systemctl start jobwarden");
    let e = svc.submit("p", "e");
    svc.wait_state(&e, "running", secs(20));
    svc.sys.ok("systemctl stop jobwarden");
    let rec = svc.show(&e);
    assert_eq!(state_of(&rec), "aborted", "{rec:#}");
    let rows = svc.recorded_of("p", "e");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(unit_processes(&svc).trim(), "", "nothing left running");
    assert_eq!(svc.runs("e"), 1);
}

/// The unit's other two ways to end running jobs: `jobwarden abort --all
/// --wait` ends them `aborted`; `systemctl kill --kill-whom=all` kills
/// every process of the unit, the jobs count as `interrupted`, and the
/// daemon systemd starts again runs their prompts once more.
#[test]
fn abort_all_ends_jobs_and_kill_whom_all_interrupts_them_for_a_requeue() {
    let Some(svc) = Service::up("") else { return };
    let first = svc.submit("k", "first");
    svc.wait_state(&first, "running", secs(20));
    let out = svc.sys.sh("jobwarden abort --all --wait");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(state_of(&svc.show(&first)), "aborted");

    let second = svc.submit("k", "second");
    svc.wait_state(&second, "running", secs(20));
    let daemon = svc.main_pid();
    svc.sys
        .ok("systemctl kill --kill-whom=all -s KILL jobwarden");
    let rec = svc.wait_job(&second, "the killed job to be interrupted", secs(30), |r| {
        state_of(r) == "interrupted"
    });
    assert!(rec["finished_at"].is_string(), "{rec:#}");
    let restarted = wait_until("systemd to start the daemon again", secs(30), || {
        let pid = svc.main_pid();
        (pid > 0 && pid != daemon).then_some(pid)
    });
    assert!(restarted > 0);
    // The prompt runs once more, as a new job.
    svc.release("second");
    wait_until("the prompt to run again and succeed", secs(30), || {
        let rows = svc.executions_of("k", "second");
        rows.iter()
            .any(|r| r["outcome"] == "success")
            .then_some(rows)
    });
    assert_eq!(svc.runs("second"), 2, "killed once, run again once");
}
