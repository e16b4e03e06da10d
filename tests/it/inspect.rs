//! The operator's read commands against a real daemon: `status` (overall
//! state, counts, running, queued, deferred, recent, needs attention),
//! `jobs` (filters, order, JSON shape) and `show` (every way of naming a
//! job, JSON shape, refusals), and the job index they read being rebuilt.

use std::collections::BTreeSet;
use std::fs;

use serde_json::Value;

use crate::support::*;

fn json(sb: &Sandbox, args: &[&str], code: i32) -> Value {
    let out = sb.run(args);
    assert_eq!(out.code(), code, "{args:?}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", out.stdout))
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// Fails when the prompt body says "fail", runs until `$OUT/release`
/// exists when it says "gate", succeeds otherwise.
const SCRIPT: &str = r#"body=$(cat)
case "$body" in
  fail*) echo "failing as asked"; exit 3 ;;
  gate*) while [ ! -e "$OUT/release" ]; do sleep 0.05; done; echo released ;;
  *) echo "ok: $body" ;;
esac"#;

fn sandbox(extra: impl FnOnce(ConfigToml) -> ConfigToml) -> Sandbox {
    let sb = Sandbox::new();
    let script = sb.script("job", SCRIPT);
    sb.configure(&extra(ConfigToml::new(&["/bin/sh", &script])));
    sb
}

#[test]
fn status_follows_the_overall_state_from_never_run_to_all_done() {
    let sb = sandbox(|c| {
        c.global("max_jobs", "1")
            .profile("max_attempts", "1")
            .profile("cooldown", "\"100ms\"")
    });
    let st = json(&sb, &["status", "--json"], 3);
    assert_eq!(st["overall_state"], "never_run", "{st:#}");
    let _d = Daemon::start(&sb);
    let st = json(&sb, &["status", "--json"], 0);
    assert_eq!(st["overall_state"], "never_run", "{st:#}");
    for key in [
        "daemon",
        "overall_state",
        "counts",
        "running",
        "queued",
        "deferred",
        "recent",
        "needs_attention",
        "storage",
    ] {
        assert!(st.get(key).is_some(), "{key} missing: {st:#}");
    }

    sb.drop_prompt("proj", "long", "gate\n");
    let long = sb.wait_state("proj", "long", "running", secs(15));
    sb.drop_prompt("proj", "next", "fail\n");
    let next = sb.wait_state("proj", "next", "queued", secs(15));
    // The counts come from the job index, told of a start once the
    // command has run 100 ms: until then it counts the job as queued.
    let st = wait_until("status sees one running, one queued", secs(10), || {
        Some(json(&sb, &["status", "--json"], 0)).filter(|s| {
            s["running"].as_array().is_some_and(|r| r.len() == 1)
                && s["queued"].as_array().is_some_and(|q| q.len() == 1)
                && s["counts"]["running"] == 1
        })
    });
    assert_eq!(st["overall_state"], "active", "{st:#}");
    assert_eq!(st["counts"]["running"], 1, "{st:#}");
    assert_eq!(st["counts"]["queued"], 1, "{st:#}");
    assert_eq!(
        st["counts"]["succeeded"], 0,
        "every state is counted: {st:#}"
    );
    let running = &st["running"][0];
    assert_eq!(running["id"], long.id.as_str());
    assert_eq!(running["heartbeat_stale"], false, "{running:#}");
    assert!(running["pid"].as_i64().is_some(), "{running:#}");
    assert!(running["elapsed_ms"].as_u64().is_some(), "{running:#}");
    assert_eq!(st["queued"][0]["id"], next.id.as_str());
    let human = sb.run(&["status"]);
    assert!(
        human.stdout.contains("active: 1 running, 1 queued"),
        "{}",
        human.stdout
    );
    assert!(
        human.stdout.lines().all(|l| l.chars().count() <= 80),
        "fits 80 columns:\n{}",
        human.stdout
    );

    fs::write(sb.out().join("release"), "").expect("release");
    sb.wait_done("proj", "next", secs(15));
    let st = wait_until("needs attention", secs(10), || {
        Some(json(&sb, &["status", "--json"], 0))
            .filter(|s| s["overall_state"] == "needs_attention")
    });
    assert_eq!(st["needs_attention"][0]["name"], "next", "{st:#}");
    assert_eq!(st["needs_attention"][0]["outcome"], "failure", "{st:#}");
    assert_eq!(st["recent"].as_array().map(Vec::len), Some(2), "{st:#}");
    assert_eq!(
        st["recent"][0]["id"],
        next.id.as_str(),
        "newest first: {st:#}"
    );

    sb.drop_prompt("proj", "next", "fine now\n");
    let fixed = sb.wait_done_excluding("proj", "next", std::slice::from_ref(&next.id), secs(15));
    assert_eq!(fixed.state(), "succeeded");
    let st = wait_until("all done", secs(10), || {
        Some(json(&sb, &["status", "--json"], 0)).filter(|s| s["overall_state"] == "all_done")
    });
    assert_eq!(st["counts"]["succeeded"], 2, "{st:#}");
    assert_eq!(st["counts"]["failed"], 1, "{st:#}");
}

/// A prompt waiting in the inbox with no job yet is work not done: not
/// `all_done` (with no daemon to claim it, and deferred by a cooldown
/// while one runs), counted in `waiting`, and no completion summary yet.
#[test]
fn a_prompt_waiting_in_the_inbox_is_counted_and_not_all_done() {
    let sb = sandbox(|c| c.profile("cooldown", "\"1h\""));
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("proj", "done", "fine\n");
    sb.wait_done("proj", "done", secs(15));
    let st = wait_until("all done", secs(10), || {
        Some(json(&sb, &["status", "--json"], 0)).filter(|s| s["overall_state"] == "all_done")
    });
    assert_eq!(st["waiting"], 0, "{st:#}");
    d.sigterm();
    assert_eq!(d.wait_exit(secs(10)).code(), Some(0));

    sb.drop_prompt("proj", "later", "fine\n");
    let st = json(&sb, &["status", "--json"], 3);
    assert_eq!(st["overall_state"], "waiting", "{st:#}");
    assert_eq!(st["waiting"], 1, "{st:#}");
    assert!(st["completion_summary"].is_null(), "{st:#}");
    let human = sb.run(&["status"]).stdout;
    assert!(
        human.contains("waiting: 0 running, 0 queued, 1 waiting in the inbox"),
        "{human}"
    );
    fs::remove_file(sb.root.join("inbox/proj/later.prompt.md")).expect("take it back");

    // A prompt waiting out the cooldown its failure started.
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "flaky", "fail\n");
    sb.wait_done("proj", "flaky", secs(15));
    sb.drop_prompt("proj", "flaky", "fail again\n");
    let st = wait_until("the prompt deferred", secs(10), || {
        Some(json(&sb, &["status", "--json"], 0))
            .filter(|s| s["deferred"].as_array().is_some_and(|d| d.len() == 1))
    });
    assert_eq!(st["overall_state"], "waiting", "{st:#}");
    assert_eq!(st["waiting"], 1, "{st:#}");
    let human = sb.run(&["status"]).stdout;
    assert!(
        human.contains("1 waiting in the inbox (1 of them deferred)"),
        "one prompt, said once: {human}"
    );
}

#[test]
fn status_lists_a_prompt_deferred_by_its_cooldown() {
    let sb = sandbox(|c| c.profile("cooldown", "\"1h\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "cool", "fail\n");
    sb.wait_done("proj", "cool", secs(15));
    sb.drop_prompt("proj", "cool", "fail again\n");
    let st = wait_until("the prompt deferred", secs(10), || {
        Some(json(&sb, &["status", "--json"], 0))
            .filter(|s| s["deferred"].as_array().is_some_and(|d| !d.is_empty()))
    });
    assert_eq!(st["deferred"][0]["prompt"], "proj/cool", "{st:#}");
    let until = parse_rfc3339_ms(st["deferred"][0]["until"].as_str().expect("until"));
    let now = parse_rfc3339_ms(st["daemon"]["heartbeat_at"].as_str().expect("heartbeat"));
    assert!(until - now > 3_000_000, "about an hour ahead: {st:#}");
    let human = sb.run(&["status"]);
    assert!(
        human.stdout.contains("proj/cool") && human.stdout.contains("cooldown ends in"),
        "{}",
        human.stdout
    );
}

#[test]
fn jobs_lists_newest_first_with_filters_that_combine() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    for (project, name, body) in [("a", "one", "x"), ("a", "two", "fail"), ("b", "one", "y")] {
        sb.drop_prompt(project, name, format!("{body}\n"));
        sb.wait_done(project, name, secs(15));
    }
    let all = json(&sb, &["jobs", "--json"], 0);
    let names: Vec<String> = all
        .as_array()
        .expect("array")
        .iter()
        .map(|j| {
            format!(
                "{}/{}",
                j["project"].as_str().unwrap_or(""),
                j["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(names, ["b/one", "a/two", "a/one"], "newest first");
    assert_eq!(
        keys(&all[0]),
        set(&[
            "id",
            "label",
            "project",
            "name",
            "state",
            "attempt",
            "created_at",
            "started_at",
            "finished_at",
            "duration_ms",
            "exit_code",
            "state_reason",
            "waiting",
            "waits",
            "profile"
        ])
    );
    assert_eq!(all[0]["profile"], "default", "{:#}", all[0]);
    let failed = json(&sb, &["jobs", "--state", "failed", "--json"], 0);
    assert_eq!(failed.as_array().map(Vec::len), Some(1));
    assert_eq!(failed[0]["exit_code"], 3);
    let a_one = json(
        &sb,
        &["jobs", "--project", "a", "--name", "one", "--json"],
        0,
    );
    assert_eq!(a_one.as_array().map(Vec::len), Some(1));
    let limited = json(&sb, &["jobs", "--limit", "1", "--json"], 0);
    assert_eq!(limited[0]["name"], "one");
    assert_eq!(limited[0]["project"], "b");
    let none = json(&sb, &["jobs", "--state", "aborted", "--json"], 1);
    assert_eq!(none, Value::Array(vec![]));
    let recent = json(&sb, &["jobs", "--since", "1h", "--json"], 0);
    assert_eq!(recent.as_array().map(Vec::len), Some(3));

    let human = sb.run(&["jobs"]);
    assert_eq!(human.code(), 0);
    assert_eq!(human.stdout.lines().count(), 4, "{}", human.stdout);
    assert!(
        human.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        human.stdout
    );
    for (args, needle) in [
        (vec!["jobs", "--state", "bogus"], "bogus"),
        (vec!["jobs", "--project", "../x"], "--project"),
        (vec!["jobs", "--limit", "many"], "--limit"),
        (vec!["jobs", "--since", "yesterday-ish"], "--since"),
    ] {
        let out = sb.run(&args);
        assert_eq!(out.code(), 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn show_finds_a_job_every_way_it_may_be_named() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "shown", "hello\n");
    let job = sb.wait_done("proj", "shown", secs(15));
    let id = job.id.as_str();
    let short = &id[id.len() - 8..];
    for name in [id, &id[..13], &short[..5], "proj/shown"] {
        let v = json(&sb, &["show", name, "--json"], 0);
        assert_eq!(v["id"], id, "{name}");
    }
    let v = json(&sb, &["show", id, "--json"], 0);
    assert_eq!(
        keys(&v),
        set(&[
            "id",
            "job",
            "paths",
            "execution",
            "log_tail",
            "notifications",
            "waiting",
            "profile",
            "route",
            "attempt",
            "max_attempts",
            "elapsed_ms",
            "duration_ms",
            "timeout_ms",
            "timeout_at",
            "time_left_ms",
            "output",
        ])
    );
    assert_eq!(v["job"]["state"], "succeeded");
    assert_eq!(v["execution"]["outcome"], "success");
    assert_eq!(v["log_tail"], serde_json::json!(["ok: hello"]));
    let run_dir = v["paths"]["run_dir"].as_str().expect("run_dir");
    assert_eq!(run_dir, sb.run_dir(id).to_str().expect("utf-8"));
    assert!(
        v["paths"]["prompt"]
            .as_str()
            .is_some_and(|p| p.contains("archive/succeeded/proj/shown.")),
        "{v:#}"
    );
    let human = sb.run(&["show", short]);
    assert_eq!(human.code(), 0, "{}", human.stderr);
    for needle in ["succeeded", "proj/shown", "ok: hello", "success"] {
        assert!(human.stdout.contains(needle), "{needle}: {}", human.stdout);
    }
}

#[test]
fn show_refuses_unsafe_names_lists_ambiguity_and_says_no_to_unknown_jobs() {
    let sb = sandbox(|c| c);
    fs::create_dir_all(sb.root.join("inbox")).expect("inbox");
    for id in ["abcdef01-aaaa", "abcdef02-bbbb"] {
        fs::create_dir_all(sb.run_dir(id)).expect("run dir");
    }
    let amb = sb.run(&["show", "abcdef"]);
    assert_eq!(amb.code(), 2, "{}", amb.stderr);
    assert!(
        amb.stderr.contains("abcdef01-aaaa") && amb.stderr.contains("abcdef02-bbbb"),
        "candidates listed: {}",
        amb.stderr
    );
    for bad in ["../x", "/etc/passwd", "a/../b", "proj/.hidden", "..", ".x"] {
        let out = sb.run(&["show", bad]);
        assert_eq!(out.code(), 2, "{bad:?}: {}", out.stderr);
        assert!(out.stderr.contains("not a"), "{bad:?}: {}", out.stderr);
    }
    let unknown = sb.run(&["show", "0000aaaa"]);
    assert_eq!(unknown.code(), 1, "{}", unknown.stderr);
    assert!(unknown.stderr.contains("0000aaaa"), "{}", unknown.stderr);
    let short = sb.run(&["show", "abc"]);
    assert_eq!(short.code(), 1, "{}", short.stderr);
    assert!(short.stderr.contains("at least 4"), "{}", short.stderr);
}

/// The index is a cache: emptied behind the CLI's back, `history repair`
/// rebuilds it from the run folders, and so does the next daemon start.
#[test]
fn the_job_index_is_rebuilt_from_the_run_folders() {
    let sb = sandbox(|c| c);
    let mut d = Daemon::start(&sb);
    for name in ["one", "two"] {
        sb.drop_prompt("proj", name, "x\n");
        sb.wait_done("proj", name, secs(15));
    }
    d.sigterm();
    assert_eq!(d.wait_exit(secs(10)).code(), Some(0));
    let db = rusqlite::Connection::open(sb.root.join("ledger.db")).expect("ledger");
    db.execute("DELETE FROM jobs", []).expect("empty the index");
    json(&sb, &["jobs", "--json"], 1);

    let out = sb.run(&["history", "repair"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(out.stdout.contains("2 jobs indexed"), "{}", out.stdout);
    assert_eq!(
        json(&sb, &["jobs", "--json"], 0).as_array().map(Vec::len),
        Some(2)
    );

    db.execute("DELETE FROM jobs", [])
        .expect("empty the index again");
    let _d = Daemon::start(&sb);
    assert_eq!(
        json(&sb, &["jobs", "--json"], 0).as_array().map(Vec::len),
        Some(2)
    );
}

/// Colour only on a terminal, and never with `NO_COLOR` set. A terminal is
/// had through `script` (util-linux); skipped with the reason where absent.
#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "tinted", "x\n");
    sb.wait_done("proj", "tinted", secs(15));
    let piped = sb.run(&["jobs"]);
    assert!(
        !piped.stdout.contains('\x1b'),
        "plain through a pipe: {:?}",
        piped.stdout
    );

    let line = format!(
        "{} --root {} --config {} jobs",
        q(BIN),
        q(&sb.root.to_string_lossy()),
        q(&sb.config.to_string_lossy())
    );
    let on_tty = |no_color: Option<&str>| {
        let mut cmd = std::process::Command::new("script");
        cmd.args(["-qec", &line, "/dev/null"])
            .env_remove("NO_COLOR");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        cmd.output().ok().filter(|o| o.status.success())
    };
    let Some(tty) = on_tty(None) else {
        eprintln!("skipped: no `script` to run the command on a terminal");
        return;
    };
    let text = String::from_utf8_lossy(&tty.stdout);
    assert!(
        text.contains("\x1b[32m"),
        "succeeded in green on a terminal: {text:?}"
    );
    let plain = on_tty(Some("1")).expect("script ran before");
    assert!(
        !String::from_utf8_lossy(&plain.stdout).contains("\x1b["),
        "NO_COLOR turns colour off"
    );
}
