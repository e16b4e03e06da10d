//! `jobwarden web` over real HTTP on the loopback, against a real daemon:
//! the token, the CSRF token of every state change, escaping of what jobs
//! wrote, the log streamed as it grows, abort, pause and `/metrics`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::*;

/// A `jobwarden web` process on a free loopback port.
pub(crate) struct WebProcess {
    child: Child,
    addr: SocketAddr,
    pub(crate) token: String,
}

impl WebProcess {
    pub(crate) fn start(sb: &Sandbox) -> WebProcess {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let child = sb
            .command(&["web", "--listen", &addr.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn web");
        wait_until("the page answers", secs(10), || {
            TcpStream::connect(addr).ok().map(|_| ())
        });
        let url = sb.run(&["web", "--print-url", "--listen", &addr.to_string()]);
        assert_eq!(url.code(), 0, "{url:?}");
        let token = url
            .stdout
            .trim()
            .rsplit_once("token=")
            .map(|(_, t)| t.to_owned())
            .expect("token in the URL");
        WebProcess { child, addr, token }
    }

    /// A request; `(status, head, body)`.
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String, String) {
        let mut s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() {
            req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        s.write_all(req.as_bytes()).expect("send");
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            unchunk(body)
        } else {
            body.to_owned()
        };
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, head.to_owned(), body)
    }

    pub(crate) fn cookie(&self) -> String {
        format!("jobwarden_token={}", self.token)
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        let cookie = self.cookie();
        let (status, _, body) = self.request("GET", path, &[("Cookie", &cookie)], "");
        (status, body)
    }

    fn post(&self, path: &str, form: &str) -> u16 {
        let cookie = self.cookie();
        self.request("POST", path, &[("Cookie", &cookie)], form).0
    }

    /// The CSRF token the page's forms carry.
    pub(crate) fn csrf(&self) -> String {
        let (_, body) = self.get("/");
        let at = body.find("name=\"csrf\" value=\"").expect("a form") + 19;
        body[at..at + 64].to_owned()
    }
}

/// A body sent in chunks (`Transfer-Encoding: chunked`), whole.
fn unchunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        body.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    body
}

impl Drop for WebProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_page_needs_its_token_and_a_link_with_it_logs_in() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    assert_eq!(web.request("GET", "/", &[], "").0, 401, "no token");
    assert_eq!(
        web.request("GET", "/", &[("Cookie", "jobwarden_token=nope")], "")
            .0,
        401
    );
    // The token with its last digit changed.
    let last = if web.token.ends_with('0') { '1' } else { '0' };
    let wrong = format!("Bearer {}{last}", &web.token[..63]);
    assert_eq!(
        web.request("GET", "/metrics", &[("Authorization", &wrong)], "")
            .0,
        401
    );
    let (status, head, _) = web.request("GET", &format!("/jobs?token={}", web.token), &[], "");
    assert_eq!(status, 303);
    assert!(
        head.contains(&format!(
            "jobwarden_token={}; HttpOnly; SameSite=Strict",
            web.token
        )),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase().contains("location: /jobs\r"),
        "{head}"
    );
    let (status, body) = web.get("/");
    assert_eq!(status, 200);
    assert!(
        body.contains("<th scope=\"row\">daemon</th><td><b class=\"o-ok\">running</b>"),
        "{body}"
    );
    let bearer = format!("Bearer {}", web.token);
    let (status, _, metrics) = web.request("GET", "/metrics", &[("Authorization", &bearer)], "");
    assert_eq!(status, 200);
    assert!(metrics.contains("jobwarden_daemon_up 1"), "{metrics}");
    // The metrics token reads /metrics and nothing else.
    let scraper = std::fs::read_to_string(sb.root.join("metrics.token")).expect("metrics.token");
    assert_ne!(scraper.trim(), web.token);
    let bearer = format!("Bearer {}", scraper.trim());
    let (status, _, metrics) = web.request("GET", "/metrics", &[("Authorization", &bearer)], "");
    assert_eq!(status, 200);
    assert!(metrics.contains("jobwarden_jobs{"), "{metrics}");
    assert_eq!(
        web.request("GET", "/", &[("Authorization", &bearer)], "").0,
        401
    );
    let csrf = web.csrf();
    let (status, _, _) = web.request(
        "POST",
        "/pause",
        &[("Authorization", &bearer)],
        &format!("csrf={csrf}"),
    );
    assert_eq!(status, 401, "the metrics token changes nothing");
    assert!(!sb.root.join("control").join("pause").exists());
    // The token files are the service user's alone.
    use std::os::unix::fs::PermissionsExt;
    for file in ["web.token", "metrics.token"] {
        let mode = std::fs::metadata(sb.root.join(file))
            .expect("token")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    // Not on another address without saying so.
    let out = sb.run(&["web", "--listen", "0.0.0.0:1", "--print-url"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("--allow-remote"), "{out:?}");
}

#[test]
fn what_jobs_wrote_is_shown_as_text_and_a_form_without_its_csrf_token_is_refused() {
    let sb = Sandbox::new();
    let job = sb.script(
        "job",
        r#"cat >/dev/null; echo "<script>alert('log')</script>"; touch "$OUT/started"; while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]));
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    sb.drop_prompt("p", "<script>alert(1)", "x\n");
    let job = sb.wait_state("p", "<script>alert(1)", "running", secs(20));
    wait_until("it printed", secs(10), || {
        sb.out().join("started").exists().then_some(())
    });
    let (_, list) = web.get("/jobs");
    assert!(list.contains("p/&lt;script&gt;alert(1)"), "{list}");
    assert!(!list.contains("<script>alert(1)"), "unescaped in the list");
    let page = format!("/jobs/{}", job.id);
    let (status, body) = web.get(&page);
    assert_eq!(status, 200);
    assert!(
        body.contains("&lt;script&gt;alert(&#39;log&#39;)&lt;/script&gt;"),
        "{body}"
    );
    assert!(!body.contains("<script>alert"), "unescaped on the job page");
    // No CSRF token, a wrong one: refused, the job runs on.
    assert_eq!(web.post(&format!("{page}/abort"), ""), 403);
    assert_eq!(
        web.post(
            &format!("{page}/abort"),
            &format!("csrf={}", "0".repeat(64))
        ),
        403
    );
    assert_never("an abort", millis(500), || {
        sb.run_dir(&job.id).join("ABORT").exists()
    });
    // A GET cannot act at all.
    assert_eq!(web.get(&format!("{page}/abort")).0, 405);
    // With it: the job ends aborted, as by `jobwarden abort`.
    let csrf = web.csrf();
    assert_eq!(
        web.post(&format!("{page}/abort"), &format!("csrf={csrf}")),
        303
    );
    let ended = sb.wait_done("p", "<script>alert(1)", secs(20));
    assert_eq!(ended.state(), "aborted");
    assert!(
        ended
            .str_field("state_reason")
            .is_some_and(|r| r.contains("from the web page")),
        "{:#}",
        ended.record
    );
    std::fs::write(sb.out().join("release"), "").expect("release");
}

#[test]
fn a_running_job_s_log_streams_as_it_grows_and_pause_and_resume_act() {
    let sb = Sandbox::new();
    let job = sb.script(
        "job",
        r#"cat >/dev/null; i=0; while [ ! -e "$OUT/release" ]; do i=$((i+1)); echo "line $i"; sleep 0.1; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]));
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    sb.drop_prompt("p", "slow", "x\n");
    let job = sb.wait_state("p", "slow", "running", secs(20));
    let mut s = TcpStream::connect(web.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET /live/jobs/{}/log?from=0 HTTP/1.1\r\nHost: x\r\nCookie: {}\r\n\r\n",
        job.id,
        web.cookie()
    )
    .expect("send");
    let mut lines = BufReader::new(s).lines();
    let mut seen = Vec::new();
    while seen.len() < 8 {
        let line = lines.next().expect("a line").expect("read");
        // The log's lines, an element each (a `state` event says the
        // job's state).
        if let Some(data) = line.strip_prefix("data: <span") {
            let data = format!("<span{data}");
            seen.extend(data.split_inclusive("</span>").map(str::to_owned));
        }
    }
    // Each line an element, numbered from the first.
    assert_eq!(
        seen[..3],
        [
            "<span class=\"l\" data-n=\"1\">line 1</span>",
            "<span class=\"l\" data-n=\"2\">line 2</span>",
            "<span class=\"l\" data-n=\"3\">line 3</span>"
        ],
        "{seen:?}"
    );
    let csrf = web.csrf();
    assert_eq!(web.post("/pause", &format!("csrf={csrf}")), 303);
    assert!(sb.root.join("control").exists(), "a pause marker");
    let status = sb.run(&["status"]);
    assert!(status.stdout.contains("paused"), "{}", status.stdout);
    assert_eq!(
        web.post("/resume", &format!("csrf={csrf}&kind=daemon")),
        303
    );
    let status = sb.run(&["status"]);
    assert!(!status.stdout.contains("paused"), "{}", status.stdout);
    // A submission the claim would refuse is refused at once, naming why,
    // and nothing is dropped.
    let cookie = web.cookie();
    let (status, _, body) = web.request(
        "POST",
        "/submit",
        &[("Cookie", &cookie)],
        &format!("csrf={csrf}&project=p&name=..%2Fx&text=hello"),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("name &quot;../x&quot;"), "{body}");
    let (status, _, body) = web.request(
        "POST",
        "/submit",
        &[("Cookie", &cookie)],
        &format!("csrf={csrf}&project=p&name=typed&profile=nope&text=hello"),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("nope"), "{body}");
    assert!(!sb.inbox().join("p/typed.prompt.md").exists());
    std::fs::write(sb.out().join("release"), "").expect("release");
    assert_eq!(sb.wait_done("p", "slow", secs(20)).state(), "succeeded");
}

#[test]
fn retry_and_cancel_from_the_page_and_the_list_filters_by_profile() {
    let sb = Sandbox::new();
    let fail = sb.script("fail", "cat >/dev/null; echo failing; exit 3");
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &fail])
            .profile("max_attempts", "1")
            .profile("cooldown", "\"1h\"")
            .extra("[profiles.other]\ncommand = [\"/bin/sh\", \"-c\", \"cat >/dev/null\"]\n"),
    );
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    sb.drop_prompt("p", "a", "x\n");
    sb.drop_prompt("p", "b", "---\nprofile: other\n---\nx\n");
    let first = sb.wait_done("p", "a", secs(20));
    assert_eq!(first.state(), "failed");
    assert_eq!(sb.wait_done("p", "b", secs(20)).state(), "succeeded");

    // The list by profile.
    let (_, other) = web.get("/jobs?profile=other");
    assert!(other.contains("p/b") && !other.contains("p/a"), "{other}");
    let (_, default) = web.get("/jobs?profile=default");
    assert!(
        default.contains("p/a") && !default.contains("p/b"),
        "{default}"
    );
    let json = sb.run(&["jobs", "--profile", "other", "--json"]);
    assert_eq!(json.code(), 0, "{json:?}");
    let rows: serde_json::Value = serde_json::from_str(&json.stdout).expect("jobs --json");
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows:#}");
    assert_eq!(rows[0]["profile"], "other", "{rows:#}");

    // Retry: refused without the CSRF token; with it, the prompt runs again
    // as attempt 2 at once (`now`), despite its hour of cooldown.
    let page = format!("/jobs/{}", first.id);
    let (_, body) = web.get(&page);
    assert!(body.contains("retry now"), "{body}");
    assert_eq!(web.post(&format!("{page}/retry"), "now=1"), 403);
    let csrf = web.csrf();
    assert_eq!(
        web.post(&format!("{page}/retry"), &format!("csrf={csrf}&now=1")),
        303
    );
    let second = sb.wait_done_excluding("p", "a", std::slice::from_ref(&first.id), secs(20));
    assert_eq!(second.record["attempt"], 2, "{:#}", second.record);
    // The same job again: another retry already put it back.
    let cookie = web.cookie();
    let (status, _, why) = web.request(
        "POST",
        &format!("{page}/retry"),
        &[("Cookie", &cookie)],
        &format!("csrf={csrf}"),
    );
    assert_eq!(status, 409, "{why}");
    assert!(why.contains("already put back"), "{why}");

    // Cancel a queued job (the daemon paused holds it) from the list.
    assert_eq!(sb.run(&["pause"]).code(), 0);
    sb.drop_prompt("p", "c", "waits\n");
    let queued = sb.wait_state("p", "c", "queued", secs(20));
    let cancel = format!("/jobs/{}/abort", queued.id);
    let (_, list) = web.get("/jobs?state=queued");
    assert!(list.contains(&cancel), "{list}");
    assert_eq!(web.post(&cancel, &format!("csrf={csrf}")), 303);
    assert_eq!(sb.wait_done("p", "c", secs(20)).state(), "cancelled");

    // Cancel a prompt waiting in the inbox: p/a dropped again waits out
    // the cooldown of its failure.
    sb.drop_prompt("p", "a", "again\n");
    let listed = wait_until("the list to show p/a deferred", secs(10), || {
        let (_, list) = web.get("/jobs?state=deferred");
        list.contains("data-key=\"waiting:p/a\"").then_some(list)
    });
    assert!(listed.contains("/waiting/cancel"), "{listed}");
    assert_eq!(web.post("/waiting/cancel", "project=p&name=a"), 403);
    assert!(
        sb.inbox().join("p/a.prompt.md").exists(),
        "kept without the token"
    );
    let (status, head, body) = web.request(
        "POST",
        "/waiting/cancel",
        &[("Cookie", &cookie)],
        &format!("csrf={csrf}&project=p&name=a"),
    );
    assert_eq!(status, 303, "{body}");
    let cancelled =
        sb.wait_done_excluding("p", "a", &[first.id.clone(), second.id.clone()], secs(20));
    assert_eq!(cancelled.state(), "cancelled");
    assert!(
        head.contains(&format!("/jobs/{}", cancelled.id)),
        "to the job's page: {head}"
    );
    let marker = std::fs::read_to_string(sb.run_dir(&cancelled.id).join("ABORT")).expect("marker");
    assert!(marker.contains("jobwarden web"), "{marker}");
    assert!(!sb.inbox().join("p/a.prompt.md").exists());
    // Gone now: a second cancel says so.
    let (status, _, why) = web.request(
        "POST",
        "/waiting/cancel",
        &[("Cookie", &cookie)],
        &format!("csrf={csrf}&project=p&name=a"),
    );
    assert_eq!(status, 409, "{why}");
    assert!(why.contains("no longer waiting"), "{why}");
    let row = wait_row(&sb, &cancelled.id);
    assert_eq!(row["outcome"], "cancelled", "{row:#}");
}

#[test]
fn a_port_already_taken_is_named_with_the_flag_that_chooses_another() {
    let sb = Sandbox::new();
    std::fs::create_dir_all(&sb.root).expect("root");
    let taken = TcpListener::bind("127.0.0.1:0").expect("a port to hold");
    let addr = taken.local_addr().expect("addr").to_string();

    let out = sb.run(&["web", "--listen", &addr]);

    assert_eq!(out.code(), 2, "{out:?}");
    for said in [addr.as_str(), "already in use", "--listen"] {
        assert!(out.stderr.contains(said), "{said:?} in {out:?}");
    }
    assert!(
        !sb.root.join("web.token").exists() && out.stdout.is_empty(),
        "nothing made before the port was had: {out:?}"
    );
}
