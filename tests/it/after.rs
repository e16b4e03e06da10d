//! Dependencies, as pueue and Slurm users expect them: front matter
//! `after:` (and `submit --after`) makes a job wait, claimed and queued,
//! until every job it names ended `succeeded`; one that ended any other
//! way for good cancels it, naming the job and how it ended; a failed job
//! retried is followed to its last attempt; what it waits for is said by
//! `show`, `jobs` and `status`; an unknown one is a rejection at claim;
//! a restart keeps it waiting. Real daemon, real jobs.

use std::fs;

use serde_json::Value;

use crate::support::*;

/// Writes its name to `$OUT/ran`, then waits for `$OUT/release-<name>`;
/// fails when its prompt says `fail`.
const GATED: &str = r#"body=$(cat)
echo "$JOBWARDEN_NAME" >> "$OUT/ran"
while [ ! -e "$OUT/release-$JOBWARDEN_NAME" ]; do sleep 0.05; done
case "$body" in *fail*) echo "it failed" >&2; exit 3;; esac"#;

fn release(sb: &Sandbox, name: &str) {
    fs::write(sb.out().join(format!("release-{name}")), "").expect("release");
}

fn gated(sb: &Sandbox) -> ConfigToml {
    let job = sb.script("gated", GATED);
    ConfigToml::new(&["/bin/sh", &job]).profile("max_attempts", "1")
}

#[test]
fn a_job_after_another_waits_says_so_and_starts_once_it_succeeded() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "first", "x\n");
    let first = sb.wait_state("p", "first", "running", secs(20));
    sb.drop_prompt("p", "second", "---\nafter: p/first\n---\nx\n");
    let second = sb.wait_state("p", "second", "queued", secs(20));
    assert_eq!(
        second.record["after"][0],
        first.id.as_str(),
        "{:#}",
        second.record
    );

    // What it waits for, as each view says it.
    let shown = sb.run(&["show", &second.id]);
    assert!(
        shown
            .stdout
            .contains(&format!("after     {} (p/first, running)", first.id)),
        "{}",
        shown.stdout
    );
    let short = &first.id[first.id.len() - 8..];
    let why = format!("after job {short} (p/first, running)");
    wait_until("jobs to say what it waits for", secs(10), || {
        sb.run(&["jobs"]).stdout.contains(&why).then_some(())
    });
    assert!(sb.run(&["status"]).stdout.contains(&why), "status");
    assert_never("the second starting early", millis(800), || {
        sb.ran_lines().contains(&"second".to_owned())
    });

    release(&sb, "first");
    release(&sb, "second");
    let done = sb.wait_done("p", "second", secs(20));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    let first = sb.job(&first.id).expect("first");
    assert!(
        done.str_field("started_at") >= first.str_field("finished_at"),
        "started after the first ended"
    );
    assert_eq!(sb.ran_lines(), vec!["first", "second"]);
}

#[test]
fn a_job_after_one_that_failed_for_good_is_cancelled_naming_it_and_so_is_its_own_follower() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "recorder",
        r#"cat >> "$OUT/notices"; echo >> "$OUT/notices""#,
    );
    sb.configure(&gated(&sb).extra(&format!(
        "[[notify]]\nname = \"rec\"\non = [\"cancelled\"]\ncommand = {}\n",
        q_argv(&["/bin/sh", &hook])
    )));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "base", "fail\n");
    let base = sb.wait_state("p", "base", "running", secs(20));
    // One by id prefix, one after that one by its prompt.
    let prefix = &base.id[..13];
    sb.drop_prompt("p", "next", format!("---\nafter: {prefix}\n---\nx\n"));
    sb.wait_state("p", "next", "queued", secs(20));
    sb.drop_prompt("p", "last", "---\nafter: [p/next]\n---\nx\n");
    sb.wait_state("p", "last", "queued", secs(20));
    release(&sb, "base");
    assert_eq!(sb.wait_done("p", "base", secs(20)).state(), "failed");
    let next = sb.wait_done("p", "next", secs(20));
    assert_eq!(next.state(), "cancelled", "{:#}", next.record);
    let why = next.str_field("state_reason").expect("a reason");
    let short = &base.id[base.id.len() - 8..];
    assert!(
        why.contains(&format!("job {short} (p/base) it waited for ended failed")),
        "{why}"
    );
    let last = sb.wait_done("p", "last", secs(20));
    assert_eq!(last.state(), "cancelled", "{:#}", last.record);
    assert!(
        last.str_field("state_reason")
            .is_some_and(|r| r.contains("(p/next) it waited for ended cancelled")),
        "{:#}",
        last.record
    );
    // Neither ran, and the hooks were told of both.
    assert_eq!(sb.ran_lines(), vec!["base"]);
    wait_until("both cancels told", secs(10), || {
        let notices = fs::read_to_string(sb.out().join("notices")).unwrap_or_default();
        (notices.matches("\"cancelled\"").count() >= 2).then_some(())
    });
}

#[test]
fn a_dependency_that_fails_and_is_retried_is_followed_to_its_last_attempt() {
    let sb = Sandbox::new();
    let flaky = sb.script(
        "flaky",
        r#"cat >/dev/null
echo "$JOBWARDEN_NAME" >> "$OUT/ran"
if [ "$JOBWARDEN_NAME" = flaky ] && [ ! -e "$OUT/failed-once" ]; then touch "$OUT/failed-once"; exit 3; fi"#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &flaky])
            .profile("max_attempts", "2")
            .profile("cooldown", "\"1s\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "flaky", "x\n");
    let first = sb.wait_state("p", "flaky", "running", secs(20));
    let out = sb.run_with_stdin(
        &[
            "submit",
            "--project",
            "p",
            "--name",
            "after-flaky",
            "--after",
            &first.id,
            "-",
        ],
        b"x\n",
    );
    assert_eq!(out.code(), 0, "{out:?}");
    let done = sb.wait_done("p", "after-flaky", secs(30));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    let ran = sb.ran_lines();
    assert_eq!(
        ran,
        vec!["flaky", "flaky", "after-flaky"],
        "after the retry"
    );
}

#[test]
fn an_unknown_dependency_is_a_rejection_naming_it_and_submit_refuses_a_conflict() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "orphan", "---\nafter: nope/nothing\n---\nx\n");
    let rejected = sb.wait_done("p", "orphan", secs(20));
    assert_eq!(rejected.state(), "rejected", "{:#}", rejected.record);
    let why = rejected.str_field("state_reason").expect("why");
    assert!(why.contains("after \"nope/nothing\""), "{why}");

    // A flag that says what the prompt's own front matter says: refused,
    // nothing dropped.
    let file = sb.base.join("own.prompt.md");
    fs::write(&file, "---\nafter: p/orphan\n---\nx\n").expect("prompt");
    let out = sb.run(&[
        "submit",
        "--project",
        "p",
        "--after",
        "p/orphan",
        &file.display().to_string(),
    ]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("--after conflicts"), "{}", out.stderr);
    assert!(!sb.inbox().join("p/own.prompt.md").exists());
}

#[test]
fn a_job_waiting_for_another_keeps_waiting_across_a_restart() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb));
    let mut daemon = Daemon::start(&sb);
    sb.drop_prompt("p", "long", "x\n");
    let long = sb.wait_state("p", "long", "running", secs(20));
    sb.drop_prompt("p", "then", format!("---\nafter: {}\n---\nx\n", long.id));
    sb.wait_state("p", "then", "queued", secs(20));
    daemon.sigterm();
    daemon.wait_exit(secs(10));
    let _daemon = Daemon::start(&sb);
    assert_never(
        "it starting before the job it waits for ends",
        secs(1),
        || sb.ran_lines().contains(&"then".to_owned()),
    );
    release(&sb, "long");
    release(&sb, "then");
    let done = sb.wait_done("p", "then", secs(20));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    let record: Value = done.record.clone();
    assert_eq!(record["after"][0], long.id.as_str());
}
