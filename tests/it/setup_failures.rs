//! Failures that waiting will not fix: a program not found or not
//! executable, a missing workdir and a `prepare` that cannot start end the
//! job `setup_failed` (no cooldown, no automatic retry, the fix in its
//! reason, reported by `status`); `retry --now` overrides any cooldown,
//! also for a prompt already waiting in the inbox; `ack` clears what needs
//! attention until a newer failure; a rate limit is recognised without
//! any config.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use serde_json::Value;

use crate::support::*;

/// `args` run with `--json`, parsed, after asserting the exit code.
fn json(sb: &Sandbox, args: &[&str], code: i32) -> Value {
    let out = sb.run(args);
    assert_eq!(out.code(), code, "{args:?}: {out:?}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"))
}

/// The ledger's row of job `id`.
fn history(sb: &Sandbox, id: &str) -> Value {
    json(sb, &["history", "show", id, "--json"], 0)
}

/// Asserts that `job` ended `setup_failed`, archived under
/// `archive/setup_failed/`, recorded so in the ledger, and not requeued.
fn assert_setup_failed(sb: &Sandbox, job: &Job) {
    assert_eq!(job.state(), "setup_failed", "{:#}", job.record);
    assert_eq!(job.str_field("disposition"), Some("archived"));
    let archived = job.str_field("archive_path").unwrap_or_default();
    assert!(
        archived.starts_with("archive/setup_failed/"),
        "{:#}",
        job.record
    );
    assert!(sb.root.join(archived).is_file(), "archived: {archived}");
    assert_eq!(history(sb, &job.id)["outcome"], "setup_failed");
}

fn reason(job: &Job) -> String {
    job.str_field("state_reason").unwrap_or_default().to_owned()
}

#[test]
fn a_program_not_found_ends_setup_failed_with_the_fix_and_no_cooldown() {
    let sb = Sandbox::new();
    let tools = sb.base.join("tools");
    fs::create_dir_all(&tools).expect("tools");
    let program = "jw-it-agent-4c2e";
    let path = format!("{}:/usr/bin:/bin", tools.display());
    sb.configure(
        &ConfigToml::new(&[program])
            .env("PATH", &path)
            .profile("max_attempts", "3")
            .profile("cooldown", "\"1h\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "agent", "do the thing\n");

    let first = sb.wait_done("proj", "agent", secs(15));
    assert_setup_failed(&sb, &first);
    let why = reason(&first);
    assert!(
        why.contains(&format!(
            "program `{program}` not found on the job's PATH ({path})"
        )),
        "names the program and the PATH: {why}"
    );
    assert!(
        why.contains("install it or set profiles.default.command"),
        "{why}"
    );
    assert_eq!(first.str_field("failure_stage"), Some("run"));
    assert!(
        first.record["pid"].is_null(),
        "nothing ran: {:#}",
        first.record
    );
    assert!(
        !sb.project_dir("proj").join("agent.prompt.md").exists(),
        "never retried automatically, whatever max_attempts says"
    );

    let st = json(&sb, &["status", "--json"], 0);
    assert_eq!(st["overall_state"], "needs_attention", "{st:#}");
    assert_eq!(
        st["needs_attention"][0]["outcome"], "setup_failed",
        "{st:#}"
    );
    assert_eq!(st["needs_attention"][0]["reason"], why.as_str(), "{st:#}");
    assert_eq!(st["counts"]["setup_failed"], 1, "{st:#}");
    let human = sb.run(&["status"]);
    assert!(human.stdout.contains("last run: setup_failed"), "{human:?}");
    assert!(human.stdout.contains("install it or set"), "{human:?}");

    // The setup is fixed; the same prompt dropped again runs at once: no
    // cooldown (the profile's is an hour).
    install_program(
        &tools.join(program),
        "#!/bin/sh\necho \"agent ran: $(cat)\"\n",
    );
    sb.drop_prompt("proj", "agent", "do the thing\n");
    let second = sb.wait_done_excluding("proj", "agent", std::slice::from_ref(&first.id), secs(15));
    assert_eq!(second.state(), "succeeded", "{:#}", second.record);
    assert_eq!(second.log(), "agent ran: do the thing\n");
    assert_eq!(
        sb.run(&["history", "check", "proj", "agent"]).code(),
        1,
        "a setup failure leaves the prompt eligible"
    );
}

#[test]
fn a_program_that_is_not_executable_ends_setup_failed() {
    let sb = Sandbox::new();
    let program = sb.base.join("not-executable.sh");
    fs::write(&program, "#!/bin/sh\necho ran\n").expect("write");
    fs::set_permissions(&program, fs::Permissions::from_mode(0o644)).expect("chmod");
    sb.configure(&ConfigToml::new(&[&program.to_string_lossy()]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "noexec", "x\n");

    let job = sb.wait_done("proj", "noexec", secs(15));
    assert_setup_failed(&sb, &job);
    let why = reason(&job);
    assert!(why.contains("is not executable"), "{why}");
    assert!(why.contains("chmod +x"), "says the fix: {why}");
}

#[test]
fn a_missing_workdir_ends_setup_failed_naming_it() {
    let sb = Sandbox::new();
    let script = sb.script("main", r#"echo ran > "$OUT/main-ran""#);
    let workdir = sb.base.join("checkouts/{name}");
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .profile("workdir", &q(&workdir.to_string_lossy()))
            .profile("cooldown", "\"1h\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "repo", "x\n");

    let job = sb.wait_done("proj", "repo", secs(15));
    assert_setup_failed(&sb, &job);
    let why = reason(&job);
    let missing = sb.base.join("checkouts/repo");
    assert!(
        why.contains(&format!("workdir {} does not exist", missing.display())),
        "{why}"
    );
    assert!(why.contains("create it or fix the workdir"), "{why}");
    assert!(!sb.out().join("main-ran").exists());

    fs::create_dir_all(&missing).expect("create the workdir");
    sb.drop_prompt("proj", "repo", "x\n");
    let again = sb.wait_done_excluding("proj", "repo", std::slice::from_ref(&job.id), secs(15));
    assert_eq!(again.state(), "succeeded", "at once: {:#}", again.record);
}

#[test]
fn a_prepare_whose_interpreter_is_missing_ends_setup_failed() {
    let sb = Sandbox::new();
    let main = sb.script("main", r#"echo ran > "$OUT/main-ran""#);
    // Exists and is executable, but the kernel cannot run it: its #! names
    // an interpreter that is not there (the spawn itself fails).
    let prepare = sb.base.join("prepare-worktree");
    install_program(&prepare, "#!/nonexistent/jw-it-sh\nexit 0\n");
    let phase = format!("{{ command = {} }}", q_argv(&[&prepare.to_string_lossy()]));
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &main])
            .profile("prepare", &phase)
            .profile("cooldown", "\"1h\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "prep", "x\n");

    let job = sb.wait_done("proj", "prep", secs(15));
    assert_setup_failed(&sb, &job);
    assert_eq!(job.str_field("failure_stage"), Some("prepare"));
    let why = reason(&job);
    assert!(
        why.starts_with("prepare could not start: cannot start"),
        "{why}"
    );
    assert!(why.contains(&*prepare.to_string_lossy()), "{why}");
    assert!(why.contains("#! line"), "says where to look: {why}");
    assert!(!sb.out().join("main-ran").exists(), "nothing after it ran");
    let spawn_failed = job
        .events()
        .into_iter()
        .find(|e| e["op"] == "spawn_failed")
        .expect("spawn_failed event");
    assert_eq!(spawn_failed["setup"], true, "{spawn_failed}");
    assert_eq!(spawn_failed["stage"], "prepare", "{spawn_failed}");
}

// -- retry --now -------------------------------------------------------------------

/// Waits for a job of `proj/<name>` (not in `exclude`) that ended and put
/// its prompt back in the inbox.
fn requeued(sb: &Sandbox, name: &str, exclude: &[String]) -> Job {
    let what = format!("a job of proj/{name} to end requeued");
    sb.wait_job_where(&what, "proj", name, exclude, secs(10), |j| {
        j.is_terminal()
            && j.str_field("disposition") == Some("requeued")
            && j.ops().iter().any(|o| o == "requeued")
    })
}

#[test]
fn retry_now_runs_a_prompt_deferred_by_its_cooldown_at_once() {
    let sb = Sandbox::new();
    let script = sb.script(
        "fail",
        r#"echo "attempt $JOBWARDEN_ATTEMPT" >> "$OUT/ran"; exit 1"#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            // No rescan comes to the rescue: the request itself is seen.
            .global("rescan_interval", "\"10m\"")
            .profile("max_attempts", "3")
            .profile("cooldown", "\"1h\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "flaky", "x\n");
    let first = requeued(&sb, "flaky", &[]);
    let waiting = sb.project_dir("proj").join("flaky.prompt.md");
    let st = wait_until("the prompt deferred", secs(10), || {
        Some(json(&sb, &["status", "--json"], 0)).filter(|s| s["deferred"][0].is_object())
    });
    assert_eq!(st["deferred"][0]["prompt"], "proj/flaky", "{st:#}");
    assert!(waiting.is_file(), "it waits in the inbox");

    let out = sb.run(&["retry", &first.id, "--now"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("its cooldown is lifted"), "{out:?}");
    let second = requeued(&sb, "flaky", std::slice::from_ref(&first.id));
    assert_eq!(second.int_field("attempt"), Some(2), "{:#}", second.record);
    assert_eq!(second.str_field("retry_of"), Some(first.id.as_str()));
    assert_eq!(
        fs::read_to_string(sb.out().join("ran")).expect("ran"),
        "attempt 1\nattempt 2\n"
    );
    // Requeued again, and deferred again: the cooldown still holds for it.
    assert_never("a third run within the cooldown", millis(1500), || {
        sb.jobs_for("proj", "flaky").len() > 2
    });
}

#[test]
fn retry_now_overrides_the_cooldown_of_a_prompt_put_back_without_now() {
    let sb = Sandbox::new();
    let script = sb.script("fail", r#"echo ran >> "$OUT/ran"; exit 1"#);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .profile("max_attempts", "1")
            .profile("cooldown", "\"1h\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "later", "x\n");
    let first = sb.wait_done("proj", "later", secs(15));
    let out = sb.run(&["retry", &first.id]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_never(
        "the retry to start within its cooldown",
        millis(1500),
        || sb.jobs_for("proj", "later").len() > 1,
    );

    let out = sb.run(&["retry", &first.id, "--now"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let second = sb.wait_done_excluding("proj", "later", std::slice::from_ref(&first.id), secs(10));
    assert_eq!(second.int_field("attempt"), Some(2), "{:#}", second.record);
    assert_eq!(second.str_field("retry_of"), Some(first.id.as_str()));
    let twice = sb.run(&["retry", &first.id, "--now"]);
    assert_eq!(twice.code(), 1, "retried once already: {twice:?}");
}

// -- ack ---------------------------------------------------------------------------

#[test]
fn ack_clears_needs_attention_until_a_newer_failure() {
    let sb = Sandbox::new();
    let script = sb.script("fail", "echo broken >&2; exit 2");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).profile("cooldown", "\"0s\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "a", "x\n");
    sb.drop_prompt("proj", "b", "x\n");
    let a = sb.wait_done("proj", "a", secs(15));
    let b = sb.wait_done("proj", "b", secs(15));
    let st = wait_until("needs attention", secs(10), || {
        Some(json(&sb, &["status", "--json"], 0)).filter(|s| {
            s["needs_attention"]
                .as_array()
                .is_some_and(|l| l.len() == 2)
        })
    });
    assert_eq!(st["overall_state"], "needs_attention", "{st:#}");
    assert_eq!(st["acknowledged"], 0, "{st:#}");

    let acked = json(&sb, &["ack", "proj/a", "--json"], 0);
    assert_eq!(
        acked["acknowledged"][0]["job_id"],
        a.id.as_str(),
        "{acked:#}"
    );
    assert_eq!(acked["acknowledged"][0]["outcome"], "failure", "{acked:#}");
    let st = json(&sb, &["status", "--json"], 0);
    assert_eq!(
        st["overall_state"], "needs_attention",
        "b still does: {st:#}"
    );
    assert_eq!(st["needs_attention"][0]["job_id"], b.id.as_str(), "{st:#}");
    assert_eq!(st["needs_attention"].as_array().map(Vec::len), Some(1));
    assert_eq!(st["acknowledged"], 1, "{st:#}");

    let again = json(&sb, &["ack", &a.id, "--json"], 0);
    assert_eq!(again["already_acknowledged"][0]["job_id"], a.id.as_str());
    let all = json(&sb, &["ack", "--all", "--json"], 0);
    assert_eq!(all["acknowledged"][0]["job_id"], b.id.as_str(), "{all:#}");
    let st = json(&sb, &["status", "--json"], 0);
    assert_eq!(st["overall_state"], "all_done", "{st:#}");
    assert_eq!(st["acknowledged"], 2, "{st:#}");
    let human = sb.run(&["status"]);
    assert!(
        human
            .stdout
            .contains("2 prompts whose last run went wrong, acknowledged"),
        "{human:?}"
    );
    let none = sb.run(&["ack", "--all"]);
    assert_eq!(none.code(), 1, "nothing left: {none:?}");

    // A newer failure of the same prompt needs attention again.
    sb.drop_prompt("proj", "a", "x\n");
    let a2 = sb.wait_done_excluding("proj", "a", std::slice::from_ref(&a.id), secs(15));
    let st = wait_until("attention again", secs(10), || {
        Some(json(&sb, &["status", "--json"], 0))
            .filter(|s| s["overall_state"] == "needs_attention")
    });
    assert_eq!(st["needs_attention"][0]["job_id"], a2.id.as_str(), "{st:#}");
    assert_eq!(st["acknowledged"], 1, "only b's stays acknowledged: {st:#}");
    let old = sb.run(&["ack", &a.id]);
    assert_eq!(old.code(), 1, "not the last run: {old:?}");
    assert!(old.stderr.contains(&a2.id), "names the one to ack: {old:?}");
}

// -- rate limits -------------------------------------------------------------------

#[test]
fn a_429_is_rate_limited_with_no_rate_limit_config() {
    let sb = Sandbox::new();
    let script = sb.script("limited", "echo 'Error: 429 Too Many Requests' >&2; exit 1");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let shown = sb.run(&["config", "show"]);
    assert_eq!(shown.code(), 0, "{shown:?}");
    assert!(shown.stdout.contains("(?i)usage limit"), "{shown:?}");
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "busy", "x\n");
    let job = sb.wait_done("proj", "busy", secs(15));
    assert_eq!(job.state(), "failed", "{:#}", job.record);
    assert_eq!(job.str_field("outcome"), Some("rate_limited"));
    assert_eq!(history(&sb, &job.id)["outcome"], "rate_limited");
}
