//! `systemctl reload jobwarden`: it returns once the daemon has applied
//! the changed config (the unit's `ExecReload=jobwarden reload` waits for
//! the daemon's answer, which it gives between `RELOADING=1` and
//! `READY=1`), and a broken config makes it fail, with the reason in the
//! journal, while the old config stays in force.

use super::{Service, state_of};
use crate::support::*;

/// The `waits` the live daemon gives for job `id` (`jobs --json`).
fn waits(svc: &Service, id: &str) -> String {
    let listed = svc.sys.ok("jobwarden jobs --json");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&listed).expect("jobs --json");
    rows.iter()
        .find(|r| r["id"] == id)
        .and_then(|r| r["waits"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn reload_applies_a_changed_config_before_it_returns_and_refuses_a_broken_one_keeping_the_old() {
    let Some(svc) = Service::up("max_jobs = 1") else {
        return;
    };
    let r1 = svc.submit("rl", "r1");
    svc.wait_state(&r1, "running", secs(20));
    let r2 = svc.submit("rl", "r2");
    wait_until("r2 to wait for the only slot", secs(20), || {
        (waits(&svc, &r2) == "max_jobs 1 reached").then_some(())
    });

    svc.configure("max_jobs = 2");
    svc.sys.ok("systemctl reload jobwarden");
    // Applied before `systemctl reload` returned.
    let status: serde_json::Value =
        serde_json::from_str(&svc.sys.ok("jobwarden status --json")).expect("status --json");
    assert_eq!(
        status["config"]["last_reload"]["result"], "applied",
        "{status:#}"
    );
    svc.wait_journal("", "config reloaded: max_jobs: 1 → 2");
    assert_eq!(svc.property("ActiveState"), "active");
    svc.wait_state(&r2, "running", secs(20));

    let r3 = svc.submit("rl", "r3");
    wait_until("r3 to wait for a slot", secs(20), || {
        (waits(&svc, &r3) == "max_jobs 2 reached").then_some(())
    });

    // Broken: refused, said in the journal, the old config in force.
    svc.configure("max_jobs = 0");
    let out = svc.sys.sh("systemctl reload jobwarden");
    assert!(
        !out.status.success(),
        "a refused config fails the reload: {out:?}"
    );
    svc.wait_journal("", "max_jobs = 0: must be between 1 and 4096");
    assert_eq!(svc.property("ActiveState"), "active", "still running");
    let status = svc.sys.ok("jobwarden status");
    assert!(status.contains("refused"), "{status}");
    wait_until("r3 to wait under the old max_jobs", secs(20), || {
        (waits(&svc, &r3) == "max_jobs 2 reached").then_some(())
    });

    svc.configure("max_jobs = 3");
    svc.sys.ok("systemctl reload jobwarden");
    svc.wait_state(&r3, "running", secs(20));
    for (id, name) in [(&r1, "r1"), (&r2, "r2"), (&r3, "r3")] {
        svc.release(name);
        svc.wait_state(id, "succeeded", secs(20));
        assert_eq!(svc.runs(name), 1);
    }
    assert_eq!(state_of(&svc.show(&r3)), "succeeded");
}
