//! The unit's hardening as shipped lets a job work: it writes its own
//! work folder, `/tmp`, and a repository once the README's drop-in
//! (`ReadWritePaths=/srv/repos`) names it; `/usr` and `/etc` stay
//! read-only to it even where their permissions would let it write, and
//! `/home` is hidden; the root is read-only to it but for its workdir (its
//! own sandbox). An API key set in the same drop-in reaches a job
//! whose profile passes it through.

use super::{JW, Service, state_of};
use crate::support::*;

/// Tries to write each place; one line per place into `try-<name>`:
/// `ok <path>` or `no <path>: <error>`.
const TRY: &str = r#"#!/bin/sh
{
for t in "$PWD/by-job" "$JOBWARDEN_RUN_DIR/by-job-in-run-folder" /var/lib/jobwarden/by-job /var/lib/jobwarden/daemon.json /tmp/by-job-$1 /usr/local/jw-open/by-job /etc/jw-open/by-job /srv/repos/app/by-job-$1; do
    if err=$( (echo x > "$t") 2>&1 ); then echo "ok $t"; else echo "no $t: $err"; fi
done
if [ -e /home/jw-seen ]; then echo "seen /home"; else echo "hidden /home"; fi
echo "key=$JW_API_KEY"
} > /var/tmp/jw/try-$1
"#;

/// A profile running [`TRY`], routed for `sb/*` (its own work folder) and
/// `repo/*` (the repository's checkout).
const ROUTES: &str = r#"
[profiles.try]
command = ["/bin/sh", "/var/tmp/jw/try.sh", "{name}"]
env_passthrough = ["JW_API_KEY"]

[[route]]
match = "repo/**"
profile = "try"
workdir = "/srv/repos/app"

[[route]]
match = "sb/**"
profile = "try"
"#;

/// What job `name` (id `id`) could write, once it succeeded.
fn tried(svc: &Service, id: &str, name: &str) -> String {
    let rec = svc.wait_job(id, "the job to end", secs(20), |r| {
        TERMINAL.contains(&state_of(r))
    });
    assert_eq!(state_of(&rec), "succeeded", "{rec:#}");
    svc.sys.ok(&format!("cat {JW}/try-{name}"))
}

/// What the `limits` event in `events --json` output says of the sandbox.
pub fn sandbox_of(events: &str) -> String {
    let listed: serde_json::Value = serde_json::from_str(events).unwrap_or_default();
    listed["events"]
        .as_array()
        .and_then(|all| all.iter().find(|e| e["op"] == "limits"))
        .and_then(|e| e["sandbox"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn line<'a>(report: &'a str, path_end: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.split(':').next().is_some_and(|p| p.ends_with(path_end)))
        .unwrap_or_else(|| panic!("no line for {path_end}: {report}"))
}

#[test]
fn a_job_writes_its_workdir_and_a_listed_repository_never_usr_or_etc() {
    let Some(svc) = Service::up(ROUTES) else {
        return;
    };
    // Places whose permissions allow it: only the sandbox says no.
    svc.sys.ok(&format!(
        "install -d -m 1777 /usr/local/jw-open /etc/jw-open /home/jw-seen && \
         install -d -g jobwarden -m 2775 /srv/repos /srv/repos/app && \
         cat > {JW}/try.sh <<'EOF'\n{TRY}EOF"
    ));

    let own = svc.submit("sb", "own");
    let report = tried(&svc, &own, "own");
    assert!(line(&report, "/work/by-job").starts_with("ok "), "{report}");
    assert!(
        line(&report, "/tmp/by-job-own").starts_with("ok "),
        "{report}"
    );
    assert!(report.contains("hidden /home"), "{report}");
    for place in [
        "/usr/local/jw-open/by-job",
        "/etc/jw-open/by-job",
        "/srv/repos/app/by-job-own",
    ] {
        let l = line(&report, place);
        assert!(
            l.starts_with("no ") && l.contains("Read-only file system"),
            "{report}"
        );
    }

    assert!(report.contains("key=\n"), "{report}");
    // The job's own sandbox: the root is read-only to it but for its
    // workdir, whatever the unit allows the service.
    for place in [
        "/by-job-in-run-folder",
        "/var/lib/jobwarden/by-job",
        "/var/lib/jobwarden/daemon.json",
    ] {
        let l = line(&report, place);
        assert!(
            l.starts_with("no ") && l.contains("Read-only file system"),
            "{report}"
        );
    }
    let events = svc.sys.ok(&format!("jobwarden events {own} --json"));
    assert_eq!(
        sandbox_of(&events),
        "namespaces",
        "the job ran in its sandbox: {events}"
    );
    let status = svc.sys.ok("jobwarden status");
    assert!(
        status.contains("sandbox") && status.contains("namespaces"),
        "{status}"
    );

    // The README's drop-in for repositories and an agent's API key.
    svc.sys.ok(
        "mkdir -p /etc/systemd/system/jobwarden.service.d && \
         printf '[Service]\\nReadWritePaths=/srv/repos\\nEnvironment=JW_API_KEY=k-123\\n' > /etc/systemd/system/jobwarden.service.d/repos.conf && \
         systemctl daemon-reload && systemctl restart jobwarden",
    );
    let repo = svc.submit("repo", "edit");
    let report = tried(&svc, &repo, "edit");
    assert!(
        line(&report, "/srv/repos/app/by-job").starts_with("ok "),
        "{report}"
    );
    assert!(
        line(&report, "/srv/repos/app/by-job-edit").starts_with("ok "),
        "{report}"
    );
    for place in ["/usr/local/jw-open/by-job", "/etc/jw-open/by-job"] {
        let l = line(&report, place);
        assert!(
            l.starts_with("no ") && l.contains("Read-only file system"),
            "{report}"
        );
    }
    svc.sys.ok("test -f /srv/repos/app/by-job-edit");
    assert!(report.contains("key=k-123\n"), "{report}");
}
