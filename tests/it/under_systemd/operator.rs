//! The operator's path: a user in the `jobwarden` group drops prompts and
//! `ABORT` markers as themselves, without root, as the README tells them
//! to; a user outside the group can do neither, nor read what jobs wrote.

use super::{Service, state_of};
use crate::support::*;

/// `script` as `user` (a login's groups, the README's `JOBWARDEN_HOME`).
fn as_user(svc: &Service, user: &str, script: &str) -> std::process::Output {
    svc.sys.sh(&format!(
        "runuser -u {user} -- env JOBWARDEN_HOME=/var/lib/jobwarden sh -c '{script}'"
    ))
}

#[test]
fn a_member_of_the_group_submits_drops_and_aborts_and_an_outsider_cannot() {
    let Some(svc) = Service::up("") else { return };
    svc.sys
        .ok("useradd -m -G jobwarden op && useradd -m outsider");

    // Through the CLI, then by hand, with the umask the README gives.
    let out = as_user(
        &svc,
        "op",
        "umask 007; echo first | jobwarden submit - --project ops --name first",
    );
    assert!(out.status.success(), "{out:?}");
    let first = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = as_user(
        &svc,
        "op",
        "umask 007; mkdir -p /var/lib/jobwarden/inbox/ops && \
         echo second > /var/lib/jobwarden/inbox/ops/second.prompt.md.tmp && \
         mv /var/lib/jobwarden/inbox/ops/second.prompt.md.tmp /var/lib/jobwarden/inbox/ops/second.prompt.md",
    );
    assert!(out.status.success(), "{out:?}");
    svc.wait_state(&first, "running", secs(20));
    let second = wait_until("the dropped prompt to be claimed", secs(20), || {
        let listed = svc.sys.ok("jobwarden jobs --json");
        let rows: Vec<serde_json::Value> = serde_json::from_str(&listed).ok()?;
        rows.into_iter()
            .find(|r| r["label"] == "ops/second" && state_of(r) == "running")
            .and_then(|r| r["id"].as_str().map(str::to_owned))
    });

    // The outsider: no submit, no marker, no reading.
    let out = as_user(
        &svc,
        "outsider",
        "echo nope | jobwarden submit - --project ops --name nope",
    );
    assert!(!out.status.success(), "an outsider submitted: {out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("ermission denied"), "{said}");
    for script in [
        format!("touch /var/lib/jobwarden/runs/{first}/ABORT"),
        format!("cat /var/lib/jobwarden/runs/{first}/job.log"),
        "ls /var/lib/jobwarden/inbox".to_string(),
    ] {
        let out = as_user(&svc, "outsider", &script);
        assert!(
            !out.status.success(),
            "an outsider could: {script}: {out:?}"
        );
    }
    assert_eq!(state_of(&svc.show(&first)), "running");

    // The member aborts one with the CLI and the other by hand.
    let out = as_user(&svc, "op", &format!("jobwarden abort {first}"));
    assert!(out.status.success(), "{out:?}");
    let out = as_user(
        &svc,
        "op",
        &format!("echo by hand > /var/lib/jobwarden/runs/{second}/ABORT"),
    );
    assert!(out.status.success(), "{out:?}");
    for id in [&first, &second] {
        let rec = svc.wait_job(id, "aborted by the operator", secs(20), |r| {
            state_of(r) == "aborted"
        });
        assert!(rec["finished_at"].is_string(), "{rec:#}");
    }
    let rows = svc.recorded(2, |_| true);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|r| r["outcome"] == "aborted"), "{rows:?}");
    // The operator reads the logs the jobs wrote.
    let out = as_user(&svc, "op", &format!("jobwarden logs {first}"));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("start first"),
        "{out:?}"
    );
}
