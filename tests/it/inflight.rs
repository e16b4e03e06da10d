//! Everything in flight is visible and can be cancelled: prompts waiting
//! in the inbox (and those deferred by a cooldown) are listed by `jobs`,
//! shown by `show`, answered with a clean "no" by `logs` and `events`, and
//! cancelled by `abort`, with or without a daemon; a queued job aborted
//! before it starts ends `cancelled`. A cancel is an end like any other:
//! a record, a ledger row, the prompt kept under `archive/cancelled/`.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// Records its start (`<name> <epoch ms>`) in `$OUT/ran`, then waits for
/// `$OUT/release`.
const GATED: &str = r#"echo "$1 $(date +%s%3N)" >> "$OUT/ran"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#;

/// Records its start in `$OUT/ran`, then fails with exit code 3.
const FAILING: &str = r#"echo "$1 $(date +%s%3N)" >> "$OUT/ran"
exit 3"#;

fn json(sb: &Sandbox, args: &[&str], code: i32) -> Value {
    let out = sb.run(args);
    assert_eq!(out.code(), code, "{args:?}: {out:?}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", out.stdout))
}

/// The rows of `jobs --json` (any exit status).
fn rows(sb: &Sandbox, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["jobs", "--json"];
    all.extend_from_slice(args);
    let out = sb.run(&all);
    serde_json::from_str::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_else(|| panic!("jobs --json: {out:?}"))
}

/// `(name, epoch ms)` of every start the job scripts recorded.
fn starts(sb: &Sandbox) -> Vec<(String, i64)> {
    fs::read_to_string(sb.out().join("ran"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (name, at) = l.split_once(' ')?;
            Some((name.to_owned(), at.trim().parse().ok()?))
        })
        .collect()
}

/// The one job of `project/name` (panics if there are others).
fn only_job(sb: &Sandbox, project: &str, name: &str) -> Job {
    let mut jobs = sb.jobs_for(project, name);
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    jobs.remove(0)
}

/// The ledger's rows for prompt `project/name`, oldest first.
fn history(sb: &Sandbox, project: &str, name: &str) -> Vec<Value> {
    let all = json(sb, &["history", "list", "--json", "--limit", "1000"], 0);
    let mut rows: Vec<Value> = all
        .as_array()
        .expect("array")
        .iter()
        .filter(|r| r["project"] == project && r["name"] == name)
        .cloned()
        .collect();
    rows.reverse();
    rows
}

/// A cancelled job as it must be: never started, its reason recorded,
/// its prompt's exact bytes under `archive/cancelled/`, a ledger row.
fn assert_cancelled(sb: &Sandbox, job: &Job, bytes: &[u8], reason: &str) {
    assert_eq!(job.state(), "cancelled", "{:#}", job.record);
    assert_eq!(
        job.str_field("state_reason"),
        Some(format!("cancelled by request: {reason}").as_str()),
        "{:#}",
        job.record
    );
    assert!(job.record["started_at"].is_null(), "{:#}", job.record);
    assert!(job.pid().is_none(), "{:#}", job.record);
    let name = job.str_field("name").expect("name");
    let project = job.str_field("project").expect("project");
    let expected = if project.is_empty() {
        format!("archive/cancelled/{name}.{}.md", job.id)
    } else {
        format!("archive/cancelled/{project}/{name}.{}.md", job.id)
    };
    assert_eq!(job.str_field("archive_path"), Some(expected.as_str()));
    assert_eq!(fs::read(sb.root.join(&expected)).expect("archived"), bytes);
    let ops = check_events(job);
    assert!(!ops.iter().any(|o| o == "started"), "{ops:?}");
    let rows = history(sb, project, name);
    let row = rows
        .iter()
        .find(|r| r["id"] == job.id.as_str())
        .unwrap_or_else(|| panic!("no ledger row for {}: {rows:#?}", job.id));
    assert_eq!(row["outcome"], "cancelled", "{row:#}");
}

#[test]
fn waiting_prompts_are_listed_shown_and_not_started_without_a_daemon() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    sb.drop_prompt("proj", "x", "later\n");
    sb.drop_prompt("", "top", "at the top\n");

    let all = rows(&sb, &[]);
    assert_eq!(all.len(), 2, "{all:#?}");
    for row in &all {
        assert!(row["id"].is_null(), "no job yet: {row:#}");
        assert!(row["created_at"].is_null(), "{row:#}");
        assert_eq!(row["state"], "waiting", "{row:#}");
        assert_eq!(row["attempt"], 1, "{row:#}");
        assert_eq!(row["waiting"]["state"], "waiting", "{row:#}");
        assert!(
            row["state_reason"]
                .as_str()
                .is_some_and(|r| r.contains("no daemon")),
            "{row:#}"
        );
    }
    let mut labels: Vec<&str> = all.iter().filter_map(|r| r["label"].as_str()).collect();
    labels.sort();
    assert_eq!(labels, ["proj/x", "top"]);
    let x = rows(&sb, &["--state", "waiting", "--project", "proj"]);
    assert_eq!(x.len(), 1, "{x:#?}");
    assert_eq!(x[0]["waiting"]["path"], "inbox/proj/x.prompt.md");
    assert_eq!(
        json(&sb, &["jobs", "--state", "deferred", "--json"], 1),
        Value::Array(vec![])
    );
    assert_eq!(
        json(&sb, &["jobs", "--state", "queued", "--json"], 1),
        Value::Array(vec![])
    );
    let table = sb.run(&["jobs"]);
    assert_eq!(table.code(), 0, "{table:?}");
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with("-") && l.contains("proj/x") && l.contains("waiting")),
        "{}",
        table.stdout
    );

    let shown = json(&sb, &["show", "proj/x", "--json"], 0);
    assert!(shown["id"].is_null() && shown["job"].is_null(), "{shown:#}");
    assert_eq!(shown["waiting"]["label"], "proj/x", "{shown:#}");
    assert_eq!(shown["waiting"]["state"], "waiting", "{shown:#}");
    assert!(shown["waiting"]["deferred_until"].is_null(), "{shown:#}");
    // A bare name finds the one prompt of that name waiting anywhere.
    let human = sb.run(&["show", "x"]);
    assert_eq!(human.code(), 0, "{human:?}");
    for needle in ["proj/x", "waiting", "no job yet", "inbox/proj/x.prompt.md"] {
        assert!(human.stdout.contains(needle), "{needle}: {}", human.stdout);
    }
    for command in ["logs", "events"] {
        let out = sb.run(&[command, "proj/x"]);
        assert_eq!(out.code(), 1, "{command}: {out:?}");
        assert!(out.stdout.is_empty(), "{command}: {out:?}");
        assert!(
            out.stderr.contains("proj/x has not started"),
            "{command}: {out:?}"
        );
    }
    assert!(!sb.runs().exists(), "looking created no job");
}

#[test]
fn a_deferred_prompt_shows_until_when_and_why() {
    let sb = Sandbox::new();
    let script = sb.script("fail", FAILING);
    let config = ConfigToml::new(&["/bin/sh", &script, "{name}"])
        .profile("cooldown", "\"1h\"")
        .profile("max_attempts", "3");
    sb.configure(&config);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "flaky", "fails\n");

    let row = wait_until("the failed prompt to be deferred", secs(15), || {
        rows(&sb, &["--state", "deferred"]).into_iter().next()
    });
    let failed = only_job(&sb, "proj", "flaky");
    assert_eq!(failed.state(), "failed", "{:#}", failed.record);
    assert_eq!(row["label"], "proj/flaky", "{row:#}");
    assert!(row["id"].is_null(), "{row:#}");
    assert_eq!(
        row["attempt"], 2,
        "the claim will be the second attempt: {row:#}"
    );
    let waiting = &row["waiting"];
    assert_eq!(waiting["retry_of"], failed.id.as_str(), "{row:#}");
    assert_eq!(waiting["last_outcome"], "failure", "{row:#}");
    let until = parse_rfc3339_ms(waiting["deferred_until"].as_str().expect("until"));
    assert_eq!(until, failed.time_ms("finished_at") + 3_600_000, "{row:#}");
    let reason = row["state_reason"].as_str().expect("why");
    assert!(reason.contains("cooldown of 1h after failure"), "{reason}");
    assert_eq!(rows(&sb, &["--state", "waiting"]).len(), 0);

    let human = sb.run(&["show", "proj/flaky"]);
    assert_eq!(human.code(), 0, "{human:?}");
    for needle in [
        "deferred",
        "cooldown of 1h after failure",
        "until",
        "attempt   2",
    ] {
        assert!(human.stdout.contains(needle), "{needle}: {}", human.stdout);
    }
    let logs = sb.run(&["logs", "proj/flaky"]);
    assert_eq!(logs.code(), 1, "{logs:?}");
    assert!(logs.stderr.contains("deferred"), "{logs:?}");
    assert!(
        logs.stderr.contains(&failed.id),
        "points at the last attempt: {logs:?}"
    );
}

#[test]
fn cancelling_a_waiting_prompt_without_a_daemon_ends_it_and_nothing_runs() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    fs::write(sb.out().join("release"), "").expect("release");
    let bytes = "---\npriority: 1\n---\nsecret plan, caf\u{e9}\n";
    sb.drop_prompt("proj", "x", bytes);

    let out = sb.run(&["abort", "proj/x", "--reason", "not needed"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("proj/x: cancelled"), "{out:?}");
    let job = only_job(&sb, "proj", "x");
    assert!(job.is_done(), "ended at once: {:#}", job.record);
    assert_cancelled(&sb, &job, bytes.as_bytes(), "not needed");
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
    let again = sb.run(&["abort", "proj/x"]);
    assert_eq!(again.code(), 1, "{again:?}");
    assert!(
        again.stdout.contains("already ended (cancelled)"),
        "{again:?}"
    );

    // A daemon started afterwards runs what comes next, never the cancelled prompt.
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "next", "runs\n");
    assert_eq!(sb.wait_done("proj", "next", secs(15)).state(), "succeeded");
    let names: Vec<String> = starts(&sb).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["next"]);
    assert_eq!(only_job(&sb, "proj", "x").state(), "cancelled");
}

#[test]
fn cancelling_a_prompt_waiting_behind_an_earlier_job_with_a_daemon_running() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "x", "first drop\n");
    let first = sb.wait_state("proj", "x", "running", secs(15));
    // A second drop of the same prompt waits for the first job to end.
    sb.drop_prompt("proj", "x", "second drop\n");
    let row = wait_until("the second drop listed as waiting", secs(10), || {
        rows(&sb, &["--state", "waiting"]).into_iter().next()
    });
    assert!(
        row["state_reason"]
            .as_str()
            .is_some_and(|r| r.contains("earlier job")),
        "{row:#}"
    );
    // `proj/x` is the running job; `proj/x.prompt.md` is the waiting file.
    let shown = json(&sb, &["show", "proj/x", "--json"], 0);
    assert_eq!(shown["id"], first.id.as_str(), "{shown:#}");

    let out = sb.run(&["abort", "proj/x.prompt.md", "--reason", "duplicate"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("proj/x: cancelled"), "{out:?}");
    let cancelled = wait_until("the cancelled job", secs(5), || {
        sb.jobs_for("proj", "x")
            .into_iter()
            .find(|j| j.id != first.id)
    });
    assert_cancelled(&sb, &cancelled, b"second drop\n", "duplicate");
    assert_eq!(sb.job(&first.id).expect("first").state(), "running");

    fs::write(sb.out().join("release"), "").expect("release");
    let done = sb.wait_id(&first.id, "the first job to end", secs(15), Job::is_done);
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_never("the cancelled drop to run", millis(1500), || {
        starts(&sb).len() > 1
    });
    assert_eq!(sb.jobs_for("proj", "x").len(), 2);
}

#[test]
fn cancelling_a_deferred_prompt_ends_its_retries() {
    let sb = Sandbox::new();
    let script = sb.script("fail", FAILING);
    let config = ConfigToml::new(&["/bin/sh", &script, "{name}"])
        .profile("cooldown", "\"1h\"")
        .profile("max_attempts", "3");
    sb.configure(&config);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "flaky", "fails\n");
    wait_until("the prompt to be deferred", secs(15), || {
        rows(&sb, &["--state", "deferred"]).into_iter().next()
    });
    let failed = only_job(&sb, "proj", "flaky");
    let deferred = || json(&sb, &["status", "--json"], 0)["deferred"].clone();
    wait_until("status to list the deferred prompt", secs(10), || {
        (deferred().as_array().map(Vec::len) == Some(1)).then_some(())
    });

    let out = sb.run(&["abort", "proj/flaky", "--reason", "give up"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let cancelled = wait_until("the cancelled attempt", secs(5), || {
        sb.jobs_for("proj", "flaky")
            .into_iter()
            .find(|j| j.id != failed.id)
    });
    assert_cancelled(&sb, &cancelled, b"fails\n", "give up");
    assert_eq!(
        cancelled.int_field("attempt"),
        Some(2),
        "{:#}",
        cancelled.record
    );
    assert_eq!(cancelled.str_field("retry_of"), Some(failed.id.as_str()));
    assert!(rows(&sb, &["--state", "deferred"]).is_empty());
    assert_eq!(deferred(), Value::Array(vec![]), "status agrees at once");
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
    let outcomes: Vec<Value> = history(&sb, "proj", "flaky")
        .iter()
        .map(|r| r["outcome"].clone())
        .collect();
    assert_eq!(outcomes, ["failure", "cancelled"]);
    assert_eq!(starts(&sb).len(), 1, "one run, the failed one");
}

#[test]
fn a_queued_job_aborted_before_it_starts_ends_cancelled_with_or_without_a_daemon() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "1"));
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("proj", "blocker", "holds the only slot\n");
    sb.wait_state("proj", "blocker", "running", secs(15));
    for name in ["second", "third"] {
        sb.drop_prompt("proj", name, format!("{name} waits for the slot\n"));
        sb.wait_state("proj", name, "queued", secs(10));
    }

    let out = sb.run(&["abort", "proj/second", "--reason", "not now"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let second = sb.wait_done("proj", "second", secs(5));
    assert_cancelled(&sb, &second, b"second waits for the slot\n", "not now");

    // With no daemon to see its marker, the CLI ends the queued job itself.
    d.sigterm();
    assert_eq!(d.wait_exit(secs(10)).code(), Some(0), "{}", d.stderr());
    let out = sb.run(&["abort", "proj/third", "--reason", "nobody home"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let third = only_job(&sb, "proj", "third");
    assert!(
        third.is_done(),
        "ended before abort returned: {:#}",
        third.record
    );
    assert_cancelled(&sb, &third, b"third waits for the slot\n", "nobody home");

    let _d = Daemon::start(&sb);
    fs::write(sb.out().join("release"), "").expect("release");
    assert_eq!(
        sb.wait_done("proj", "blocker", secs(15)).state(),
        "succeeded"
    );
    sb.drop_prompt("proj", "after", "the slot is free\n");
    sb.wait_done("proj", "after", secs(15));
    let names: Vec<String> = starts(&sb).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["blocker", "after"], "no cancelled job ever started");
}

/// The daemon claims the prompt between the moment `abort` found it
/// waiting and its own claim (held open by a test pause): `abort` falls
/// back to the ABORT marker of the daemon's job and returns once that job
/// has ended, so the prompt's command never starts after it returns, and
/// the prompt is kept in the archive.
#[test]
fn abort_racing_the_daemons_claim_never_lets_the_prompt_run_after_it_returns() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    sb.drop_prompt("proj", "raced", "claimed twice over\n");
    let go = sb.out().join("go");
    let out = std::thread::scope(|s| {
        let aborting = s.spawn(|| {
            let mut cmd = sb.command(&["abort", "proj/raced", "--reason", "raced"]);
            cmd.env("JOBWARDEN_TEST_PAUSE", "abort-before-claim")
                .env("JOBWARDEN_TEST_PAUSE_UNTIL", &go);
            let out = cmd.output().expect("run abort");
            (out, now_ms())
        });
        // The daemon starts only once abort holds at its claim, having
        // found the prompt waiting: the daemon's claim then wins the race.
        let reached = sb.out().join("go.reached");
        wait_until("abort to reach its claim", secs(15), || {
            reached.exists().then_some(())
        });
        let _d = Daemon::start(&sb);
        sb.wait_job("proj", "raced", secs(15));
        fs::write(&go, "").expect("let abort go on");
        let (out, returned) = aborting.join().expect("abort thread");
        let job = only_job(&sb, "proj", "raced");
        assert!(
            job.is_terminal(),
            "ended when abort returned: {:#}",
            job.record
        );
        assert_never(
            "the prompt to start after abort returned",
            millis(1000),
            || starts(&sb).iter().any(|(_, at)| *at > returned),
        );
        out
    });
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("claimed by the daemon meanwhile"),
        "{stdout}"
    );
    let job = sb.wait_done("proj", "raced", secs(10));
    assert!(
        ["cancelled", "aborted"].contains(&job.state()),
        "{:#}",
        job.record
    );
    let archived = job.str_field("archive_path").expect("archived");
    assert_eq!(
        fs::read(sb.root.join(archived)).expect("the prompt is kept"),
        b"claimed twice over\n"
    );
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
}

/// Prompts dropped and aborted at once, over and over, with a daemon
/// claiming them: whoever wins each race (the daemon's claim, or the
/// abort's), every prompt ends stopped — cancelled, or aborted if it had
/// started —, none starts after its abort returned, and each is kept.
#[test]
fn drop_and_abort_at_once_never_loses_or_runs_a_prompt() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    for i in 0..8 {
        let name = format!("p{i}");
        let body = format!("prompt {i}\n");
        sb.drop_prompt("proj", &name, &body);
        let out = sb.run(&["abort", &format!("proj/{name}"), "--reason", "race"]);
        let returned = now_ms();
        assert_eq!(out.code(), 0, "{name}: {out:?}");
        let job = wait_until("the job to end", secs(15), || {
            sb.jobs_for("proj", &name).into_iter().find(Job::is_done)
        });
        assert!(
            ["cancelled", "aborted"].contains(&job.state()),
            "{:#}",
            job.record
        );
        let archived = job.str_field("archive_path").expect("archived");
        assert_eq!(
            fs::read(sb.root.join(archived)).expect("kept"),
            body.as_bytes()
        );
        let late = starts(&sb)
            .into_iter()
            .any(|(n, at)| n == name && at > returned);
        assert!(!late, "{name} started after abort returned");
    }
    assert!(!Path::new(&sb.out().join("release")).exists());
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
