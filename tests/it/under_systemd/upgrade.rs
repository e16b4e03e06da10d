//! Upgrade with running jobs, as the README gives it: `install.sh` with a
//! newer binary while jobs run, then `systemctl restart`. The jobs go on
//! under their monitors (still the old binary) and the new daemon adopts
//! them and records their ends.

use super::{Service, install_binary, state_of};
use crate::support::*;

#[test]
fn a_new_binary_installed_while_jobs_run_then_restart_adopts_and_records_them() {
    let Some(svc) = Service::up("") else { return };
    let ids: Vec<String> = ["u1", "u2"].iter().map(|n| svc.submit("up", n)).collect();
    let monitors: Vec<i64> = ids
        .iter()
        .map(|id| {
            svc.wait_state(id, "running", secs(20))["monitor_pid"]
                .as_i64()
                .expect("monitor pid")
        })
        .collect();
    let old = svc.sys.ok("sha256sum /usr/local/bin/jobwarden");

    // A newer build: the same program with other bytes.
    svc.sys.ok(&format!(
        "cp {BIN} /var/tmp/jobwarden-new && printf 'newer build' >> /var/tmp/jobwarden-new"
    ));
    let said = install_binary(&svc.sys, "/var/tmp/jobwarden-new");
    let new = svc.sys.ok("sha256sum /usr/local/bin/jobwarden");
    assert_ne!(old, new, "install.sh put the new binary in place:\n{said}");
    for pid in &monitors {
        assert!(svc.alive(*pid), "monitor {pid} survives the install");
    }

    let old_daemon = svc.main_pid();
    svc.sys.ok("systemctl restart jobwarden");
    let daemon = svc.main_pid();
    assert!(!svc.alive(old_daemon), "the old daemon is gone");
    let exe = svc.sys.ok(&format!("readlink /proc/{daemon}/exe"));
    assert_eq!(
        exe.trim(),
        "/usr/local/bin/jobwarden",
        "the new binary runs"
    );
    svc.sys
        .ok(&format!("cmp -s /proc/{daemon}/exe /var/tmp/jobwarden-new"));
    for (id, name) in ids.iter().zip(["u1", "u2"]) {
        assert_eq!(state_of(&svc.show(id)), "running", "adopted");
        svc.release(name);
        svc.wait_state(id, "succeeded", secs(20));
        assert_eq!(svc.runs(name), 1);
        let rows = svc.recorded_of("up", name);
        assert_eq!(rows.len(), 1, "{rows:?}");
        // Its end was recorded by a daemon, after the old one was gone.
        assert_eq!(rows[0]["source"], "daemon", "{rows:?}");
    }
}
