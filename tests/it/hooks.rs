//! `[[notify]]` hooks against the real daemon: a command hook (a real
//! script reading the notice on its stdin), webhooks (a real HTTP listener
//! on the loopback, answering as told), retries with backoff, a hook that
//! hangs (killed at its timeout, while claims and jobs go on), `all_done`
//! once a batch drains, `needs_attention` and `cooldown`, and `jobwarden
//! notify test`.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::support::*;

/// A job that succeeds unless its prompt says `fail`.
const JOB: &str =
    r#"body=$(cat); case "$body" in *fail*) echo "it failed" >&2; exit 3;; esac; echo ok"#;

/// A hook script appending each notice (its stdin) and its arguments to
/// `out/notices`, one JSON line and one argument line each.
fn recorder(sb: &Sandbox) -> String {
    sb.script(
        "recorder",
        r#"body=$(cat); printf '%s\n' "$body" >> "$OUT/notices"; printf '%s\n' "$*" >> "$OUT/args""#,
    )
}

/// [`JOB`] with an hour of cooldown, and the recorder told `on`.
fn with_an_hour_of_cooldown(sb: &Sandbox, on: &[&str]) -> ConfigToml {
    let job = sb.script("job", JOB);
    let hook = recorder(sb);
    let on: Vec<String> = on.iter().map(|e| q(e)).collect();
    ConfigToml::new(&["/bin/sh", &job])
        .profile("cooldown", "\"1h\"")
        .extra(&format!(
            "[[notify]]\nname = \"rec\"\non = [{}]\ncommand = {}\n",
            on.join(", "),
            q_argv(&["/bin/sh", &hook])
        ))
}

fn notices(sb: &Sandbox) -> Vec<Value> {
    fs::read_to_string(sb.out().join("notices"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("notice {l:?}: {e}")))
        .collect()
}

fn events_of(job: &Job, op: &str) -> Vec<Value> {
    job.events().into_iter().filter(|e| e["op"] == op).collect()
}

/// A loopback HTTP server answering each request with the next status of
/// `statuses` (then 200), keeping what it was sent.
struct Listener {
    url: String,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl Listener {
    fn start(statuses: &[u16]) -> Listener {
        let server = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/hook", server.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (kept, statuses) = (seen.clone(), statuses.to_vec());
        std::thread::spawn(move || {
            let mut statuses = statuses.into_iter();
            for stream in server.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut head = String::new();
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&line);
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                kept.lock()
                    .expect("lock")
                    .push((head, String::from_utf8_lossy(&body).into_owned()));
                let status = statuses.next().unwrap_or(200);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-length: 4\r\nconnection: close\r\n\r\nnope"
                );
            }
        });
        Listener { url, seen }
    }

    fn requests(&self) -> Vec<(String, String)> {
        self.seen.lock().expect("lock").clone()
    }
}

#[test]
fn a_command_hook_is_told_each_end_it_asked_for_with_the_notice_on_stdin() {
    let sb = Sandbox::new();
    let job = sb.script("job", JOB);
    let hook = recorder(&sb);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).extra(&format!(
        "[[notify]]\nname = \"rec\"\non = [\"failed\", \"succeeded\"]\ncommand = {}\n",
        q_argv(&["/bin/sh", &hook, "{event}", "{project}/{name}", "{job_id}"])
    )));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "good", "fine\n");
    let good = sb.wait_done("p", "good", secs(20));
    sb.drop_prompt("p", "bad", "fail\n");
    let bad = sb.wait_done("p", "bad", secs(20));
    let got = wait_until("two notices", secs(20), || {
        let n = notices(&sb);
        (n.len() == 2).then_some(n)
    });
    let of = |id: &str| {
        got.iter()
            .find(|n| n["job"]["id"] == id)
            .unwrap_or_else(|| panic!("no notice of {id}: {got:?}"))
            .clone()
    };
    let g = of(&good.id);
    assert_eq!(g["event"], "succeeded");
    assert_eq!(g["hook"], "rec");
    assert_eq!(g["job"]["state"], "succeeded");
    assert_eq!(g["job"]["project"], "p");
    assert!(g["job"]["duration_ms"].is_u64(), "{g:#}");
    assert!(g["summary"].is_null());
    let b = of(&bad.id);
    assert_eq!(b["event"], "failed");
    assert_eq!(b["job"]["exit_code"], 3);
    assert_eq!(b["job"]["outcome"], "failure");
    // The hook writes its arguments after its notice: wait for them.
    let line = format!("failed p/bad {}", bad.id);
    wait_until("the hook's arguments", secs(10), || {
        let args = fs::read_to_string(sb.out().join("args")).unwrap_or_default();
        args.contains(&line).then_some(())
    });
    // Each delivery is in the job's events.
    let done = wait_until("the delivery recorded", secs(10), || {
        sb.job(&bad.id)
            .filter(|j| !events_of(j, "notified").is_empty())
    });
    let ev = &events_of(&done, "notified")[0];
    assert_eq!(ev["hook"], "rec");
    assert_eq!(ev["event"], "failed");
    assert_eq!(ev["attempts"], 1);
    let shown = sb.run(&["show", &bad.id]);
    assert!(
        shown.stdout.contains("rec"),
        "show names the hook: {}",
        shown.stdout
    );
}

#[test]
fn a_webhook_gets_the_notice_with_its_token_and_a_failing_one_is_retried_then_recorded() {
    let sb = Sandbox::new();
    let job = sb.script("job", JOB);
    let token = sb.base.join("token");
    fs::write(&token, "s3cret\n").expect("token");
    // Answers 500 twice, then 200.
    let flaky = Listener::start(&[500, 500]);
    // Nothing listens there.
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://{}/hook", closed.local_addr().expect("addr"));
    drop(closed);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).extra(&format!(
        "[[notify]]\nname = \"flaky\"\non = [\"failed\"]\nwebhook = {}\nbearer_token_file = {}\nretries = 3\n\n\
         [[notify]]\nname = \"dead\"\non = [\"failed\"]\nwebhook = {}\nretries = 1\ntimeout = \"2s\"\n",
        q(&flaky.url),
        q(&token.display().to_string()),
        q(&dead),
    )));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "bad", "fail\n");
    let bad = sb.wait_done("p", "bad", secs(20));
    let done = wait_until("both deliveries recorded", secs(30), || {
        sb.job(&bad.id)
            .filter(|j| events_of(j, "notified").len() + events_of(j, "notify_failed").len() == 2)
    });
    let ok = &events_of(&done, "notified")[0];
    assert_eq!(ok["hook"], "flaky");
    assert_eq!(ok["attempts"], 3, "two failures, then delivered");
    let failed = &events_of(&done, "notify_failed")[0];
    assert_eq!(failed["hook"], "dead");
    assert_eq!(failed["attempts"], 2, "the first try and one retry");
    assert!(
        failed["error"].as_str().is_some_and(|e| e.contains(&dead)),
        "{failed}"
    );
    let requests = flaky.requests();
    assert_eq!(requests.len(), 3);
    let (head, body) = &requests[2];
    assert!(head.starts_with("POST /hook HTTP/1.1"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("authorization: bearer s3cret"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    let notice: Value = serde_json::from_str(body).expect("JSON body");
    assert_eq!(notice["event"], "failed");
    assert_eq!(notice["hook"], "flaky");
    assert_eq!(notice["job"]["id"], bad.id.as_str());
}

#[test]
fn a_hook_that_hangs_is_killed_at_its_timeout_while_jobs_go_on() {
    let sb = Sandbox::new();
    let job = sb.script("job", JOB);
    let hang = sb.script("hang", r#"echo $$ >> "$OUT/hook-pids"; exec sleep 60"#);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).extra(&format!(
        "[[notify]]\nname = \"hang\"\non = [\"succeeded\"]\ncommand = {}\ntimeout = \"1s\"\nretries = 0\n",
        q_argv(&["/bin/sh", &hang])
    )));
    let _d = Daemon::start(&sb);
    for n in ["a", "b", "c"] {
        sb.drop_prompt("p", n, "fine\n");
    }
    // The jobs end while their hooks still hang.
    for n in ["a", "b", "c"] {
        assert_eq!(sb.wait_done("p", n, secs(20)).state(), "succeeded");
    }
    for n in ["a", "b", "c"] {
        let job = sb.jobs_for("p", n).remove(0);
        let done = wait_until("the hung delivery recorded", secs(20), || {
            sb.job(&job.id)
                .filter(|j| !events_of(j, "notify_failed").is_empty())
        });
        let ev = &events_of(&done, "notify_failed")[0];
        assert!(
            ev["error"].as_str().is_some_and(|e| e.contains("killed")),
            "{ev}"
        );
    }
    let pids = fs::read_to_string(sb.out().join("hook-pids")).expect("pids");
    for pid in pids.lines() {
        let gone = || !std::path::Path::new(&format!("/proc/{pid}")).exists();
        wait_until("the hung hook is gone", secs(5), || gone().then_some(()));
    }
}

#[test]
fn all_done_is_told_once_with_the_batch_and_attention_and_cooldown_as_they_happen() {
    let sb = Sandbox::new();
    sb.configure(&with_an_hour_of_cooldown(
        &sb,
        &["all_done", "needs_attention", "cooldown"],
    ));
    let _d = Daemon::start(&sb);
    for (n, body) in [("a", "fine\n"), ("b", "fail\n"), ("c", "fine\n")] {
        sb.drop_prompt("p", n, body);
    }
    let bad = sb.wait_done("p", "b", secs(20));
    let all_done = wait_until("all_done", secs(20), || {
        notices(&sb).into_iter().find(|n| n["event"] == "all_done")
    });
    let summary = &all_done["summary"];
    assert_eq!(summary["jobs"], 3, "{all_done:#}");
    assert_eq!(summary["by_state"]["succeeded"], 2);
    assert_eq!(summary["by_state"]["failed"], 1);
    assert_eq!(summary["needs_attention"][0], bad.id.as_str());
    assert!(all_done["job"].is_null());
    let attention: Vec<Value> = notices(&sb)
        .into_iter()
        .filter(|n| n["event"] == "needs_attention")
        .collect();
    assert_eq!(attention.len(), 1);
    assert_eq!(attention[0]["job"]["id"], bad.id.as_str());
    // Told once: nothing more while nothing happens.
    assert_never("a second all_done", secs(3), || {
        notices(&sb)
            .iter()
            .filter(|n| n["event"] == "all_done")
            .count()
            > 1
    });
    // The failed prompt dropped again waits out its cooldown: told.
    sb.drop_prompt("p", "b", "fail\n");
    let cooldown = wait_until("cooldown", secs(20), || {
        notices(&sb).into_iter().find(|n| n["event"] == "cooldown")
    });
    assert_eq!(
        cooldown["job"]["id"],
        bad.id.as_str(),
        "the run that started it"
    );
    assert!(
        cooldown["job"]["cooldown_until"].is_string(),
        "{cooldown:#}"
    );
    assert_eq!(cooldown["job"]["cooldown_ms"], 3_600_000);
}

#[test]
fn notify_test_fires_a_hook_by_hand_and_says_how_it_went() {
    let sb = Sandbox::new();
    let hook = recorder(&sb);
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://{}/hook", closed.local_addr().expect("addr"));
    drop(closed);
    sb.configure(&ConfigToml::new(&["cat"]).extra(&format!(
        "[[notify]]\nname = \"rec\"\non = [\"failed\"]\ncommand = {}\n\n\
         [[notify]]\nname = \"dead\"\non = [\"failed\"]\nwebhook = {}\n",
        q_argv(&["/bin/sh", &hook, "{event}"]),
        q(&dead)
    )));
    let ok = sb.run(&["notify", "test", "rec"]);
    assert_eq!(ok.code(), 0, "{ok:?}");
    assert!(
        ok.stdout.contains("delivered a test notice by rec"),
        "{ok:?}"
    );
    assert_eq!(notices(&sb)[0]["event"], "test");
    let failed = sb.run(&["notify", "test", "dead", "--json"]);
    assert_eq!(failed.code(), 4, "{failed:?}");
    let answer: Value = serde_json::from_str(&failed.stdout).expect("json");
    assert_eq!(answer["delivered"], false);
    assert!(failed.stderr.contains(&dead), "{failed:?}");
    let unknown = sb.run(&["notify", "test", "nope"]);
    assert_eq!(unknown.code(), 1, "{unknown:?}");
    assert!(
        unknown.stderr.contains("its hooks: rec, dead"),
        "{unknown:?}"
    );
}

#[test]
fn a_hook_config_names_what_is_wrong() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]).extra(
        "[[notify]]\nname = \"x\"\non = [\"faild\"]\ncommand = [\"true\"]\nwebhook = \"ftp://h\"\n\n\
         [[notify]]\non = [\"all_done\"]\nwebhook = \"http:///x\"\n",
    ));
    let out = sb.run(&["config", "check"]);
    assert_eq!(out.code(), 2, "{out:?}");
    for needle in [
        "notify[0].on: unknown event \"faild\"; valid: succeeded, failed",
        "notify[0]: give exactly one of command",
        "notify[1].name: missing",
    ] {
        assert!(out.stderr.contains(needle), "{needle:?} in {}", out.stderr);
    }
}

/// `cooldowns` as `jobwarden metrics` says it (the daemon's own count).
fn cooldowns(sb: &Sandbox) -> Option<u64> {
    let out = sb.run(&["metrics"]);
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("jobwarden_cooldowns_active "))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn a_prompt_cancelled_while_it_waits_out_its_cooldown_is_told_and_no_longer_counted() {
    let sb = Sandbox::new();
    sb.configure(&with_an_hour_of_cooldown(&sb, &["cancelled", "cooldown"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "b", "fail\n");
    let first = sb.wait_done("p", "b", secs(20));
    assert_eq!(first.state(), "failed");
    sb.drop_prompt("p", "b", "fail again\n");
    wait_until("the cooldown told", secs(20), || {
        notices(&sb).into_iter().find(|n| n["event"] == "cooldown")
    });
    wait_until("one cooldown counted", secs(10), || {
        (cooldowns(&sb) == Some(1)).then_some(())
    });
    let daemon_json = || -> Value {
        serde_json::from_slice(&fs::read(sb.root.join("daemon.json")).expect("daemon.json"))
            .expect("json")
    };
    assert_eq!(daemon_json()["deferred"].as_array().map(Vec::len), Some(1));

    // Cancelled from the inbox by hand: told to the hook, and no longer
    // counted or listed, long before its hour is over.
    let out = sb.run(&["abort", "p/b"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let told = wait_until("the cancel told", secs(10), || {
        notices(&sb).into_iter().find(|n| n["event"] == "cancelled")
    });
    assert_eq!(told["job"]["name"], "b", "{told:#}");
    assert_ne!(told["job"]["id"], first.id.as_str(), "the cancel's own job");
    wait_until("the cooldown forgotten", secs(10), || {
        (cooldowns(&sb) == Some(0)).then_some(())
    });
    wait_until("daemon.json to list no deferral", secs(10), || {
        (daemon_json()["deferred"].as_array().map(Vec::len) == Some(0)).then_some(())
    });
    // Told once.
    assert_never("a second cancelled notice", secs(2), || {
        notices(&sb)
            .iter()
            .filter(|n| n["event"] == "cancelled")
            .count()
            > 1
    });
}

#[test]
fn a_deferred_prompt_retried_now_runs_and_is_no_longer_counted() {
    let sb = Sandbox::new();
    let job = sb.script("job", JOB);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).profile("cooldown", "\"1h\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "b", "fail\n");
    let first = sb.wait_done("p", "b", secs(20));
    sb.drop_prompt("p", "b", "fine now\n");
    wait_until("one cooldown counted", secs(10), || {
        (cooldowns(&sb) == Some(1)).then_some(())
    });
    let out = sb.run(&["retry", "--now", &first.id]);
    assert_eq!(out.code(), 0, "{out:?}");
    let second = sb.wait_done_excluding("p", "b", std::slice::from_ref(&first.id), secs(20));
    assert_eq!(second.state(), "succeeded", "{:#}", second.record);
    wait_until("the cooldown forgotten", secs(10), || {
        (cooldowns(&sb) == Some(0)).then_some(())
    });
}

/// A failed attempt with another to come is told `retrying`, not `failed`
/// nor `needs_attention`; `all_done` waits while the retry sits out its
/// cooldown, and the last attempt's failure is told as a failure.
#[test]
fn a_failure_with_a_retry_to_come_is_told_retrying_and_all_done_waits_for_the_last_attempt() {
    let sb = Sandbox::new();
    let job = sb.script("job", JOB);
    let hook = recorder(&sb);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &job])
            .profile("max_attempts", "2")
            // Longer than the quiet time after which `all_done` is told.
            .profile("cooldown", "\"4s\"")
            .extra(&format!(
                "[[notify]]\nname = \"rec\"\n\
                 on = [\"failed\", \"needs_attention\", \"retrying\", \"all_done\"]\ncommand = {}\n",
                q_argv(&["/bin/sh", &hook])
            )),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "flaky", "fail\n");
    let retrying = wait_until("retrying", secs(20), || {
        notices(&sb).into_iter().find(|n| n["event"] == "retrying")
    });
    assert_eq!(retrying["job"]["attempt"], 1, "{retrying:#}");
    assert_eq!(retrying["job"]["state"], "failed", "{retrying:#}");
    assert_eq!(retrying["job"]["next_attempt"], 2, "{retrying:#}");
    let last = sb.wait_done("p", "flaky", secs(30));
    assert_eq!(last.int_field("attempt"), Some(2));
    let all_done = wait_until("all_done", secs(20), || {
        notices(&sb).into_iter().find(|n| n["event"] == "all_done")
    });
    assert_eq!(
        all_done["summary"]["jobs"], 2,
        "both attempts: {all_done:#}"
    );
    assert_eq!(all_done["summary"]["by_state"]["failed"], 2, "{all_done:#}");
    let got = notices(&sb);
    let told = |event: &str| -> Vec<Value> {
        got.iter()
            .filter(|n| n["event"] == event)
            .map(|n| n["job"]["attempt"].clone())
            .collect()
    };
    assert_eq!(told("retrying"), [1], "{got:#?}");
    assert_eq!(told("failed"), [2], "only the last attempt: {got:#?}");
    assert_eq!(told("needs_attention"), [2], "{got:#?}");
    assert_eq!(told("all_done").len(), 1, "{got:#?}");
}
