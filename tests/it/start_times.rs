//! Start times and windows, as `at` and Slurm's `--begin` users expect:
//! front matter `not_before` (and `submit --at`) makes a job wait, queued
//! and visibly, until its time, across a restart; a profile's `window`
//! lets its jobs start only inside it, says when it opens, and follows a
//! reload. Real daemon, real jobs, the machine's own clock and zone.

use std::process::Command;

use crate::support::*;

const JOB: &str = r#"cat >/dev/null; echo "$JOBWARDEN_NAME" >> "$OUT/ran""#;

/// The local time `minutes` from now, `HH:MM`, as the machine's zone says.
fn local_in(minutes: i64) -> String {
    let out = Command::new("date")
        .arg(format!("--date=now {minutes:+} minutes"))
        .arg("+%H:%M")
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_job_with_a_start_time_waits_visibly_and_starts_at_it_across_a_restart() {
    let sb = Sandbox::new();
    let job = sb.script("job", JOB);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]));
    let mut daemon = Daemon::start(&sb);
    let out = sb.run_with_stdin(
        &[
            "submit",
            "--project",
            "p",
            "--name",
            "later",
            "--at",
            "3s",
            "-",
        ],
        b"x\n",
    );
    assert_eq!(out.code(), 0, "{out:?}");
    let queued = sb.wait_state("p", "later", "queued", secs(20));
    let at = queued
        .str_field("not_before")
        .expect("its start time")
        .to_owned();
    wait_until("jobs to say when it starts", secs(10), || {
        sb.run(&["jobs"])
            .stdout
            .contains("not before")
            .then_some(())
    });
    assert!(sb.run(&["show", &queued.id]).stdout.contains("starts at"));
    // A restart keeps it waiting for its time.
    daemon.sigterm();
    daemon.wait_exit(secs(10));
    let _daemon = Daemon::start(&sb);
    let done = sb.wait_done("p", "later", secs(20));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    let started = done.str_field("started_at").expect("started");
    assert!(started >= at.as_str(), "started {started}, not before {at}");
    assert_eq!(sb.ran_lines(), vec!["later"]);
}

#[test]
fn a_profiles_window_holds_its_jobs_until_it_opens_and_follows_a_reload() {
    let sb = Sandbox::new();
    let job = sb.script("job", JOB);
    let closed = format!("{}-{}", local_in(120), local_in(180));
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).profile("window", &q(&closed)));
    let _daemon = Daemon::start(&sb);
    sb.drop_prompt("p", "night", "x\n");
    sb.wait_state("p", "night", "queued", secs(20));
    let why = format!("outside the window {closed} of profile default; opens");
    wait_until("jobs to say when the window opens", secs(10), || {
        sb.run(&["jobs"]).stdout.contains(&why).then_some(())
    });
    assert_never("the job starting outside its window", secs(1), || {
        !sb.ran_lines().is_empty()
    });
    // Open now: a window round the current time, and the list form.
    let open = format!("{}-{}", local_in(-60), local_in(60));
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &job])
            .profile("window", &format!("[{}, {}]", q(&closed), q(&open))),
    );
    assert_eq!(sb.run(&["reload"]).code(), 0);
    let done = sb.wait_done("p", "night", secs(20));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
}

#[test]
fn a_bad_start_time_or_window_is_refused_naming_it() {
    let sb = Sandbox::new();
    let job = sb.script("job", JOB);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).profile("window", "\"25:00-06:00\""));
    let check = sb.run(&["config", "check"]);
    assert_ne!(check.code(), 0, "{check:?}");
    assert!(
        check.stdout.contains("window") || check.stderr.contains("window"),
        "{check:?}"
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]));
    let _daemon = Daemon::start(&sb);
    let out = sb.run_with_stdin(
        &[
            "submit",
            "--project",
            "p",
            "--name",
            "odd",
            "--at",
            "soonish",
            "-",
        ],
        b"x\n",
    );
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("--at"), "{}", out.stderr);
    sb.drop_prompt("p", "odd", "---\nnot_before: half past\n---\nx\n");
    let rejected = sb.wait_done("p", "odd", secs(20));
    assert_eq!(rejected.state(), "rejected");
    assert!(
        rejected
            .str_field("state_reason")
            .is_some_and(|r| r.contains("not_before")),
        "{:#}",
        rejected.record
    );
}
