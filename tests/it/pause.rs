//! `jobwarden pause` and `resume`: no new job starts in the paused scope
//! (the whole daemon, a profile, a project) while prompts are still
//! claimed and queued and running jobs go on; the pause is a marker under
//! `control/`, so it holds without a daemon and across restarts; `status`
//! and `jobs` say what is paused and why a queued job waits.

use serde_json::Value;

use crate::support::*;

/// A job that records its start in `$OUT/started` and sleeps `$2` seconds.
const RECORD_START: &str = r#"echo "$1" >> "$OUT/started"
sleep "$2"
"#;

fn sandbox_with(extra: &str) -> Sandbox {
    let sb = Sandbox::new();
    let script = sb.script("record", RECORD_START);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}", "0.1"]).extra(extra));
    sb
}

fn started(sb: &Sandbox) -> Vec<String> {
    std::fs::read_to_string(sb.out().join("started"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Wait until job `id` has ended (prompt archived).
fn done(sb: &Sandbox, id: &str) -> Job {
    sb.wait_id(id, &format!("job {id} to end"), secs(10), Job::is_done)
}

fn ok(out: &CliOutput) -> &str {
    assert_eq!(out.code(), 0, "{out:?}");
    &out.stdout
}

fn status_json(sb: &Sandbox) -> Value {
    serde_json::from_str(ok(&sb.run(&["status", "--json"]))).expect("status JSON")
}

/// The queued job's `waits`, as `jobs --json` says it.
fn waiting_of(sb: &Sandbox, id: &str) -> Option<String> {
    let jobs: Value = serde_json::from_str(&sb.run(&["jobs", "--json"]).stdout).ok()?;
    let job = jobs.as_array()?.iter().find(|j| j["id"] == id)?;
    job["waits"].as_str().map(str::to_owned)
}

/// Wait until `jobs` says the job waits for `reason`.
fn wait_reason(sb: &Sandbox, id: &str, reason: &str) {
    wait_until(
        &format!("job {id} to wait for {reason:?}"),
        secs(10),
        || (waiting_of(sb, id).as_deref() == Some(reason)).then_some(()),
    );
}

#[test]
fn a_pause_stops_starts_while_claims_continue_and_running_jobs_go_on() {
    let sb = Sandbox::new();
    let script = sb.script("record", RECORD_START);
    sb.configure(&ConfigToml::new(&[
        "/bin/sh",
        &script,
        "{name}",
        "{project}",
    ]));
    let _d = Daemon::start(&sb);
    // The project doubles as the sleep: this one runs through the pause.
    sb.drop_prompt("1.5", "long", "x\n");
    sb.wait_state("1.5", "long", "running", secs(10));

    let out = sb.run(&["pause", "--reason", "deploy"]);
    assert!(
        ok(&out).contains("paused the daemon: no new job starts"),
        "{out:?}"
    );
    sb.drop_prompt("0", "one", "x\n");
    sb.drop_prompt("0", "two", "x\n");
    let one = sb.wait_state("0", "one", "queued", secs(10));
    let two = sb.wait_state("0", "two", "queued", secs(10));
    assert!(
        sb.project_dir("0").join("one.running.md").exists(),
        "claimed while paused"
    );
    wait_reason(&sb, &one.id, "paused (daemon)");
    let jobs = ok(&sb.run(&["jobs"])).to_owned();
    assert!(
        jobs.contains("paused: daemon") && jobs.contains("deploy"),
        "jobs shows the pause: {jobs}"
    );
    let status = status_json(&sb);
    assert_eq!(status["paused"]["daemon"]["reason"], "deploy", "{status:#}");

    let long = sb.wait_done("1.5", "long", secs(15));
    assert_eq!(long.state(), "succeeded", "the running job went on");
    assert_never("a job to start while paused", millis(800), || {
        started(&sb).len() > 1
    });

    let out = sb.run(&["resume"]);
    assert!(ok(&out).contains("resumed the daemon"), "{out:?}");
    for id in [&one.id, &two.id] {
        let job = done(&sb, id);
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    }
}

#[test]
fn a_pause_written_without_a_daemon_holds_across_restarts_until_resumed() {
    let sb = sandbox_with("");
    let out = sb.run(&["pause", "--reason", "maintenance"]);
    assert!(ok(&out).contains("paused the daemon"), "{out:?}");
    assert!(
        out.stderr.contains("no daemon is running"),
        "says the pause waits for a daemon: {out:?}"
    );
    let again = sb.run(&["pause", "--reason", "other"]);
    assert!(
        ok(&again).contains("already paused") && again.stdout.contains("maintenance"),
        "a second pause keeps the first: {again:?}"
    );

    let mut first = Daemon::start(&sb);
    sb.drop_prompt("p", "held", "x\n");
    let held = sb.wait_state("p", "held", "queued", secs(10));
    wait_reason(&sb, &held.id, "paused (daemon)");
    first.sigterm();
    first.wait_exit(secs(10));

    let _second = Daemon::start(&sb);
    assert_never(
        "the queued job to start after the restart",
        millis(800),
        || !started(&sb).is_empty(),
    );
    wait_reason(&sb, &held.id, "paused (daemon)");
    let status = ok(&sb.run(&["status"])).to_owned();
    assert!(
        status.contains("paused") && status.contains("maintenance"),
        "{status}"
    );

    ok(&sb.run(&["resume"]));
    let ended = done(&sb, &held.id);
    assert_eq!(ended.state(), "succeeded", "{:#}", ended.record);
    let status = status_json(&sb);
    assert_eq!(status["paused"]["daemon"], Value::Null, "{status:#}");
    let out = sb.run(&["resume"]);
    assert!(ok(&out).contains("was not paused"), "{out:?}");
}

#[test]
fn a_profile_pause_holds_only_that_profiles_jobs() {
    let sb = Sandbox::new();
    let script = sb.script("record", RECORD_START);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script, "{name}", "0.1"])
            .extra("[profiles.review]\n\n[[route]]\nmatch = \"rev/**\"\nprofile = \"review\"\n"),
    );
    let _d = Daemon::start(&sb);
    ok(&sb.run(&["pause", "--profile", "review", "--reason", "quota"]));
    sb.drop_prompt("rev", "held", "x\n");
    sb.drop_prompt("other", "free", "x\n");
    let free = sb.wait_done("other", "free", secs(10));
    assert_eq!(free.state(), "succeeded");
    let held = sb.wait_state("rev", "held", "queued", secs(10));
    wait_reason(&sb, &held.id, "paused (profile review)");
    assert_eq!(started(&sb), ["free"]);

    let out = sb.run(&["resume", "--profile", "review", "--json"]);
    let json: Value = serde_json::from_str(ok(&out)).expect("resume JSON");
    assert_eq!(json["resumed"][0]["scope"], "profile", "{json:#}");
    assert_eq!(json["resumed"][0]["name"], "review");
    assert_eq!(json["resumed"][0]["reason"], "quota");
    assert_eq!(json["still_paused"], serde_json::json!([]));
    let ended = done(&sb, &held.id);
    assert_eq!(ended.state(), "succeeded");
}

#[test]
fn a_project_pause_holds_only_that_folder() {
    let sb = sandbox_with("");
    let _d = Daemon::start(&sb);
    let out = sb.run(&["pause", "--project", "acme/api", "--json"]);
    let json: Value = serde_json::from_str(ok(&out)).expect("pause JSON");
    assert_eq!(json["scope"], "project");
    assert_eq!(json["name"], "acme/api");
    assert_eq!(json["changed"], true);
    assert_eq!(json["daemon_running"], true);
    assert!(
        json["paused_at"].is_string() && json["by"].is_string(),
        "{json:#}"
    );

    sb.drop_prompt("acme/api", "held", "x\n");
    sb.drop_prompt("acme/api/sub", "deeper", "x\n");
    sb.drop_prompt("acme/web", "other", "x\n");
    for (project, name) in [("acme/web", "other"), ("acme/api/sub", "deeper")] {
        let job = sb.wait_done(project, name, secs(10));
        assert_eq!(job.state(), "succeeded", "{project}/{name}");
    }
    let held = sb.wait_state("acme/api", "held", "queued", secs(10));
    wait_reason(&sb, &held.id, "paused (project acme/api)");
    let status = status_json(&sb);
    assert!(
        status["paused"]["projects"]["acme/api"].is_object(),
        "{status:#}"
    );
    let queued = &status["queued"][0];
    assert_eq!(queued["waits"], "paused (project acme/api)", "{status:#}");

    ok(&sb.run(&["resume", "--all"]));
    let ended = done(&sb, &held.id);
    assert_eq!(ended.state(), "succeeded");
}

#[test]
fn pause_refuses_unknown_profiles_and_unusable_projects() {
    let sb = sandbox_with("");
    let out = sb.run(&["pause", "--profile", "nope"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("\"nope\"") && out.stderr.contains("default"),
        "names the profile and the defined ones: {out:?}"
    );
    for bad in ["../x", "", "a//b"] {
        let out = sb.run(&["pause", "--project", bad]);
        assert_eq!(out.code(), 2, "{bad:?}: {out:?}");
    }
    let both = sb.run(&["pause", "--profile", "default", "--project", "p"]);
    assert_eq!(both.code(), 2, "one scope at a time: {both:?}");
    assert!(
        !sb.root.join("control/pause").exists(),
        "nothing paused by a refused command"
    );
}
