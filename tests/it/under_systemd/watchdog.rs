//! The watchdog and `Restart=on-failure`: a frozen daemon (SIGSTOP) is
//! killed and restarted by systemd once it misses its pings, a killed one
//! (SIGKILL) is brought back; either way running jobs go on, the new
//! daemon adopts them, and nothing runs twice. The shipped `WatchdogSec`
//! (30 s) is shortened here by a drop-in, as an operator would.

use super::{Service, state_of};
use crate::support::*;

/// Wait until systemd runs a daemon other than `old`, up and ready.
fn restarted(svc: &Service, old: i64) -> i64 {
    wait_until("systemd to restart the daemon", secs(30), || {
        let pid = svc.main_pid();
        (pid > 0 && pid != old && svc.property("ActiveState") == "active").then_some(pid)
    })
}

#[test]
fn a_frozen_daemon_is_restarted_by_the_watchdog_a_killed_one_by_restart_and_nothing_runs_twice() {
    let Some(svc) = Service::up("") else { return };
    svc.sys.ok(
        "mkdir -p /etc/systemd/system/jobwarden.service.d && \
         printf '[Service]\\nWatchdogSec=2s\\n' > /etc/systemd/system/jobwarden.service.d/watchdog.conf && \
         systemctl daemon-reload && systemctl restart jobwarden",
    );
    assert_eq!(svc.property("WatchdogUSec"), "2s");
    let w1 = svc.submit("wd", "w1");
    let monitor = svc.wait_state(&w1, "running", secs(20))["monitor_pid"]
        .as_i64()
        .expect("monitor pid");

    // Frozen: the pings stop; systemd aborts it and starts another.
    let frozen = svc.main_pid();
    svc.sys.ok(&format!("kill -STOP {frozen}"));
    let w2 = svc.submit("wd", "w2");
    let second = restarted(&svc, frozen);
    svc.wait_journal("", "Watchdog timeout");
    assert!(svc.alive(monitor), "the job's monitor lives on");
    svc.sys.wait_for(
        "the new daemon to adopt w1",
        secs(10),
        &format!("journalctl -u jobwarden -o cat _PID={second} | grep -q 're-adopted a running job job={w1}'"),
    );
    svc.wait_state(&w2, "running", secs(20));

    // Killed: Restart=on-failure brings it back after RestartSec.
    svc.sys
        .ok("systemctl kill -s KILL --kill-whom=main jobwarden");
    let third = restarted(&svc, second);
    svc.sys.wait_for(
        "the third daemon to adopt both",
        secs(10),
        &format!(
            "journalctl -u jobwarden -o cat _PID={third} | grep -c 're-adopted a running job' | grep -qx 2"
        ),
    );
    for (id, name) in [(&w1, "w1"), (&w2, "w2")] {
        assert_eq!(state_of(&svc.show(id)), "running");
        svc.release(name);
        svc.wait_state(id, "succeeded", secs(20));
        assert_eq!(svc.runs(name), 1, "{name} ran once");
        assert_eq!(svc.recorded_of("wd", name).len(), 1, "{name} recorded once");
    }
}
