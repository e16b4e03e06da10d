//! Which job a `<job>` argument means, and how listings show and bound
//! jobs: a prompt name means its live job over newer ended ones, `ack` of
//! a prompt whose retry waits, short ids (custom ids whole, retries by
//! their first attempt), commands on a root that is not there, `route` of
//! a name the daemon ignores, `--limit` and the rows left out, and state
//! names shown whole.

use std::fs;

use serde_json::Value;

use crate::support::*;

fn json(out: &CliOutput) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn a_prompt_name_means_its_live_job_not_a_newer_cancelled_duplicate() {
    let sb = Sandbox::new();
    let script = sb.script("slow", "echo live job\nsleep 20");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    let file = sb.base.join("x.prompt.md");
    fs::write(&file, "twenty seconds of work\n").expect("prompt");
    let file = file.to_string_lossy().into_owned();
    let submit = || sb.run(&["submit", "--project", "slow", "--name", "x", &file]);
    assert_eq!(submit().code(), 0);
    let running = sb.wait_state("slow", "x", "running", secs(15));
    let out = submit();
    assert_eq!(
        out.code(),
        0,
        "a duplicate waits behind the running job: {out:?}"
    );

    let out = sb.run(&["abort", "slow/x.prompt.md"]);
    assert_eq!(out.code(), 0, "the waiting duplicate is cancelled: {out:?}");
    let cancelled = sb.wait_job_where(
        "the duplicate to be cancelled",
        "slow",
        "x",
        std::slice::from_ref(&running.id),
        secs(10),
        |j| j.state() == "cancelled",
    );
    assert!(
        cancelled.id > running.id,
        "the cancelled job is the newer one"
    );

    for arg in ["slow/x", "x"] {
        let out = sb.run(&["show", arg, "--json"]);
        assert_eq!(out.code(), 0, "{out:?}");
        assert_eq!(json(&out)["id"], running.id.as_str(), "show {arg}");
        let out = sb.run(&["logs", arg]);
        assert_eq!(out.code(), 0, "{out:?}");
        assert!(out.stdout.contains("live job"), "logs {arg}: {out:?}");
        let out = sb.run(&["events", arg, "--op", "started", "--json"]);
        assert_eq!(out.code(), 0, "events {arg} are the live job's: {out:?}");
    }

    let out = sb.run(&["abort", "slow/x"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains(&running.id), "{out:?}");
    let ended = sb.wait_id(
        &running.id,
        "the live job to be aborted",
        secs(10),
        Job::is_terminal,
    );
    assert_eq!(ended.state(), "aborted", "{:#}", ended.record);
}

/// A config whose jobs fail (exit 3) with two attempts; the first attempt
/// pauses the daemon before it fails, so that its retry stays queued.
fn failing_then_paused(sb: &Sandbox) -> Daemon {
    let pause = format!(
        "{} --root {} --config {} pause --reason 'hold the retry'",
        q(BIN),
        q(&sb.root.to_string_lossy()),
        q(&sb.config.to_string_lossy())
    );
    let script = sb.script("fail", &format!("{pause} >/dev/null 2>&1\nexit 3"));
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .unsandboxed()
            .profile("max_attempts", "2")
            .profile("cooldown", "\"100ms\""),
    );
    Daemon::start(sb)
}

#[test]
fn ack_of_a_prompt_name_acknowledges_its_failure_while_its_retry_is_queued() {
    let sb = Sandbox::new();
    let _d = failing_then_paused(&sb);
    sb.drop_prompt("proj", "flaky", "fails\n");
    let failed = sb.wait_state("proj", "flaky", "failed", secs(15));
    let retry = sb.wait_job_where(
        "the retry to be queued",
        "proj",
        "flaky",
        std::slice::from_ref(&failed.id),
        secs(15),
        |j| j.state() == "queued",
    );
    let status = json(&sb.run(&["status", "--json"]));
    let needs = status.to_string();
    assert!(
        needs.contains(&failed.id),
        "status lists the failure: {status:#}"
    );

    let out = sb.run(&["ack", "proj/flaky", "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let report = json(&out);
    assert_eq!(
        report["acknowledged"][0]["job_id"],
        failed.id.as_str(),
        "{report:#}"
    );
    let status = json(&sb.run(&["status", "--json"]));
    assert_eq!(status["acknowledged"], 1, "{status:#}");
    let again = sb.run(&["ack", "proj/flaky"]);
    assert_eq!(again.code(), 0, "{again:?}");
    assert!(again.stdout.contains("already acknowledged"), "{again:?}");
    let still = sb.job(&retry.id).expect("retry");
    assert_eq!(still.state(), "queued", "the retry is left alone");
}

/// The data lines of a table (its header left out).
fn rows(table: &str) -> Vec<&str> {
    table.lines().skip(1).collect()
}

#[test]
fn short_ids_show_custom_ids_whole_and_retries_by_their_first_attempt() {
    let sb = Sandbox::new();
    let script = sb.script("fail", "exit 3");
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .profile("max_attempts", "2")
            .profile("cooldown", "\"100ms\""),
    );
    let _d = Daemon::start(&sb);
    // `submit` gives the prompt its id (a UUIDv7), whose retries are
    // `<id>-r2`; `--job-id` gives it one of the operator's.
    for (name, id) in [("gen", None), ("nightly", Some("nightly-2"))] {
        let file = sb.base.join(format!("{name}.prompt.md"));
        fs::write(&file, "fails\n").expect("prompt");
        let file = file.to_string_lossy().into_owned();
        let mut args = vec!["submit", "--project", "proj", &file];
        args.extend(id.map(|id| ["--job-id", id]).into_iter().flatten());
        let out = sb.run(&args);
        assert_eq!(out.code(), 0, "{out:?}");
    }
    let ended = |j: &Job| j.is_terminal() && j.int_field("attempt") == Some(2);
    let gen2 = sb.wait_job_where("gen's retry to end", "proj", "gen", &[], secs(20), ended);
    let night2 = sb.wait_job_where("nightly's retry", "proj", "nightly", &[], secs(20), ended);
    let gen1 = gen2
        .id
        .strip_suffix("-r2")
        .expect("a retry's id")
        .to_owned();
    assert_eq!(night2.id, "nightly-2-r2");

    let tail = &gen1[gen1.len() - 8..];
    let shown = sb.run(&["jobs"]);
    let first_cells: Vec<&str> = rows(&shown.stdout)
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for short in [
        tail.to_owned(),
        format!("{tail}-r2"),
        "nightly-2".into(),
        "nightly-2-r2".into(),
    ] {
        assert!(
            first_cells.contains(&short.as_str()),
            "{short}: {}",
            shown.stdout
        );
    }
    let listed = sb.run(&["history", "list"]);
    assert!(
        listed.stdout.contains(&format!("{tail}-r2 ")),
        "{}",
        listed.stdout
    );
    assert!(listed.stdout.contains("nightly-2 "), "{}", listed.stdout);

    for (arg, id) in [
        (format!("{tail}-r2"), gen2.id.as_str()),
        (tail.to_owned(), gen1.as_str()),
        ("nightly-2".into(), "nightly-2"),
        ("nightly-2-r2".into(), "nightly-2-r2"),
    ] {
        let out = sb.run(&["show", &arg, "--json"]);
        assert_eq!(out.code(), 0, "show {arg}: {out:?}");
        assert_eq!(json(&out)["id"], id, "show {arg}");
        let out = sb.run(&["history", "show", &arg, "--json"]);
        assert_eq!(out.code(), 0, "history show {arg}: {out:?}");
        assert!(out.stdout.contains(id), "history show {arg}: {out:?}");
    }

    // A custom id that starts with another job's short id takes nothing
    // from it: that short id still names that job.
    let mine = format!("{tail}-mine");
    let file = sb.base.join("mine.prompt.md");
    fs::write(&file, "fails\n").expect("prompt");
    let file = file.to_string_lossy().into_owned();
    let out = sb.run(&["submit", "--project", "proj", &file, "--job-id", &mine]);
    assert_eq!(out.code(), 0, "{out:?}");
    let ended = |j: &Job| j.id == mine && j.is_terminal();
    sb.wait_job_where(
        "the custom job to end",
        "proj",
        "mine",
        &[],
        secs(20),
        ended,
    );
    for command in [["show", tail, "--json"], ["history", "show", tail]] {
        let out = sb.run(&command);
        assert_eq!(out.code(), 0, "{command:?}: {out:?}");
        assert!(
            out.stdout.contains(&gen1) && !out.stdout.contains(&mine),
            "{command:?}: {out:?}"
        );
    }
}

#[test]
fn commands_that_read_a_root_say_there_is_none_at_a_mistyped_one() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    fs::remove_dir_all(&sb.root).expect("no root");
    let commands: &[&[&str]] = &[
        &["jobs"],
        &["jobs", "--json"],
        &["show", "x"],
        &["logs", "x"],
        &["events", "x"],
        &["wait", "--all", "--timeout", "1s"],
        &["abort", "x"],
        &["ack", "x"],
        &["retry", "x"],
        &["priority", "x", "5"],
        &["route", "proj/x.prompt.md"],
        &["metrics"],
        &["status"],
        &["history", "list"],
        &["history", "stats"],
        &["history", "show", "x"],
        &["pause"],
        &["resume"],
        &["limit", "3"],
        &["limit"],
        &["gc"],
        &["gc", "--dry-run"],
    ];
    for args in commands {
        let out = sb.run(args);
        assert_eq!(out.code(), 2, "{args:?}: {out:?}");
        let root = sb.root.to_string_lossy();
        assert!(
            out.stderr.contains(&format!("no jobwarden root at {root}"))
                && out.stderr.contains("--root"),
            "{args:?}: {out:?}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
    assert!(!sb.root.exists(), "reading made no root");
}

#[test]
fn route_of_a_file_name_the_daemon_ignores_says_so_and_the_name_it_needs() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    for (arg, needed) in [
        ("foo.md", "foo.prompt.md"),
        ("acme/notes.txt", "notes.prompt.md"),
        ("acme/fix.running.md", "fix.prompt.md"),
        ("x.prompt.md~", "x.prompt.md"),
        ("acme/x.prompt.md.swp", "x.prompt.md"),
    ] {
        let out = sb.run(&["route", arg]);
        assert_eq!(out.code(), 2, "{arg}: {out:?}");
        assert!(
            out.stderr.contains("the daemon ignores") && out.stderr.contains(needed),
            "{arg}: {out:?}"
        );
        assert!(out.stdout.is_empty(), "{arg}: nothing explained: {out:?}");
    }
    let out = sb.run(&["route", "foo.prompt.md"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let out = sb.run(&["route", "acme/api"]);
    assert_eq!(out.code(), 0, "a folder means a prompt in it: {out:?}");
    assert!(out.stdout.contains("acme/api/prompt"), "{out:?}");
}

#[test]
fn listings_say_how_many_rows_they_left_out_and_show_state_names_whole() {
    let sb = Sandbox::new();
    // No such program: every job ends `setup_failed`.
    sb.configure(&ConfigToml::new(&["/nonexistent/agent"]));
    let d = Daemon::start(&sb);
    let names = ["a", "b", "c"];
    for name in names {
        sb.drop_prompt("proj", name, "x\n");
    }
    for name in names {
        let job = sb.wait_done("proj", name, secs(15));
        assert_eq!(job.state(), "setup_failed", "{:#}", job.record);
    }
    drop(d);
    sb.drop_prompt("proj", "waits", "no daemon claims it\n");

    let out = sb.run(&["jobs", "--limit", "2"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(rows(&out.stdout).len(), 2, "{out:?}");
    assert!(out.stderr.contains("2 more not shown"), "{out:?}");
    let out = sb.run(&["jobs", "--limit", "2", "--json"]);
    assert_eq!(json(&out).as_array().map(Vec::len), Some(2), "{out:?}");
    assert!(out.stderr.contains("2 more not shown"), "{out:?}");
    let out = sb.run(&["jobs", "--limit", "0"]);
    assert_eq!(rows(&out.stdout).len(), 4, "all of them: {out:?}");
    assert!(!out.stderr.contains("more"), "{out:?}");
    assert!(
        rows(&out.stdout)
            .iter()
            .filter(|l| l.contains(" setup_failed "))
            .count()
            == 3,
        "the state is shown whole: {}",
        out.stdout
    );

    let out = sb.run(&["history", "list", "--limit", "1"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(rows(&out.stdout).len(), 1, "{out:?}");
    assert!(out.stderr.contains("2 more not shown"), "{out:?}");
    let out = sb.run(&["history", "list", "--limit", "0", "--json"]);
    assert_eq!(json(&out).as_array().map(Vec::len), Some(3), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let out = sb.run(&["history", "list"]);
    assert!(out.stdout.contains(" setup_failed "), "{}", out.stdout);
}
