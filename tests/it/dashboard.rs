//! The web page as an operations dashboard, over real HTTP against a real
//! daemon and real jobs: the headers every answer carries and the POSTs
//! another site cannot make, the filters the live list keeps, the end of
//! a large log, the page following `reload`, a job's log with its
//! colours and lines, the actions that apply and the ones that do not,
//! the JSON API. What needs a browser is in `browser.rs`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;
use crate::web::WebProcess;

/// The value of header `name` in a response's head.
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

/// The first `data:` event of a server-sent stream at `path`.
fn first_event(web: &WebProcess, path: &str) -> String {
    let mut s = TcpStream::connect(web.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nCookie: {}\r\n\r\n",
        web.cookie()
    )
    .expect("send");
    let mut data = String::new();
    for line in BufReader::new(s).lines() {
        let line = line.expect("read");
        if let Some(d) = line.strip_prefix("data: ") {
            data.push_str(d);
            data.push('\n');
        } else if line.is_empty() && !data.is_empty() {
            break;
        }
    }
    data
}

#[test]
fn every_answer_carries_the_security_headers_and_another_sites_post_is_refused() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    let cookie = web.cookie();
    let login = format!("/jobs?token={}&state=failed", web.token);
    for (what, (status, head, _)) in [
        (
            "a page",
            web.request("GET", "/", &[("Cookie", &cookie)], ""),
        ),
        ("the login redirect", web.request("GET", &login, &[], "")),
        ("a refusal", web.request("GET", "/", &[], "")),
        (
            "the API",
            web.request("GET", "/api/status", &[("Cookie", &cookie)], ""),
        ),
    ] {
        assert!(status != 0, "{what}: {head}");
        let csp = header(&head, "content-security-policy").unwrap_or_default();
        assert!(csp.contains("frame-ancestors 'none'"), "{what}: {head}");
        assert!(csp.contains("default-src 'none'"), "{what}: {head}");
        assert_eq!(
            header(&head, "x-frame-options").as_deref(),
            Some("DENY"),
            "{what}"
        );
        assert_eq!(
            header(&head, "cache-control").as_deref(),
            Some("no-store"),
            "{what}"
        );
        assert_eq!(
            header(&head, "x-content-type-options").as_deref(),
            Some("nosniff"),
            "{what}"
        );
        assert_eq!(
            header(&head, "referrer-policy").as_deref(),
            Some("no-referrer"),
            "{what}"
        );
    }
    // The login goes on to the page asked for, the rest of its query kept.
    let (_, head, _) = web.request("GET", &login, &[], "");
    assert_eq!(
        header(&head, "location").as_deref(),
        Some("/jobs?state=failed"),
        "{head}"
    );

    // Each page's inline script and style carry its answer's own nonce.
    let (_, head, body) = web.request("GET", "/", &[("Cookie", &cookie)], "");
    let csp = header(&head, "content-security-policy").expect("csp");
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("a nonce")
        .to_owned();
    assert!(
        body.contains(&format!("<script nonce=\"{nonce}\">")),
        "{body}"
    );
    assert!(
        body.contains(&format!("<style nonce=\"{nonce}\">")),
        "{body}"
    );
    assert!(
        !body.contains(" style=\""),
        "no style attribute the CSP would block"
    );
    let (_, again, _) = web.request("GET", "/", &[("Cookie", &cookie)], "");
    assert_ne!(
        header(&again, "content-security-policy"),
        Some(csp),
        "a fresh nonce"
    );

    // A form posted from another site: refused whatever it carries.
    let csrf = web.csrf();
    let form = format!("csrf={csrf}");
    let host = web.addr().to_string();
    for (k, v) in [
        ("Origin", "http://127.0.0.1:1"),
        ("Origin", "null"),
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Site", "same-site"),
    ] {
        let (status, _, body) =
            web.request("POST", "/pause", &[("Cookie", &cookie), (k, v)], &form);
        assert_eq!(status, 403, "{k}: {v}: {body}");
        assert!(
            !sb.root.join("control/pause").exists(),
            "{k}: {v}: nothing paused"
        );
    }
    let origin = format!("http://{host}");
    let (status, head, _) = web.request(
        "POST",
        "/pause",
        &[
            ("Cookie", &cookie),
            ("Origin", &origin),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        &form,
    );
    assert_eq!(status, 303, "from the page itself: {head}");
    assert_eq!(header(&head, "location").as_deref(), Some("/?done=paused"));
    let (_, _, page) = web.request("GET", "/?done=paused", &[("Cookie", &cookie)], "");
    assert!(page.contains("class=\"notice\""), "the action said: {page}");
    assert!(
        page.contains("class=\"banner\""),
        "the pause on every page: {page}"
    );
    let (_, _, other) = web.request("GET", "/jobs", &[("Cookie", &cookie)], "");
    assert!(other.contains("paused: everything"), "{other}");
}

#[test]
fn the_live_list_keeps_its_filters_and_its_rows_hold_no_clock() {
    let sb = Sandbox::new();
    sb.configure(
        &ConfigToml::new(&["/bin/sh", "-c", "cat >/dev/null"])
            .extra("[profiles.slow]\ncommand = [\"/bin/sh\", \"-c\", \"cat >/dev/null\"]\n"),
    );
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    sb.drop_prompt("p", "fast", "x\n");
    sb.drop_prompt("p", "lazy", "---\nprofile: slow\n---\nx\n");
    sb.wait_done("p", "fast", secs(20));
    sb.wait_done("p", "lazy", secs(20));

    let (_, page) = web.get("/jobs?profile=slow&project=p");
    // The stream's address is an attribute, which the browser decodes.
    let at = page.find("data-live=\"").expect("a live list") + 11;
    let live = page[at..].split('"').next().expect("its address");
    assert!(live.contains("profile=slow"), "{live}");
    let live = live.replace("&amp;", "&");
    let rows: Value = serde_json::from_str(first_event(&web, &live).trim()).expect("rows as JSON");
    let keys: Vec<String> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r[1].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(keys.len(), 1, "{rows:#}");
    assert!(keys[0].contains("p/lazy"), "{rows:#}");
    // What a row says of time is a <time> the page keeps current: a row
    // sent twice is the same row.
    assert!(keys[0].contains("<time datetime="), "{}", keys[0]);
    assert!(!keys[0].contains(" ago"), "{}", keys[0]);
    assert_eq!(first_event(&web, &live), first_event(&web, &live));
}

#[test]
fn a_large_finished_log_shows_its_end_and_links_the_whole_of_it() {
    let sb = Sandbox::new();
    // 12,000 lines, about 600 KiB, coloured and CRLF-ended, then the error.
    let job = sb.script(
        "job",
        r#"cat >/dev/null
i=0; while [ $i -lt 12000 ]; do printf 'line %05d of the work, padded out to about fifty bytes\r\n' $i; i=$((i+1)); done
printf '\033[31mthe error at the end\033[0m\r\n'
exit 3"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).profile("max_attempts", "1"));
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    sb.drop_prompt("p", "big", "x\n");
    let job = sb.wait_done("p", "big", secs(60));
    assert_eq!(job.state(), "failed");
    let (status, page) = web.get(&format!("/jobs/{}", job.id));
    assert_eq!(status, 200);
    assert!(
        page.contains("<span class=\"c1\">the error at the end</span>"),
        "the end, its colour kept"
    );
    assert!(page.contains("id=\"log-cut\""), "the cut is said");
    assert!(
        page.contains(&format!("/jobs/{}/log", job.id)),
        "the whole log linked"
    );
    // Whole lines, numbered as in the file, none doubled by its CR LF.
    let last = "data-n=\"12001\"><span class=\"c1\">the error";
    assert!(page.contains(last), "numbered from the file's start");
    let first_shown = page.find("<span class=\"l\" data-n=\"").expect("lines");
    let n: u64 = page[first_shown + 24..]
        .split('"')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("its number");
    assert!(n > 1, "its beginning is not shown");
    let line = format!("data-n=\"{n}\">line {:05} of the work", n - 1);
    assert!(
        page.contains(&line),
        "the first shown is a whole line: {line}"
    );
    assert!(!page.contains("\r"), "no CR shown");
    // The whole log, raw.
    let (status, raw) = web.get(&format!("/jobs/{}/log", job.id));
    assert_eq!(status, 200);
    assert!(raw.starts_with("line 00000 of the work"), "{}", &raw[..60]);
    assert!(raw.contains("the error at the end"));
}

#[test]
fn the_page_follows_reload_and_refuses_a_pause_of_no_profile() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/sh", "-c", "cat >/dev/null"]));
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    let (_, form) = web.get("/submit");
    assert!(!form.contains("value=\"later\""), "{form}");
    let csrf = web.csrf();
    // A profile the config does not define pauses nothing: refused.
    let cookie = web.cookie();
    let (status, _, why) = web.request(
        "POST",
        "/pause",
        &[("Cookie", &cookie)],
        &format!("csrf={csrf}&kind=profile&name=later"),
    );
    assert_eq!(status, 400, "{why}");
    assert!(why.contains("no such profile"), "{why}");
    assert!(!sb.root.join("control/pause-profile/later").exists());

    sb.configure(
        &ConfigToml::new(&["/bin/sh", "-c", "cat >/dev/null"])
            .extra("[profiles.later]\ncommand = [\"/bin/sh\", \"-c\", \"cat >/dev/null\"]\n"),
    );
    let out = sb.run(&["reload"]);
    assert_eq!(out.code(), 0, "{out:?}");
    wait_until("the page to offer the new profile", secs(10), || {
        web.get("/submit")
            .1
            .contains("value=\"later\"")
            .then_some(())
    });
    let (status, _, body) = web.request(
        "POST",
        "/submit",
        &[("Cookie", &cookie)],
        &format!("csrf={csrf}&project=p&name=new&profile=later&text=hello"),
    );
    assert_eq!(status, 303, "{body}");
    let job = sb.wait_done("p", "new", secs(20));
    assert_eq!(job.str_field("profile"), Some("later"), "{:#}", job.record);
    let (status, _, _) = web.request(
        "POST",
        "/pause",
        &[("Cookie", &cookie)],
        &format!("csrf={csrf}&kind=profile&name=later"),
    );
    assert_eq!(status, 303);

    // A config edited but not reloaded is not the daemon's: not followed.
    sb.configure(
        &ConfigToml::new(&["/bin/sh", "-c", "cat >/dev/null"])
            .extra("[profiles.unloaded]\ncommand = [\"true\"]\n"),
    );
    assert_never(
        "the page taking a config the daemon did not",
        millis(1500),
        || web.get("/submit").1.contains("value=\"unloaded\""),
    );
}

#[test]
fn unknown_jobs_are_404_pages_and_actions_apply_only_where_they_mean_something() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/sh", "-c", "cat >/dev/null"]));
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    for path in [
        "/jobs/no-such-job",
        "/jobs/..%2Fetc",
        "/nowhere",
        "/jobs/no-such-job/log",
    ] {
        let (status, body) = web.get(path);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(
            !body.contains(&sb.root.display().to_string()),
            "{path}: no path: {body}"
        );
        assert!(!body.contains("os error"), "{path}: {body}");
    }
    let (status, _, body) = web.request(
        "GET",
        "/api/jobs/no-such-job",
        &[("Cookie", &web.cookie())],
        "",
    );
    assert_eq!(status, 404);
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["error"],
        "no such job"
    );

    sb.drop_prompt("p", "fine", "x\n");
    let job = sb.wait_done("p", "fine", secs(20));
    let (_, page) = web.get(&format!("/jobs/{}", job.id));
    assert!(
        !page.contains("/ack\""),
        "nothing to acknowledge on a success: {page}"
    );
    assert!(page.contains("/retry\""), "{page}");
    // Aborting what already ended says so, on the job's page.
    let csrf = web.csrf();
    let cookie = web.cookie();
    let (status, head, _) = web.request(
        "POST",
        &format!("/jobs/{}/abort", job.id),
        &[("Cookie", &cookie)],
        &format!("csrf={csrf}"),
    );
    assert_eq!(status, 303, "{head}");
    let to = header(&head, "location").expect("where to");
    assert_eq!(to, format!("/jobs/{}?done=ended", job.id));
    let (_, page) = web.get(&to);
    assert!(page.contains("had already ended"), "{page}");

    // The API: the job, its events, the list and the status.
    let api = |path: &str| -> Value {
        let (status, _, body) = web.request("GET", path, &[("Cookie", &cookie)], "");
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    };
    assert_eq!(api(&format!("/api/jobs/{}", job.id))["state"], "succeeded");
    let events = api(&format!("/api/jobs/{}/events", job.id));
    assert!(
        events["events"].as_array().is_some_and(|e| e.len() >= 3),
        "{events:#}"
    );
    let list = api("/api/jobs?state=succeeded");
    assert_eq!(list["total"], 1, "{list:#}");
    assert_eq!(list["jobs"][0]["id"], job.id.as_str(), "{list:#}");
    let history = api("/api/history?project=p&since=1h");
    assert_eq!(
        history["executions"][0]["outcome"], "success",
        "{history:#}"
    );
    let status = api("/api/status");
    assert_eq!(status["daemon_running"], true, "{status:#}");
    assert_eq!(status["jobs_by_state"]["succeeded"], 1, "{status:#}");
    let (status, _, _) = web.request("GET", "/api/status", &[], "");
    assert_eq!(status, 401, "the API needs the token");
}

#[test]
fn the_list_pages_sorts_and_retries_the_failed_in_bulk() {
    let sb = Sandbox::new();
    let fail = sb.script("fail", "cat >/dev/null; exit 3");
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &fail])
            .profile("max_attempts", "1")
            .global("max_jobs", "8"),
    );
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    let names: Vec<String> = (0..105).map(|i| format!("n{i:03}")).collect();
    for n in &names {
        sb.drop_prompt("bulk", n, "x\n");
    }
    wait_until("105 failed jobs", secs(120), || {
        let (_, _, body) = web.request(
            "GET",
            "/api/jobs?state=failed",
            &[("Cookie", &web.cookie())],
            "",
        );
        let v: Value = serde_json::from_str(&body).ok()?;
        (v["total"] == 105).then_some(())
    });
    let (_, first) = web.get("/jobs?state=failed&sort=prompt");
    assert!(first.contains("page 1 of 2 · 105 jobs"), "{first}");
    assert!(
        first.contains(">bulk/n000<") && !first.contains(">bulk/n104<"),
        "sorted by prompt"
    );
    let (_, second) = web.get("/jobs?state=failed&sort=prompt&page=2");
    assert!(
        second.contains(">bulk/n104<") && !second.contains(">bulk/n000<"),
        "the rest"
    );
    // The bulk retry of what the page shows: 100 jobs retried.
    let at = first.find("action=\"/bulk/retry\"").expect("a bulk retry");
    let form = &first[at..];
    let ids_at = form.find("name=\"ids\" value=\"").expect("its ids") + 18;
    let ids = form[ids_at..].split('"').next().expect("ids").to_owned();
    assert_eq!(ids.split(',').count(), 100);
    let csrf = web.csrf();
    let cookie = web.cookie();
    let (status, head, body) = web.request(
        "POST",
        "/bulk/retry",
        &[("Cookie", &cookie)],
        &format!(
            "csrf={csrf}&now=1&ids={}&back=%2Fjobs%3Fstate%3Dfailed",
            ids.replace(',', "%2C")
        ),
    );
    assert_eq!(status, 303, "{body}");
    assert_eq!(
        header(&head, "location").as_deref(),
        Some("/jobs?state=failed&done=retried&n=100")
    );
    wait_until("the retried to run as attempt 2", secs(120), || {
        let (_, _, body) = web.request(
            "GET",
            "/api/jobs?state=failed&page=1",
            &[("Cookie", &cookie)],
            "",
        );
        let v: Value = serde_json::from_str(&body).ok()?;
        (v["total"] == 205).then_some(())
    });
}

#[test]
fn the_queue_chart_and_the_overview_show_the_jobs_waiting_now() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/sh", "-c", "cat >/dev/null"]));
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    assert_eq!(sb.run(&["pause"]).code(), 0);
    for i in 0..10 {
        sb.drop_prompt("q", &format!("job{i}"), "x\n");
    }
    wait_until("ten jobs queued", secs(20), || {
        let (_, _, body) = web.request(
            "GET",
            "/api/jobs?state=queued",
            &[("Cookie", &web.cookie())],
            "",
        );
        let v: Value = serde_json::from_str(&body).ok()?;
        (v["total"] == 10).then_some(())
    });
    for range in ["1h", "24h", "7d"] {
        let (_, history) = web.get(&format!("/history?range={range}"));
        assert!(history.contains("now: 10</text>"), "{range}: {history}");
    }
    // Why each waits, as the daemon says at its next heartbeat.
    let overview = wait_until("the overview to say why each waits", secs(10), || {
        let (_, page) = web.get("/");
        (page.matches("paused (daemon)").count() == 10).then_some(page)
    });
    assert!(overview.contains("class=\"banner\""), "{overview}");
}

/// A careless job (unsandboxed, with the daemon's uid) that swaps its log
/// for a FIFO, its events for garbage and plants a symlink as its raw log:
/// every page and stream about it still answers at once, showing nothing
/// it should not.
#[test]
fn a_job_that_swaps_its_files_for_fifos_and_garbage_never_hangs_the_page() {
    let sb = Sandbox::new();
    let job = sb.script(
        "vandal",
        r#"cat >/dev/null
echo "before"
rm -f "$JOBWARDEN_RUN_DIR/job.log"; mkfifo "$JOBWARDEN_RUN_DIR/job.log"
printf '{ not json\n\x1b[31m<script>x</script>\n' >> "$JOBWARDEN_RUN_DIR/events.jsonl"
touch "$OUT/vandalised"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).unsandboxed());
    let _d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    sb.drop_prompt("p", "vandal", "x\n");
    let job = sb.wait_state("p", "vandal", "running", secs(20));
    wait_until("the job to vandalise its files", secs(10), || {
        sb.out().join("vandalised").exists().then_some(())
    });
    for path in [
        format!("/jobs/{}", job.id),
        format!("/jobs/{}/log", job.id),
        format!("/api/jobs/{}/events", job.id),
        "/".to_owned(),
        "/jobs".to_owned(),
    ] {
        let (status, body) = web.get(&path);
        assert!(status == 200 || status == 404, "{path}: {status}: {body}");
        assert!(!body.contains("<script>x"), "{path}: unescaped");
    }
    let first = first_event_within(&web, &format!("/live/jobs/{}/log?from=0", job.id));
    assert!(first.is_some(), "the log's stream answers (its state)");
    std::fs::write(sb.out().join("release"), "").expect("release");
    sb.wait_done("p", "vandal", secs(20));
}

/// The first event of a stream, if one comes within 5 s.
fn first_event_within(web: &WebProcess, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(web.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nCookie: {}\r\n\r\n",
        web.cookie()
    )
    .expect("send");
    BufReader::new(s)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("data: ").map(str::to_owned))
}

/// A live list keeps its ledger between looks, and follows the file when
/// another one is put in its place (as `history repair` does): the job
/// the daemon records in the new file shows in the same stream.
#[test]
fn a_live_list_follows_a_ledger_file_put_in_the_old_ones_place() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/sh", "-c", "cat >/dev/null"]));
    let mut d = Daemon::start(&sb);
    let web = WebProcess::start(&sb);
    sb.drop_prompt("p", "before", "x\n");
    let before = sb.wait_done("p", "before", secs(20));
    wait_row(&sb, &before.id);

    let mut s = TcpStream::connect(web.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET /live/jobs HTTP/1.1\r\nHost: x\r\nCookie: {}\r\n\r\n",
        web.cookie()
    )
    .expect("send");
    // Every line the stream sends, data or keep-alive (at least one each
    // 15 s), so that a wait for rows can look at its deadline.
    let mut lines = BufReader::new(s).lines().map_while(Result::ok);
    let first = lines
        .find_map(|l| l.strip_prefix("data: ").map(str::to_owned))
        .expect("the first rows");
    assert!(first.contains("p/before"), "{first}");

    // The ledger put aside with its sidecars, a copy put in its place.
    d.sigterm();
    d.wait_exit(secs(10));
    let db = sb.root.join("ledger.db");
    let copy = sb.root.join("ledger.copy");
    rusqlite::Connection::open(&db)
        .and_then(|c| c.execute("VACUUM INTO ?1", [copy.to_string_lossy()]))
        .expect("copy the ledger");
    for suffix in ["", "-wal", "-shm"] {
        let from = sb.root.join(format!("ledger.db{suffix}"));
        if from.exists() {
            std::fs::rename(&from, sb.root.join(format!("ledger.aside{suffix}"))).expect("aside");
        }
    }
    std::fs::rename(&copy, &db).expect("the copy in its place");

    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "after", "x\n");
    let after = sb.wait_done("p", "after", secs(20));
    wait_row(&sb, &after.id);
    let deadline = std::time::Instant::now() + secs(20);
    let seen = lines.find(|l| {
        std::time::Instant::now() > deadline || (l.starts_with("data: ") && l.contains("p/after"))
    });
    assert!(
        seen.is_some_and(|l| l.contains("p/after")),
        "the stream did not show the job recorded in the new file within 20 s"
    );
}
