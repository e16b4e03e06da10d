//! The promises of the tools jobwarden replaces (their requirement
//! documents), kept: the night-watch script interface with absolute
//! project paths, cooldowns as `retry --now` and the profiles leave them.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// Runs `args`, expects exit `code`, returns stdout parsed as JSON.
fn json(sb: &Sandbox, args: &[&str], code: i32) -> Value {
    let out = sb.run(args);
    assert_eq!(out.code(), code, "{args:?}: {out:?}");
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?} printed invalid JSON ({e}): {}", out.stdout))
}

fn array(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}"))
}

/// The original's own shell idiom (its cron helper and runner), with an
/// absolute project folder as scripts pass it: `check` exits 0 in
/// cooldown and 1 when eligible, `record` records; projects are apart.
#[test]
fn the_original_scripts_cooldown_idiom_works_with_absolute_project_paths() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/true"]));
    let project = sb.base.join("test-project");
    fs::create_dir_all(&project).expect("project folder");
    let bin_dir = Path::new(BIN).parent().expect("binary folder");
    // `night-watch` was the original's command; the scripts call it so.
    fs::create_dir_all(sb.base.join("bin")).expect("bin");
    std::os::unix::fs::symlink(BIN, sb.base.join("bin/night-watch")).expect("symlink");
    let script = r#"
set -u
max_runtime=7200
find_eligible_prd() {
  for prd_file in first.md second.md; do
    if night-watch history check "${PROJECT_DIR}" "${prd_file}" --cooldown "${max_runtime}" 2>/dev/null; then
      echo "SKIP-PRD: ${prd_file}"
      continue
    fi
    echo "ELIGIBLE: ${prd_file}"
    return 0
  done
  echo "NONE"
}
find_eligible_prd
night-watch history record "${PROJECT_DIR}" "first.md" failure --exit-code 1 && echo "recorded"
find_eligible_prd
night-watch history record "${PROJECT_DIR}" "second.md" timeout --exit-code 124
find_eligible_prd
night-watch history record "${PROJECT_DIR}" "first.md" success --exit-code 0
find_eligible_prd
night-watch history check "${OTHER_DIR}" "second.md" --cooldown "${max_runtime}"; echo "other: $?"
night-watch history check "${PROJECT_DIR}" "second.md"; echo "profile's cooldown: $?"
night-watch history check "relative/../x" "second.md" 2>/dev/null; echo "bad: $?"
"#;
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .env(
            "PATH",
            format!(
                "{}:{}:/usr/bin:/bin",
                sb.base.join("bin").display(),
                bin_dir.display()
            ),
        )
        .env("PROJECT_DIR", &project)
        .env("OTHER_DIR", sb.base.join("other-project"))
        .env("JOBWARDEN_HOME", &sb.root)
        .env("JOBWARDEN_CONFIG", &sb.config)
        .env_remove("RUST_LOG")
        .output()
        .expect("bash");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines,
        [
            "ELIGIBLE: first.md",
            "recorded",
            "SKIP-PRD: first.md",
            "ELIGIBLE: second.md",
            "SKIP-PRD: first.md",
            "SKIP-PRD: second.md",
            "NONE",
            "ELIGIBLE: first.md",
            "other: 1",
            // The default profile's cooldown (2 h) holds it too.
            "profile's cooldown: 0",
            "bad: 2",
        ],
        "{said}"
    );
    // Kept under the path as given, and listed so.
    let rows = json(
        &sb,
        &[
            "history",
            "list",
            "--project",
            project.to_str().expect("utf-8"),
            "--json",
        ],
        0,
    );
    assert_eq!(array(&rows).len(), 3, "{rows:#}");
    assert!(
        array(&rows)
            .iter()
            .all(|r| r["project"] == project.to_str().expect("utf-8"))
    );
}

/// After `retry --now` the prompt runs at once and is archived, and
/// nothing says it still waits for the old cooldown: not `status`, not
/// `jobs`, not `history check`.
#[test]
fn retry_now_leaves_no_trace_of_the_old_cooldown_once_the_prompt_ran() {
    let sb = Sandbox::new();
    // Fails on its first attempt, succeeds after.
    sb.configure(
        &ConfigToml::new(&["/bin/sh", "-c", "test \"$JOBWARDEN_ATTEMPT\" != 1"])
            .profile("cooldown", "\"1h\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "x", "first\n");
    let failed = sb.wait_done("proj", "x", secs(15));
    assert_eq!(failed.state(), "failed");
    // Dropped again within the cooldown: it waits.
    sb.drop_prompt("proj", "x", "again\n");
    wait_until("the new drop to be deferred", secs(10), || {
        let status = json(&sb, &["status", "--json"], 0);
        (array(&status["deferred"]).len() == 1).then_some(())
    });
    assert_eq!(sb.run(&["history", "check", "proj", "x"]).code(), 0);

    let out = sb.run(&["retry", "proj/x", "--now"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let retried = sb.wait_done_excluding("proj", "x", std::slice::from_ref(&failed.id), secs(15));
    assert_eq!(retried.state(), "succeeded", "{:#}", retried.record);
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
    let status = json(&sb, &["status", "--json"], 0);
    assert!(array(&status["deferred"]).is_empty(), "{status:#}");
    let deferred = json(&sb, &["jobs", "--state", "deferred", "--json"], 1);
    assert!(array(&deferred).is_empty(), "{deferred:#}");
    assert_eq!(
        sb.run(&["history", "check", "proj", "x"]).code(),
        1,
        "eligible after a success"
    );
}

/// `events` of one job (`jobwarden events <job> … --json`), with its exit.
fn events_json(sb: &Sandbox, id: &str, extra: &[&str], code: i32) -> Value {
    let mut args = vec!["events", id, "--json"];
    args.extend_from_slice(extra);
    json(sb, &args, code)
}

fn ops(listed: &Value) -> Vec<String> {
    array(&listed["events"])
        .iter()
        .map(|e| e["op"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// Per-job history as the original specified it: `--seq N` is exactly
/// event N, `--from-seq N` is from N on; the end says why; what took time
/// says when it began and how long it took.
#[test]
fn events_seq_is_one_entry_from_seq_the_rest_and_the_end_carries_its_reason() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/sh", "-c", "sleep 0.2; exit 3"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "fails", "x\n");
    let job = sb.wait_done("proj", "fails", secs(15));
    assert_eq!(job.state(), "failed");
    let id = job.id.as_str();

    wait_archived_event(&sb, id);
    let all = events_json(&sb, id, &[], 0);
    let total = array(&all["events"]).len() as u64;
    assert!(total >= 6, "{all:#}");
    let one = events_json(&sb, id, &["--seq", "3"], 0);
    assert_eq!(array(&one["events"]).len(), 1, "{one:#}");
    assert_eq!(one["events"][0]["seq"], 3);
    let out = sb.run(&["events", id, "--seq", "999"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(
        out.stderr.contains("no event 999") && out.stderr.contains(&format!("1 to {total}")),
        "names the range: {out:?}"
    );
    let rest = events_json(&sb, id, &["--from-seq", "3"], 0);
    let seqs: Vec<u64> = array(&rest["events"])
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(seqs, (3..=total).collect::<Vec<u64>>());

    let events = array(&all["events"]);
    let end = events
        .iter()
        .find(|e| e["op"] == "state" && e["to"] == "failed")
        .unwrap_or_else(|| panic!("no end: {all:#}"));
    assert_eq!(end["reason"], "the command exited with code 3", "{end}");
    let exited = events
        .iter()
        .find(|e| e["op"] == "exited")
        .unwrap_or_else(|| panic!("no exit: {all:#}"));
    let took = exited["duration_ms"].as_u64().expect("duration_ms");
    assert!((150..5000).contains(&took), "{exited}");
    assert!(exited["started_at"].is_string(), "{exited}");
}

/// `--inputs-only`: what was done to the job from outside, each with who
/// did it: its drop, a pause holding it and its end, an abort; for a
/// failed one, the acknowledgement and the retry.
#[test]
fn inputs_only_shows_what_was_done_to_the_job_from_outside() {
    let sb = Sandbox::new();
    let release = sb.out().join("release");
    let script = sb.script(
        "work",
        &format!(
            "case \"$1\" in bad) exit 3;; esac\nwhile [ ! -e {} ]; do sleep 0.05; done",
            release.display()
        ),
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "1"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "bad", "x\n");
    let bad = sb.wait_done("proj", "bad", secs(15));
    sb.drop_prompt("proj", "first", "x\n");
    sb.wait_state("proj", "first", "running", secs(15));
    sb.drop_prompt("other", "second", "x\n");
    let second = sb.wait_state("other", "second", "queued", secs(15));

    for args in [
        vec!["pause", "--project", "other", "--reason", "freeze"],
        vec!["resume", "--project", "other"],
        vec!["abort", second.id.as_str()],
        vec!["ack", bad.id.as_str()],
        vec!["retry", bad.id.as_str()],
    ] {
        let out = sb.run(&args);
        assert_eq!(out.code(), 0, "{args:?}: {out:?}");
    }
    sb.wait_id(&second.id, "second to be cancelled", secs(15), |j| {
        j.is_terminal()
    });
    let inputs = events_json(&sb, &second.id, &["--inputs-only"], 0);
    assert_eq!(
        ops(&inputs),
        ["claimed", "paused", "resumed", "abort_requested"],
        "{inputs:#}"
    );
    let paused = &inputs["events"][1];
    assert_eq!(paused["reason"], "freeze", "{paused}");
    assert!(
        paused["by"].as_str().is_some_and(|b| b.contains("uid")),
        "{paused}"
    );
    let inputs = events_json(&sb, &bad.id, &["--inputs-only"], 0);
    assert_eq!(
        ops(&inputs),
        ["claimed", "acknowledged", "retry_requested"],
        "{inputs:#}"
    );
    fs::write(&release, "").expect("release");
}

/// A job whose events were off answers with its journal's lines alone,
/// says why, and exits 0.
#[test]
fn a_job_without_events_answers_its_journal_with_a_note_and_exit_0() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]).global("events", "false"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "quiet", "x\n");
    let job = sb.wait_done("proj", "quiet", secs(15));
    let listed = events_json(&sb, &job.id, &[], 0);
    let shown = ops(&listed);
    assert!(
        !shown.is_empty() && shown.iter().all(|op| JOURNAL_OPS.contains(&op.as_str())),
        "{listed:#}"
    );
    assert!(
        array(&listed["events"])
            .iter()
            .all(|e| e.get("record").is_none()),
        "the journal's copy of the record is never shown: {listed:#}"
    );
    assert!(
        listed["note"].as_str().is_some_and(|n| n.contains("off")),
        "{listed:#}"
    );
    let out = sb.run(&["events", &job.id]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stderr.contains("events were off"), "{out:?}");
}

/// A sandbox whose jobs run `body` (with `sh`) in the folder `work` it
/// holds, with no cooldown, and the config `tweak` gives.
fn in_a_workdir(
    body: &str,
    tweak: impl FnOnce(ConfigToml) -> ConfigToml,
) -> (Sandbox, std::path::PathBuf) {
    let sb = Sandbox::new();
    let work = sb.base.join("work");
    fs::create_dir_all(&work).expect("workdir");
    let script = sb.script("job", body);
    let config = ConfigToml::new(&["/bin/sh", &script])
        .profile("workdir", &q(&work.to_string_lossy()))
        .profile("cooldown", "\"0s\"");
    sb.configure(&tweak(config));
    (sb, work)
}

/// "Has a failing run touched this file before?" in one command:
/// `who-touched` with `--outcome` and `--since`.
#[test]
fn who_touched_answers_which_failing_runs_touched_a_file_and_since_when() {
    let (sb, work) = in_a_workdir(
        r#"printf 'src/a.txt\n' > "$JOBWARDEN_RUN_DIR/affected"; exit "$(cat)""#,
        |c| c,
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "breaks", "3");
    let failed = sb.wait_done("proj", "breaks", secs(15));
    sb.drop_prompt("proj", "mends", "0");
    let fine = sb.wait_done("proj", "mends", secs(15));
    let file = work.join("src/a.txt");
    let file = file.to_str().expect("utf-8");
    let ids = |listed: &Value| -> Vec<String> {
        array(listed)
            .iter()
            .filter_map(|e| e["id"].as_str().map(str::to_owned))
            .collect()
    };
    let all = wait_until("both rows", secs(10), || {
        let out = sb.run(&["history", "who-touched", file, "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).ok()?;
        (array(&v).len() == 2).then_some(v)
    });
    assert_eq!(ids(&all), [fine.id.clone(), failed.id.clone()]);
    let failing = json(
        &sb,
        &[
            "history",
            "who-touched",
            file,
            "--outcome",
            "failure",
            "--json",
        ],
        0,
    );
    assert_eq!(ids(&failing), std::slice::from_ref(&failed.id));
    let recent = json(
        &sb,
        &[
            "history",
            "who-touched",
            file,
            "--outcome",
            "failure",
            "--since",
            "1h",
            "--json",
        ],
        0,
    );
    assert_eq!(ids(&recent), std::slice::from_ref(&failed.id));
    let future = sb.run(&["history", "who-touched", file, "--since", "2099-01-01"]);
    assert_eq!(future.code(), 1, "none since then: {future:?}");
    let bad = sb.run(&["history", "who-touched", file, "--outcome", "oops"]);
    assert_eq!(bad.code(), 2, "{bad:?}");
    assert!(bad.stderr.contains("--outcome"), "{bad:?}");
}

/// `status` on a root that does not exist is an error naming it, not "not
/// running, storage ok"; a stale heartbeat shows its real age, never "just
/// now".
#[test]
fn status_refuses_a_missing_root_and_shows_a_stale_heartbeat_s_age() {
    let sb = Sandbox::new();
    let missing = sb.base.join("no-such-root");
    let out = std::process::Command::new(BIN)
        .arg("--root")
        .arg(&missing)
        .arg("status")
        .env_remove("JOBWARDEN_HOME")
        .env_remove("JOBWARDEN_CONFIG")
        .env("XDG_CONFIG_HOME", sb.base.join("xdg-config"))
        .output()
        .expect("status");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(
        stderr.contains("no jobwarden root at") && stderr.contains("no-such-root"),
        "{stderr}"
    );

    let script = sb.script("slow", "sleep 600");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "frozen", "x\n");
    let job = sb.wait_state("proj", "frozen", "running", secs(15));
    let monitor = job.int_field("monitor_pid").expect("monitor pid") as i32;
    let pid = nix::unistd::Pid::from_raw(monitor);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("stop the monitor");
    let line = wait_until("the heartbeat to go stale", secs(15), || {
        let out = sb.run(&["status"]);
        out.stdout
            .lines()
            .find(|l| l.contains("STALE") && l.contains(&job.id[job.id.len() - 8..]))
            .map(str::to_owned)
    });
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
    assert!(!line.contains("just now"), "{line}");
    assert!(line.contains("s ago"), "{line}");
    sb.run(&["abort", &job.id]);
}

/// "Everything is done", with a summary: once the queue drains, `status`
/// sums up the last batch (counts by state, first claim to last end, the
/// longest job, what needs attention), in `--json` as
/// `completion_summary`; none while work runs.
#[test]
fn a_drained_queue_gets_a_completion_summary_of_its_batch() {
    let sb = Sandbox::new();
    let release = sb.out().join("release");
    let script = sb.script(
        "work",
        &format!(
            "case \"$1\" in bad) exit 3;; slow) while [ ! -e {} ]; do sleep 0.05; done;; esac",
            release.display()
        ),
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("batch", "slow", "x\n");
    sb.wait_state("batch", "slow", "running", secs(15));
    let busy = json(&sb, &["status", "--json"], 0);
    assert!(busy["completion_summary"].is_null(), "{busy:#}");
    sb.drop_prompt("batch", "bad", "x\n");
    sb.drop_prompt("batch", "fine", "x\n");
    let bad = sb.wait_done("batch", "bad", secs(15));
    sb.wait_done("batch", "fine", secs(15));
    fs::write(&release, "").expect("release");
    let slow = sb.wait_done("batch", "slow", secs(15));

    let status = wait_until("the drained status", secs(10), || {
        let v = json(&sb, &["status", "--json"], 0);
        (!v["completion_summary"].is_null()).then_some(v)
    });
    let summary = &status["completion_summary"];
    assert_eq!(summary["jobs"], 3, "{summary:#}");
    assert_eq!(summary["by_state"]["succeeded"], 2, "{summary:#}");
    assert_eq!(summary["by_state"]["failed"], 1, "{summary:#}");
    assert_eq!(summary["longest"]["id"], slow.id.as_str(), "{summary:#}");
    assert_eq!(
        summary["needs_attention"],
        serde_json::json!([bad.id]),
        "{summary:#}"
    );
    let elapsed = summary["elapsed_ms"].as_u64().expect("elapsed_ms");
    assert!(
        elapsed
            >= summary["longest"]["duration_ms"]
                .as_u64()
                .unwrap_or(u64::MAX)
    );
    let human = sb.run(&["status"]);
    let line = human
        .stdout
        .lines()
        .find(|l| l.starts_with("batch"))
        .unwrap_or_else(|| panic!("{}", human.stdout));
    assert!(line.contains("3 jobs in"), "{}", human.stdout);
    assert!(
        human.stdout.contains("longest batch/slow"),
        "{}",
        human.stdout
    );
}

/// Execution memory that answers the originals' questions: the compiler
/// and linter diagnostics in a job's output are kept per execution, and
/// `history diagnostics` says which runs produced a code, which later run
/// of the same prompt got rid of it, and which files carry the most.
#[test]
fn diagnostics_in_a_job_s_output_are_kept_and_answer_which_run_fixed_them() {
    let (sb, work) = in_a_workdir(
        r#"if [ "$JOBWARDEN_ATTEMPT" = 1 ]; then
  echo 'error[E0425]: cannot find value `x` in this scope' >&2
  echo ' --> src/main.rs:2:13' >&2
  echo '{"reason":"compiler-message","message":{"message":"mismatched types","code":{"code":"E0308"},"level":"error","spans":[{"file_name":"src/main.rs","line_start":4,"column_start":1,"is_primary":true}]}}'
  echo 'lib/util.c:9:3: warning: unused variable [-Wunused-variable]'
  exit 101
fi
echo fixed"#,
        |c| c.profile("max_attempts", "2"),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "build", "make it compile\n");
    let mut both = wait_until("both attempts to end", secs(15), || {
        let jobs = sb.jobs_for("proj", "build");
        (jobs.len() == 2 && jobs.iter().all(|j| j.is_terminal())).then_some(jobs)
    });
    both.sort_by_key(|j| j.int_field("attempt"));
    let (first, second) = (&both[0], &both[1]);
    assert_eq!(first.state(), "failed");
    assert_eq!(second.state(), "succeeded");
    wait_until("both rows", secs(10), || {
        let out = sb.run(&["history", "list", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout).ok()?;
        (array(&v).len() == 2).then_some(())
    });

    let of_first = json(
        &sb,
        &["history", "diagnostics", "--job", &first.id, "--json"],
        0,
    );
    let by_code = |code: &str| {
        array(&of_first)
            .iter()
            .find(|d| d["code"] == code)
            .cloned()
            .unwrap_or_else(|| panic!("no {code}: {of_first:#}"))
    };
    assert_eq!(array(&of_first).len(), 3, "{of_first:#}");
    let main_rs = work.join("src/main.rs");
    let e0425 = by_code("E0425");
    assert_eq!(e0425["path"], main_rs.to_str().expect("utf-8"), "{e0425}");
    assert_eq!(e0425["line"], 2);
    assert_eq!(by_code("E0308")["line"], 4);
    assert_eq!(by_code("-Wunused-variable")["severity"], "warning");
    let none = sb.run(&["history", "diagnostics", "--job", &second.id, "--json"]);
    assert_eq!(none.code(), 1, "{none:?}");

    let hits = json(
        &sb,
        &["history", "diagnostics", "--code", "E0425", "--json"],
        0,
    );
    assert_eq!(array(&hits).len(), 1, "{hits:#}");
    assert_eq!(hits[0]["id"], first.id.as_str());
    assert_eq!(hits[0]["count"], 1);
    assert_eq!(hits[0]["resolved_by"]["id"], second.id.as_str(), "{hits:#}");
    let files = json(&sb, &["history", "diagnostics", "--files", "--json"], 0);
    assert_eq!(
        files[0]["path"],
        main_rs.to_str().expect("utf-8"),
        "{files:#}"
    );
    assert_eq!(files[0]["diagnostics"], 2);
    assert_eq!(files[0]["errors"], 2);
    let overview = sb.run(&["history", "diagnostics"]);
    assert_eq!(overview.code(), 0, "{overview:?}");
    assert!(overview.stdout.contains("E0425"), "{}", overview.stdout);
    let human = sb.run(&["history", "diagnostics", "--code", "E0425"]);
    assert!(human.stdout.contains("gone in"), "{}", human.stdout);
    assert_eq!(
        sb.run(&["history", "diagnostics", "--code", "E9999"])
            .code(),
        1
    );
}

/// A step of the wall clock the daemon notices is said in its log, kept
/// in the ledger and shown by `status`.
#[test]
fn a_step_of_the_wall_clock_is_logged_kept_and_shown() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let offset = sb.out().join("clock-offset");
    fs::write(&offset, "0").expect("offset");
    let offset_env = offset.to_string_lossy().into_owned();
    let d = Daemon::start_with_env(&sb, &[("JOBWARDEN_TEST_CLOCK_OFFSET", offset_env.as_str())]);
    // Something ran, so that there is a ledger to keep the step in.
    sb.drop_prompt("proj", "x", "x\n");
    sb.wait_done("proj", "x", secs(15));
    fs::write(&offset, "-3600000").expect("step back an hour");
    let status = wait_until("the step to be noticed", secs(15), || {
        let v = json(&sb, &["status", "--json"], 0);
        (!v["last_clock_step"].is_null()).then_some(v)
    });
    let step = status["last_clock_step"]["step_ms"]
        .as_i64()
        .expect("step_ms");
    assert!((-3_610_000..=-3_590_000).contains(&step), "{status:#}");
    // Said to the second, whatever the tick's jitter.
    wait_until("the step in the daemon's log", secs(10), || {
        d.stderr()
            .contains("the wall clock stepped back by 1h step_ms=")
            .then_some(())
    });
    let human = sb.run(&["status"]);
    assert!(
        human
            .stdout
            .lines()
            .any(|l| l.starts_with("clock") && l.contains("stepped back")),
        "{}",
        human.stdout
    );
}
