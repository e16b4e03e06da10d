//! Shutdown policies: `detach` (covered in `daemon.rs`: jobs outlive the
//! daemon), `drain` (wait for running jobs, start nothing new) and `abort`
//! (abort running jobs with reason `shutdown`), both bounded by
//! `drain_timeout`.

use std::fs;

use crate::support::*;

/// A job that runs until `$OUT/release` exists (or 30 s).
const GATED: &str = r#"i=0; while [ ! -e "$OUT/release" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo finished"#;

#[test]
fn drain_waits_for_running_jobs_and_starts_no_queued_one() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", GATED);
    let cfg = ConfigToml::new(&["/bin/sh", &gate])
        .global("max_jobs", "1")
        .global("shutdown", "\"drain\"");
    sb.configure(&cfg);
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("proj", "running", "x\n");
    let running = sb.wait_state("proj", "running", "running", secs(15));
    sb.drop_prompt("proj", "waiting", "y\n");
    let waiting = sb.wait_state("proj", "waiting", "queued", secs(15));

    d.sigterm();
    assert_never("the daemon exiting while its job runs", millis(800), || {
        d.try_status().is_some()
    });
    fs::write(sb.out().join("release"), "").expect("release");
    assert_eq!(d.wait_exit(secs(15)).code(), Some(0), "{}", d.stderr());
    let ended = sb.job(&running.id).expect("drained job");
    assert_eq!(ended.state(), "succeeded", "{:#}", ended.record);
    let still = sb.job(&waiting.id).expect("queued job");
    assert_eq!(
        still.state(),
        "queued",
        "nothing new started while draining"
    );
    assert!(still.pid().is_none());
}

#[test]
fn abort_policy_aborts_running_jobs_with_reason_shutdown() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate]).global("shutdown", "\"abort\""));
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("proj", "victim", "x\n");
    let job = sb.wait_state("proj", "victim", "running", secs(15));

    d.sigterm();
    assert_eq!(d.wait_exit(secs(15)).code(), Some(0), "{}", d.stderr());
    let ended = sb.job(&job.id).expect("job");
    assert_eq!(
        ended.state(),
        "aborted",
        "ended before the daemon exited: {:#}",
        ended.record
    );
    assert!(
        ended
            .str_field("state_reason")
            .is_some_and(|r| r.contains("shutdown")),
        "{:#}",
        ended.record
    );
}

#[test]
fn drain_timeout_bounds_the_wait_and_leaves_the_job_running() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", GATED);
    let cfg = ConfigToml::new(&["/bin/sh", &gate])
        .global("shutdown", "\"drain\"")
        .global("drain_timeout", "\"500ms\"");
    sb.configure(&cfg);
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("proj", "long", "x\n");
    let job = sb.wait_state("proj", "long", "running", secs(15));

    d.sigterm();
    assert_eq!(d.wait_exit(secs(10)).code(), Some(0), "{}", d.stderr());
    assert_eq!(
        sb.job(&job.id).expect("job").state(),
        "running",
        "detached after the timeout"
    );
    fs::write(sb.out().join("release"), "").expect("release");
    let done = wait_until("the detached job to finish on its own", secs(15), || {
        sb.job(&job.id).filter(|j| j.state() == "succeeded")
    });
    assert!(done.str_field("archive_path").is_some());
}
