//! Commands accept what the operator types, and say what they know: every
//! `<job>` (history show included) by id prefix, short id, project/name or
//! name, with ambiguity listed; `show`'s profile, route, attempt, times and
//! timeout; `--since`/`--until` forms; `events --op` checked; `submit`
//! refusing what the daemon would reject; tables aligned with wide and
//! combining characters, plain when piped.

use std::fs;

use serde_json::Value;
use unicode_width::UnicodeWidthStr;

use crate::support::*;

fn json(sb: &Sandbox, args: &[&str], code: i32) -> Value {
    let out = sb.run(args);
    assert_eq!(out.code(), code, "{args:?}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", out.stdout))
}

/// Runs until `$OUT/release` exists when the body says "gate", prints
/// nothing when it says "silent", echoes the body otherwise.
const SCRIPT: &str = r#"body=$(cat)
case "$body" in
  gate*) while [ ! -e "$OUT/release" ]; do sleep 0.05; done; echo released ;;
  silent*) ;;
  *) echo "ok: $body" ;;
esac"#;

fn sandbox(extra: impl FnOnce(ConfigToml) -> ConfigToml) -> Sandbox {
    let sb = Sandbox::new();
    let script = sb.script("job", SCRIPT);
    sb.configure(&extra(ConfigToml::new(&["/bin/sh", &script])));
    sb
}

/// The shortest prefix (4 characters at least) of `id` no id in `others`
/// starts with.
fn unique_prefix(id: &str, others: &[&str]) -> String {
    (4..=id.len())
        .map(|n| &id[..n])
        .find(|p| others.iter().all(|o| !o.starts_with(p)))
        .expect("ids differ")
        .to_owned()
}

#[test]
fn history_show_takes_prefixes_prompt_names_and_names() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "alpha", "hello\n");
    sb.drop_prompt("other", "beta", "hi\n");
    let a = sb.wait_done("proj", "alpha", secs(15)).id;
    let b = sb.wait_done("other", "beta", secs(15)).id;
    let short = &a[a.len() - 8..];
    let by_id = unique_prefix(&a, &[&b]);
    for arg in [
        by_id.as_str(),
        &short[..5],
        "proj/alpha",
        "alpha",
        a.as_str(),
    ] {
        let v = json(&sb, &["history", "show", arg, "--json"], 0);
        assert_eq!(v["id"], a.as_str(), "history show {arg}");
    }

    // Rows outlive run folders: the ledger is searched, not the folders.
    fs::remove_dir_all(sb.run_dir(&a)).expect("prune the run folder");
    let v = json(&sb, &["history", "show", &short[..5], "--json"], 0);
    assert_eq!(v["id"], a.as_str());

    // A run recorded by hand has no job at all, and is found by its name.
    let rec = sb.run(&["history", "record", "ext", "nightly", "success"]);
    assert_eq!(rec.code(), 0, "{}", rec.stderr);
    let v = json(&sb, &["history", "show", "nightly", "--json"], 0);
    assert_eq!(
        (v["project"].as_str(), v["outcome"].as_str()),
        (Some("ext"), Some("success"))
    );

    // A job that has not ended has no row yet, and is told so.
    sb.drop_prompt("proj", "gated", "gate\n");
    let running = sb.wait_state("proj", "gated", "running", secs(15));
    let out = sb.run(&["history", "show", "proj/gated"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(
        out.stderr.contains(&running.id) && out.stderr.contains("no execution in the ledger yet"),
        "{}",
        out.stderr
    );
    fs::write(sb.out().join("release"), "").expect("release");
    sb.wait_done("proj", "gated", secs(15));
}

#[test]
fn ambiguous_arguments_list_their_candidates_in_every_command() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    for (project, name, id) in [("a", "fix", "feedcafe-one"), ("b", "fix", "feedcafe-two")] {
        sb.drop_prompt(project, name, format!("---\njob_id: {id}\n---\nhello\n"));
        sb.wait_done(project, name, secs(15));
    }
    let commands: [&[&str]; 7] = [
        &["show"],
        &["logs"],
        &["events"],
        &["abort"],
        &["retry"],
        &["history", "show"],
        &["show", "--json"],
    ];
    for cmd in commands {
        for (arg, listed) in [
            ("feed", ["feedcafe-one", "feedcafe-two"]),
            ("fix", ["a/fix", "b/fix"]),
        ] {
            let mut args = cmd.to_vec();
            args.insert(cmd.len().min(if cmd[0] == "history" { 2 } else { 1 }), arg);
            let out = sb.run(&args);
            assert_eq!(out.code(), 2, "{args:?} is ambiguous: {out:?}");
            assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
            for candidate in listed {
                assert!(
                    out.stderr.contains(candidate),
                    "{args:?} lists {candidate}: {}",
                    out.stderr
                );
            }
        }
    }
    let v = json(&sb, &["show", "b/fix", "--json"], 0);
    assert_eq!(v["id"], "feedcafe-two");
    let v = json(&sb, &["history", "show", "feedcafe-o", "--json"], 0);
    assert_eq!(v["id"], "feedcafe-one");
}

#[test]
fn show_tells_profile_route_attempt_times_and_timeout() {
    let sb = sandbox(|c| {
        c.profile("timeout", "\"1h\"")
            .profile("max_attempts", "2")
            .extra("[[route]]\nmatch = \"routed/**\"\nprofile = \"default\"\n")
    });
    let _d = Daemon::start(&sb);
    sb.drop_prompt("routed", "gated", "gate\n");
    let job = sb.wait_state("routed", "gated", "running", secs(15));
    let v = json(&sb, &["show", "routed/gated", "--json"], 0);
    assert_eq!(v["profile"], "default", "{v:#}");
    assert_eq!(v["route"], "routed/**");
    assert_eq!(
        (v["attempt"].as_u64(), v["max_attempts"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(
        v["elapsed_ms"].is_u64() && v["duration_ms"].is_null(),
        "{v:#}"
    );
    assert_eq!(v["timeout_ms"], 3_600_000);
    let left = v["time_left_ms"].as_u64().expect("time left while running");
    assert!(left > 3_500_000 && left <= 3_600_000, "{left}");
    assert!(v["timeout_at"].is_string(), "{v:#}");
    assert_eq!(v["output"], "none_yet");
    let human = sb.run(&["show", &job.id]);
    for needle in [
        "profile   default, through route \"routed/**\"",
        "attempt   1 of 2",
        "elapsed   ",
        "timeout   1h00m, ",
        " left (at ",
        "log       no output yet",
    ] {
        assert!(
            human.stdout.contains(needle),
            "{needle:?}:\n{}",
            human.stdout
        );
    }

    fs::write(sb.out().join("release"), "").expect("release");
    sb.wait_done("routed", "gated", secs(15));
    let v = json(&sb, &["show", &job.id, "--json"], 0);
    assert!(
        v["duration_ms"].is_u64() && v["elapsed_ms"].is_null(),
        "{v:#}"
    );
    assert!(
        v["time_left_ms"].is_null() && v["timeout_at"].is_null(),
        "{v:#}"
    );
    assert_eq!(
        (v["timeout_ms"].as_u64(), v["output"].as_str()),
        (Some(3_600_000), Some("some"))
    );
    let human = sb.run(&["show", &job.id]).stdout;
    assert!(
        human.contains("duration  ") && !human.contains("elapsed"),
        "{human}"
    );
    assert!(!human.contains("no output"), "{human}");
}

#[test]
fn a_finished_job_that_printed_nothing_is_never_said_to_have_no_output_yet() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "quiet", "silent\n");
    let job = sb.wait_done("proj", "quiet", secs(15));
    assert_eq!(job.state(), "succeeded");
    let shown = sb.run(&["show", &job.id]);
    assert!(
        shown.stdout.contains("log       the job printed nothing"),
        "{}",
        shown.stdout
    );
    assert_eq!(json(&sb, &["show", &job.id, "--json"], 0)["output"], "none");
    let logs = sb.run(&["logs", &job.id]);
    assert_eq!((logs.code(), logs.stdout.as_str()), (0, ""), "{logs:?}");
    for out in [&shown.stdout, &logs.stderr] {
        assert!(!out.contains("no output yet"), "{out}");
    }
    assert!(
        logs.stderr.contains("printed nothing (succeeded)"),
        "{}",
        logs.stderr
    );

    // Rejected by the claim: it never ran, and had no timeout.
    sb.drop_prompt("proj", "refused", "---\nprofile: nope\n---\nhello\n");
    let job = sb.wait_done("proj", "refused", secs(15));
    assert_eq!(job.state(), "rejected");
    let v = json(&sb, &["show", "proj/refused", "--json"], 0);
    assert!(
        v["timeout_ms"].is_null() && v["duration_ms"].is_null(),
        "{v:#}"
    );
    let shown = sb.run(&["show", "proj/refused"]).stdout;
    assert!(shown.contains("log       the job never ran"), "{shown}");
    assert!(!shown.contains("timeout"), "{shown}");
    let logs = sb.run(&["logs", "proj/refused"]);
    assert!(
        logs.stderr.contains("never ran (rejected: "),
        "{}",
        logs.stderr
    );
}

#[test]
fn since_and_until_take_durations_dates_and_times() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "dated", "hello\n");
    let job = sb.wait_done("proj", "dated", secs(15));
    let created = job.str_field("created_at").expect("created_at").to_owned();
    let today = &created[..10];
    let count = |args: &[&str], code| {
        let v = json(&sb, args, code);
        v.as_array().map(Vec::len).expect("an array")
    };
    assert_eq!(count(&["jobs", "--since", today, "--json"], 0), 1);
    assert_eq!(count(&["jobs", "--until", today, "--json"], 1), 0);
    assert_eq!(count(&["jobs", "--until", "1h", "--json"], 1), 0);
    assert_eq!(
        count(
            &["jobs", "--since", "1h", "--until", "2999-01-01", "--json"],
            0
        ),
        1
    );
    // Times with offsets: the day's first instant at UTC+14 is the day
    // before in UTC; its last at UTC-10 is the day after.
    let early = format!("{today}T00:00:00+14:00");
    let late = format!("{today}T23:59:59.999-10:00");
    assert_eq!(count(&["jobs", "--since", &early, "--json"], 0), 1);
    assert_eq!(count(&["jobs", "--until", &early, "--json"], 1), 0);
    assert_eq!(count(&["jobs", "--since", &late, "--json"], 1), 0);
    assert_eq!(count(&["jobs", "--until", &late, "--json"], 0), 1);
    assert_eq!(
        count(
            &[
                "history",
                "list",
                "--since",
                today,
                "--until",
                "2999-01-01T00:00:00Z",
                "--json"
            ],
            0
        ),
        1
    );
    let stats = json(&sb, &["history", "stats", "--until", today, "--json"], 0);
    assert_eq!(stats["total"], 0, "{stats:#}");
    assert!(stats["until"].is_string(), "{stats:#}");
    let stats = json(&sb, &["history", "stats", "--since", today, "--json"], 0);
    assert_eq!(stats["total"], 1, "{stats:#}");

    for (args, needle) in [
        (vec!["jobs", "--until", "nonsense"], "--until \"nonsense\""),
        (
            vec!["history", "list", "--since", "2026-02-30"],
            "--since \"2026-02-30\"",
        ),
        (
            vec!["history", "stats", "--until", "tomorrow"],
            "--until \"tomorrow\"",
        ),
        (
            vec!["jobs", "--since", "2h", "--until", "3h"],
            "is not before --until",
        ),
    ] {
        let out = sb.run(&args);
        assert_eq!(out.code(), 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        if !needle.contains("before") {
            assert!(
                out.stderr.contains("RFC 3339") && out.stderr.contains("2026-11-25"),
                "the accepted forms are named: {}",
                out.stderr
            );
        }
    }
}

#[test]
fn events_op_must_be_one_jobwarden_writes() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "evented", "hello\n");
    let job = sb.wait_done("proj", "evented", secs(15));
    let out = sb.run(&["events", &job.id, "--op", "claimed,bogus"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    for needle in ["bogus", "claimed", "queued", "archived", "spawn_failed"] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
    let v = json(
        &sb,
        &["events", &job.id, "--op", "claimed,archived", "--json"],
        0,
    );
    let ops: Vec<&str> = v["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["op"].as_str())
        .collect();
    assert_eq!(ops, ["claimed", "archived"]);
}

#[test]
fn submit_refuses_what_the_daemon_would_reject_and_prints_no_id() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    let file = sb.base.join("p.prompt.md");
    for (text, needles) in [
        (
            "---\nprofile: nope\n---\nhello\n",
            ["\"nope\" is not defined", "default"],
        ),
        (
            "---\ntimeout: forever\n---\nhello\n",
            ["timeout", "front matter"],
        ),
    ] {
        fs::write(&file, text).expect("write prompt");
        for json_flag in [false, true] {
            let mut args = vec!["submit", file.to_str().expect("utf-8")];
            if json_flag {
                args.push("--json");
            }
            let out = sb.run(&args);
            assert_eq!(out.code(), 2, "{text:?}: {out:?}");
            assert_eq!(out.stdout, "", "no id printed for {text:?}");
            for needle in needles {
                assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
            }
        }
    }
    assert_eq!(sb.inbox_files(), Vec::<std::path::PathBuf>::new());
    assert!(sb.job_dirs().is_empty(), "nothing was claimed");
}

#[test]
fn submit_wait_reports_a_rejection_as_such() {
    let sb = Sandbox::new();
    let script = sb.script("job", SCRIPT);
    let base = ConfigToml::new(&["/bin/sh", &script]);
    sb.configure(&base);
    let _d = Daemon::start(&sb);
    // The daemon keeps the config it started with; the CLI reads the new one.
    sb.configure(&base.extra(&format!(
        "[profiles.special]\ncommand = {}\n",
        q_argv(&["/bin/sh", &script])
    )));
    let file = sb.base.join("special.prompt.md");
    fs::write(&file, "---\nprofile: special\n---\nhello\n").expect("write prompt");
    let out = sb.run(&["submit", "--wait", file.to_str().expect("utf-8")]);
    assert_eq!(out.code(), 65, "{out:?}");
    assert!(
        out.stderr.contains("rejected by the daemon") && out.stderr.contains("special"),
        "{}",
        out.stderr
    );
    let printed = out.stdout.trim();
    assert!(
        out.stderr
            .contains(&format!("the id {printed} printed above was not used")),
        "{}",
        out.stderr
    );
}

/// Where the first of `needles` starts on each line, in terminal cells.
fn columns_of(text: &str, needles: &[&str]) -> Vec<usize> {
    text.lines()
        .skip(1)
        .map(|l| {
            let at = needles
                .iter()
                .find_map(|n| l.find(n))
                .unwrap_or_else(|| panic!("no state in {l:?}"));
            l[..at].width()
        })
        .collect()
}

#[test]
fn tables_stay_aligned_with_wide_and_combining_names_and_plain_when_piped() {
    let sb = sandbox(|c| c);
    let _d = Daemon::start(&sb);
    let names = ["plain", "修正ログイン", "cafe\u{301}-menu", "🚀launch"];
    for name in names {
        sb.drop_prompt("proj", name, "hello\n");
        let job = sb.wait_done("proj", name, secs(15));
        // Any name is typed as it is, not only ASCII ones.
        assert_eq!(
            json(&sb, &["show", name, "--json"], 0)["id"],
            job.id.as_str()
        );
    }
    for (args, states) in [
        (vec!["jobs"], ["succeeded"]),
        (vec!["history", "list"], ["success"]),
    ] {
        for no_color in [None, Some("1")] {
            let mut cmd = sb.command(&args);
            if let Some(v) = no_color {
                cmd.env("NO_COLOR", v);
            } else {
                cmd.env_remove("NO_COLOR");
            }
            let out = cmd.output().expect("run");
            let text = String::from_utf8(out.stdout).expect("utf-8");
            assert!(out.status.success(), "{args:?}: {text}");
            assert!(!text.contains('\x1b'), "plain through a pipe: {text:?}");
            assert_eq!(text.lines().count(), names.len() + 1, "{text}");
            let starts = columns_of(&text, &states);
            assert!(
                starts.windows(2).all(|w| w[0] == w[1]),
                "{args:?} columns at {starts:?}:\n{text}"
            );
        }
    }
}
