//! The web page's own unit, installed by `install.sh` beside the daemon's:
//! `systemctl enable --now jobwarden-web` serves the page on the loopback
//! as the service's user, behind the token `--print-url` gives, and acts
//! on jobs through the same files as the CLI.

use super::Service;
use crate::support::secs;

/// `curl` inside the system: the status code, then the body.
fn curl(svc: &Service, args: &str) -> String {
    svc.sys
        .ok(&format!("curl -s -w '\\n%{{http_code}}' {args}"))
}

#[test]
fn the_web_unit_serves_the_page_as_the_service_user_behind_its_token() {
    let Some(svc) = Service::up("") else { return };
    svc.sys.ok("systemctl enable --now jobwarden-web");
    svc.sys.ok(
        "for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:8765/ && exit 0; sleep 0.1; done; exit 1",
    );
    let pid = svc
        .sys
        .ok("systemctl show -p MainPID --value jobwarden-web");
    let owner = svc.sys.ok(&format!("ps -o user= -p {}", pid.trim()));
    assert_eq!(
        owner.trim(),
        "jobwarden",
        "the page runs as the service's user"
    );
    let token_file = svc.sys.ok("stat -c '%U %a' /var/lib/jobwarden/web.token");
    assert_eq!(token_file.trim(), "jobwarden 600");
    let url = svc.sys.ok(
        "runuser -u jobwarden -- env JOBWARDEN_HOME=/var/lib/jobwarden JOBWARDEN_CONFIG=/etc/jobwarden/config.toml \
         jobwarden web --print-url",
    );
    let token = url
        .trim()
        .rsplit_once("token=")
        .map(|(_, t)| t.to_owned())
        .expect("token");
    assert!(curl(&svc, "http://127.0.0.1:8765/").ends_with("401"));
    let page = curl(
        &svc,
        &format!("-H 'Cookie: jobwarden_token={token}' http://127.0.0.1:8765/"),
    );
    assert!(page.ends_with("200"), "{page}");
    assert!(
        page.contains("<th scope=\"row\">daemon</th><td><b class=\"o-ok\">running</b>"),
        "{page}"
    );
    let metrics = curl(
        &svc,
        &format!("-H 'Authorization: Bearer {token}' http://127.0.0.1:8765/metrics"),
    );
    assert!(metrics.contains("jobwarden_daemon_up 1"), "{metrics}");
    // A scraper's copy of metrics.token, as docs/metrics.md makes it.
    let scraper = svc.sys.ok(
        "install -m 0640 /var/lib/jobwarden/metrics.token /var/tmp/scrape.token && \
         curl -s -H \"Authorization: Bearer $(cat /var/tmp/scrape.token)\" http://127.0.0.1:8765/metrics",
    );
    assert!(scraper.contains("jobwarden_jobs{"), "{scraper}");

    // Abort a running job from the page: the daemon's monitor honours it.
    let id = svc.submit("web", "held");
    svc.wait_state(&id, "running", secs(30));
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.get(..64))
        .expect("a form with its CSRF token")
        .to_owned();
    let posted = curl(
        &svc,
        &format!(
            "-o /dev/null -H 'Cookie: jobwarden_token={token}' --data 'csrf={csrf}' http://127.0.0.1:8765/jobs/{id}/abort"
        ),
    );
    assert!(posted.ends_with("303"), "{posted}");
    svc.wait_state(&id, "aborted", secs(30));
    let marker = svc
        .sys
        .ok(&format!("cat /var/lib/jobwarden/runs/{id}/ABORT"));
    assert!(marker.contains("jobwarden web"), "{marker}");
}
