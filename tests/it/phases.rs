//! The profile's `prepare` and `publish` phases around the main command:
//! the states they pass through, their delimited output in `job.log`,
//! `result_ref`, their failures, timeouts and aborts, and a daemon restart
//! in the middle of each.

use std::fs;
use std::time::{SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::support::*;

/// A phase's TOML value: `/bin/sh <script>` with `timeout`.
fn phase(script: &str, timeout: &str) -> String {
    format!(
        "{{ command = {}, timeout = {} }}",
        q_argv(&["/bin/sh", script]),
        q(timeout)
    )
}

/// A config whose main command is `/bin/sh <main>`.
fn config(main: &str) -> ConfigToml {
    ConfigToml::new(&["/bin/sh", main])
}

/// The `(from, to)` of every `state` event of `job`, in order.
fn transitions(job: &Job) -> Vec<(String, String)> {
    job.events()
        .iter()
        .filter(|e| e["op"] == "state")
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (s("from"), s("to"))
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The first event of `job` whose op is `op`.
fn event(job: &Job, op: &str) -> Value {
    job.events()
        .into_iter()
        .find(|e| e["op"] == op)
        .unwrap_or_else(|| panic!("no {op} event: {:?}", job.ops()))
}

/// Asserts that `needles` occur in `text` in this order.
fn assert_in_order(text: &str, needles: &[&str]) {
    let mut from = 0;
    for needle in needles {
        match text[from..].find(needle) {
            Some(i) => from += i + needle.len(),
            None => panic!("{needle:?} missing, or out of order, in:\n{text}"),
        }
    }
}

/// `history show <id> --json`.
fn history(sb: &Sandbox, id: &str) -> Value {
    let out = sb.run(&["history", "show", id, "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    serde_json::from_str(&out.stdout).expect("history show --json parses")
}

/// The text of artifact `kind` in a `history show --json` object.
fn artifact(shown: &Value, kind: &str) -> Option<String> {
    shown["artifacts"]
        .as_array()?
        .iter()
        .find(|a| a["kind"] == kind)
        .and_then(|a| a["content"]["text"].as_str())
        .map(str::to_string)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// Waits until the job of `proj/name` is in `state` and `pid_file`
/// (written by the stage's script) names its recorded `pgid`.
fn wait_stage(sb: &Sandbox, name: &str, state: &str, pid_file: &str) -> (Job, i32) {
    let job = sb.wait_state("proj", name, state, secs(15));
    let pid = wait_pid_file(&sb.out().join(pid_file), secs(5));
    let job = sb.wait_id(&job.id, "the stage's pgid in the record", secs(5), |j| {
        j.int_field("pgid") == Some(pid as i64)
    });
    (job, pid)
}

#[test]
fn phases_run_around_the_main_command_with_delimited_output_and_a_result_ref() {
    let sb = Sandbox::new();
    let prepare = sb.script(
        "prepare",
        r#"echo "prepare says hi ($JOBWARDEN_PHASE)"; echo prepared >> "$OUT/order""#,
    );
    let main = sb.script(
        "main",
        r#"echo "main says hi ($JOBWARDEN_PHASE)"; echo "main complains" >&2; echo main >> "$OUT/order""#,
    );
    let publish = sb.script(
        "publish",
        r#"echo "publish says hi ($JOBWARDEN_PHASE)"
echo published >> "$OUT/order"
echo "   https://example.org/pr/42   "
echo
echo "  ""#,
    );
    sb.configure(
        &config(&main)
            .profile("prepare", &phase(&prepare, "5s"))
            .profile("publish", &phase(&publish, "5s")),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "full", "all three stages\n");

    let job = sb.wait_done("proj", "full", secs(20));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(job.record["exit_code"], 0, "{:#}", job.record);
    assert!(job.record["failure_stage"].is_null(), "{:#}", job.record);
    assert_eq!(
        job.str_field("result_ref"),
        Some("https://example.org/pr/42"),
        "publish's last non-empty stdout line, trimmed: {:#}",
        job.record
    );
    assert_eq!(
        fs::read_to_string(sb.out().join("order")).expect("order"),
        "prepared\nmain\npublished\n"
    );
    assert_eq!(
        job.record["command"],
        serde_json::json!(["/bin/sh", main]),
        "command is the main command's argv"
    );

    assert_eq!(
        transitions(&job),
        pairs(&[
            ("queued", "preparing"),
            ("preparing", "running"),
            ("running", "publishing"),
            ("publishing", "succeeded"),
        ])
    );
    let ops = check_events(&job);
    for op in [
        "prepare_started",
        "started",
        "exited",
        "publish_started",
        "published",
    ] {
        assert!(ops.iter().any(|o| o == op), "{op} in {ops:?}");
    }
    let exits: Vec<Value> = job
        .events()
        .into_iter()
        .filter(|e| e["op"] == "phase_exited")
        .collect();
    assert_eq!(exits.len(), 2, "{exits:?}");
    assert_eq!(
        (&exits[0]["phase"], &exits[0]["code"]),
        (&"prepare".into(), &0.into())
    );
    assert_eq!(
        (&exits[1]["phase"], &exits[1]["code"]),
        (&"publish".into(), &0.into())
    );
    assert_eq!(
        event(&job, "published")["result_ref"],
        "https://example.org/pr/42"
    );

    let log = job.log();
    assert_in_order(
        &log,
        &[
            &format!("[jobwarden: prepare: /bin/sh {prepare}]\n"),
            "prepare says hi (prepare)\n",
            "[jobwarden: prepare exited 0 after ",
            &format!("[jobwarden: run: /bin/sh {main}]\n"),
            "main says hi (run)\n",
            "[jobwarden: run exited 0 after ",
            &format!("[jobwarden: publish: /bin/sh {publish}]\n"),
            "publish says hi (publish)\n",
            "https://example.org/pr/42",
            "[jobwarden: publish exited 0 after ",
        ],
    );
    assert!(log.contains("main complains"), "{log}");

    let shown = history(&sb, &job.id);
    assert_eq!(shown["outcome"], "success", "{shown:#}");
    assert_eq!(
        shown["result_ref"], "https://example.org/pr/42",
        "{shown:#}"
    );
    assert_eq!(shown["exit_code"], 0, "{shown:#}");
    let stdout = artifact(&shown, "stdout_tail").expect("stdout_tail");
    assert!(
        stdout.contains("main says hi") && !stdout.contains("publish says hi"),
        "stdout_tail is the main command's: {stdout:?}"
    );
    let stderr = artifact(&shown, "stderr_tail").expect("stderr_tail");
    assert_eq!(stderr, "main complains\n");
    let published = artifact(&shown, "publish_stdout_tail").expect("publish_stdout_tail");
    assert!(published.contains("example.org/pr/42"), "{published:?}");
    let prepared = artifact(&shown, "prepare_stdout_tail").expect("prepare_stdout_tail");
    assert!(prepared.contains("prepare says hi"), "{prepared:?}");
}

#[test]
fn failing_prepare_fails_the_job_and_never_runs_the_main_command() {
    let sb = Sandbox::new();
    let prepare = sb.script("prepare", r#"echo "no worktree for you" >&2; exit 2"#);
    let main = sb.script("main", r#"echo ran > "$OUT/main-ran""#);
    sb.configure(&config(&main).profile("prepare", &phase(&prepare, "5s")));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "noprep", "prepare fails\n");

    let job = sb.wait_done("proj", "noprep", secs(15));
    assert_eq!(job.state(), "failed", "{:#}", job.record);
    assert_eq!(job.str_field("failure_stage"), Some("prepare"));
    assert_eq!(
        job.str_field("state_reason"),
        Some("prepare exited with code 2"),
        "{:#}",
        job.record
    );
    assert!(
        job.record["exit_code"].is_null(),
        "the main command never ran: {:#}",
        job.record
    );
    assert!(
        !sb.out().join("main-ran").exists(),
        "the main command never ran"
    );
    assert_eq!(
        transitions(&job),
        pairs(&[("queued", "preparing"), ("preparing", "failed")])
    );
    let ops = check_events(&job);
    assert!(!ops.iter().any(|o| o == "started"), "{ops:?}");
    assert_eq!(event(&job, "phase_exited")["code"], 2);
    let log = job.log();
    assert_in_order(
        &log,
        &[
            "no worktree for you\n",
            "[jobwarden: prepare exited 2 after ",
        ],
    );
    assert!(!log.contains("[jobwarden: run"), "{log}");

    let shown = history(&sb, &job.id);
    assert_eq!(shown["outcome"], "failure", "{shown:#}");
    assert_eq!(shown["failure_stage"], "prepare", "{shown:#}");
    let stderr = artifact(&shown, "prepare_stderr_tail").expect("prepare_stderr_tail");
    assert_eq!(stderr, "no worktree for you\n");
}

#[test]
fn prepare_that_cannot_start_ends_the_job_setup_failed_naming_prepare() {
    let sb = Sandbox::new();
    let program = "jw-it-no-such-prepare-5e1d";
    let main = sb.script("main", r#"echo ran > "$OUT/main-ran""#);
    let prepare = format!("{{ command = {} }}", q_argv(&[program]));
    sb.configure(&config(&main).profile("prepare", &prepare));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "ghostprep", "prepare is missing\n");

    let job = sb.wait_done("proj", "ghostprep", secs(15));
    assert_eq!(job.state(), "setup_failed", "{:#}", job.record);
    assert_eq!(job.str_field("failure_stage"), Some("prepare"));
    let reason = job.str_field("state_reason").unwrap_or_default();
    assert!(
        reason.starts_with("prepare could not start") && reason.contains(program),
        "{reason:?}"
    );
    assert!(!sb.out().join("main-ran").exists());
    assert!(job.record["pid"].is_null(), "{:#}", job.record);
}

#[test]
fn prepare_creates_the_workdir_the_main_command_runs_in() {
    let sb = Sandbox::new();
    let prepare = sb.script(
        "prepare",
        r#"echo "prepare in $(pwd)"; mkdir -p "$JOBWARDEN_WORKDIR""#,
    );
    let main = sb.script("main", r#"echo "main in $(pwd)""#);
    sb.configure(
        &config(&main)
            .profile("workdir", &q("{root}/wt/{job_id}"))
            .profile("prepare", &phase(&prepare, "5s")),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "tree", "needs a fresh worktree\n");

    let job = sb.wait_done("proj", "tree", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let workdir = sb.root.join("wt").join(&job.id);
    assert!(workdir.is_dir(), "prepare made {}", workdir.display());
    assert_eq!(
        job.str_field("workdir"),
        Some(workdir.to_string_lossy().as_ref())
    );
    assert_in_order(
        &job.log(),
        &[
            &format!("prepare in {}\n", job.dir.display()),
            &format!("main in {}\n", workdir.display()),
        ],
    );
}

#[test]
fn failing_publish_fails_the_job_and_keeps_the_main_exit_code() {
    let sb = Sandbox::new();
    let main = sb.script("main", r#"echo "main did its work""#);
    let publish = sb.script(
        "publish",
        r#"echo 1234abcd
echo "push rejected" >&2
exit 3"#,
    );
    sb.configure(&config(&main).profile("publish", &phase(&publish, "5s")));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "nopub", "publish fails\n");

    let job = sb.wait_done("proj", "nopub", secs(15));
    assert_eq!(job.state(), "failed", "{:#}", job.record);
    assert_eq!(job.str_field("failure_stage"), Some("publish"));
    assert_eq!(
        job.record["exit_code"], 0,
        "the main command's: {:#}",
        job.record
    );
    assert!(job.record["signal"].is_null(), "{:#}", job.record);
    assert_eq!(
        job.str_field("state_reason"),
        Some("publish exited with code 3")
    );
    assert!(
        job.record["result_ref"].is_null(),
        "a failed publish produced nothing: {:#}",
        job.record
    );
    assert_eq!(
        transitions(&job),
        pairs(&[
            ("queued", "running"),
            ("running", "publishing"),
            ("publishing", "failed"),
        ])
    );
    assert_eq!(event(&job, "exited")["code"], 0);
    assert_eq!(event(&job, "phase_exited")["code"], 3);
    assert_in_order(
        &job.log(),
        &[
            "[jobwarden: run: ",
            "main did its work\n",
            "[jobwarden: run exited 0 after ",
            "[jobwarden: publish: ",
            "push rejected\n",
            "[jobwarden: publish exited 3 after ",
        ],
    );

    let shown = history(&sb, &job.id);
    assert_eq!(shown["outcome"], "failure", "{shown:#}");
    assert_eq!(shown["failure_stage"], "publish", "{shown:#}");
    assert_eq!(shown["exit_code"], 0, "{shown:#}");
    assert!(shown["result_ref"].is_null(), "{shown:#}");
}

#[test]
fn publish_runs_only_after_the_main_command_succeeded() {
    let sb = Sandbox::new();
    let main = sb.script("main", "exit 4");
    let publish = sb.script("publish", r#"echo ran > "$OUT/publish-ran""#);
    sb.configure(&config(&main).profile("publish", &phase(&publish, "5s")));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "mainfails", "main fails\n");

    let job = sb.wait_done("proj", "mainfails", secs(15));
    assert_eq!(job.state(), "failed", "{:#}", job.record);
    assert_eq!(job.str_field("failure_stage"), Some("run"));
    assert_eq!(job.record["exit_code"], 4);
    assert!(!sb.out().join("publish-ran").exists(), "publish never ran");
    assert!(!job.ops().iter().any(|o| o == "publish_started"));
}

#[test]
fn prepare_timeout_times_the_job_out_in_prepare() {
    let sb = Sandbox::new();
    let prepare = sb.script(
        "prepare",
        r#"echo $$ > "$OUT/prepare.pid"; exec sleep 1000"#,
    );
    let main = sb.script("main", r#"echo ran > "$OUT/main-ran""#);
    sb.configure(
        &config(&main)
            .unsandboxed()
            .profile("timeout", &q("1h"))
            .profile("prepare", &phase(&prepare, "1s")),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "slowprep", "prepare takes forever\n");

    let (preparing, pgid) = wait_stage(&sb, "slowprep", "preparing", "prepare.pid");
    let deadline = preparing.time_ms("timeout_at") - preparing.time_ms("started_at");
    assert!(
        (500..5000).contains(&deadline),
        "timeout_at is prepare's deadline (1s), not the main command's (1h): {deadline} ms"
    );

    let job = sb.wait_done("proj", "slowprep", secs(15));
    assert_eq!(job.state(), "timed_out", "{:#}", job.record);
    assert_eq!(job.str_field("failure_stage"), Some("prepare"));
    assert_eq!(
        job.str_field("state_reason"),
        Some("prepare timed out after 1s")
    );
    assert!(
        !sb.out().join("main-ran").exists(),
        "the main command never ran"
    );
    assert!(job.record["exit_code"].is_null(), "{:#}", job.record);
    assert_eq!(event(&job, "timeout")["while"], "preparing");
    wait_until("the prepare group to be gone", secs(3), || {
        group_members(pgid).is_empty().then_some(())
    });
}

#[test]
fn publish_timeout_times_the_job_out_in_publish() {
    let sb = Sandbox::new();
    let main = sb.script("main", "echo done");
    let publish = sb.script(
        "publish",
        r#"echo $$ > "$OUT/publish.pid"; exec sleep 1000"#,
    );
    sb.configure(
        &config(&main)
            .unsandboxed()
            .profile("timeout", &q("1h"))
            .profile("publish", &phase(&publish, "1s")),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "slowpub", "publish takes forever\n");

    let (publishing, pgid) = wait_stage(&sb, "slowpub", "publishing", "publish.pid");
    let left = publishing.time_ms("timeout_at") - now_ms();
    assert!(
        left < 5000,
        "timeout_at is publish's deadline (1s), not the main command's (1h): {left} ms left"
    );

    let job = sb.wait_done("proj", "slowpub", secs(15));
    assert_eq!(job.state(), "timed_out", "{:#}", job.record);
    assert_eq!(job.str_field("failure_stage"), Some("publish"));
    assert_eq!(
        job.str_field("state_reason"),
        Some("publish timed out after 1s")
    );
    assert_eq!(
        job.record["exit_code"], 0,
        "the main command's: {:#}",
        job.record
    );
    assert_eq!(event(&job, "timeout")["while"], "publishing");
    wait_until("the publish group to be gone", secs(3), || {
        group_members(pgid).is_empty().then_some(())
    });
}

/// A stage script that records its pid and a child's, then waits.
const BLOCKING_STAGE: &str = r#"echo $$ > "$OUT/$1.pid"
sleep 1000 &
echo $! > "$OUT/$1-child.pid"
echo "$1 waiting"
wait"#;

/// Writes `job`'s ABORT marker whole (renamed into place), so that the
/// monitor never reads it half-written.
fn write_abort(job: &Job, reason: &str) {
    let tmp = job.dir.join("ABORT.tmp");
    fs::write(&tmp, reason).expect("write ABORT.tmp");
    fs::rename(&tmp, job.dir.join("ABORT")).expect("rename ABORT into place");
}

/// `/bin/sh <script> <name>` as a phase.
fn named_phase(script: &str, name: &str) -> String {
    format!(
        "{{ command = {}, timeout = \"1h\" }}",
        q_argv(&["/bin/sh", script, name])
    )
}

#[test]
fn abort_during_prepare_ends_the_job_aborted_and_kills_the_prepare_group() {
    let sb = Sandbox::new();
    let blocking = sb.script("blocking", BLOCKING_STAGE);
    let main = sb.script("main", r#"echo ran > "$OUT/main-ran""#);
    sb.configure(
        &config(&main)
            .unsandboxed()
            .profile("prepare", &named_phase(&blocking, "prepare")),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "stopprep", "aborted while preparing\n");

    let (job, pgid) = wait_stage(&sb, "stopprep", "preparing", "prepare.pid");
    let child = wait_pid_file(&sb.out().join("prepare-child.pid"), secs(5));
    // The stage's own line is in the log before the abort, so that the
    // order of the log is the stage's, not the pump's.
    wait_until("the prepare line in the log", secs(5), || {
        sb.job(&job.id)
            .filter(|j| j.log().contains("prepare waiting\n"))
    });
    assert!(group_members(pgid).contains(&child));
    write_abort(&job, "stop preparing\n");

    let done = sb.wait_done("proj", "stopprep", secs(15));
    assert_eq!(done.state(), "aborted", "{:#}", done.record);
    assert_eq!(
        done.str_field("state_reason"),
        Some("aborted by request: stop preparing")
    );
    assert!(done.record["exit_code"].is_null(), "{:#}", done.record);
    assert!(
        !sb.out().join("main-ran").exists(),
        "the main command never ran"
    );
    assert_eq!(event(&done, "abort_requested")["while"], "preparing");
    assert_eq!(event(&done, "phase_exited")["phase"], "prepare");
    assert_eq!(
        transitions(&done),
        pairs(&[("queued", "preparing"), ("preparing", "aborted")])
    );
    assert_in_order(
        &done.log(),
        &[
            "prepare waiting\n",
            "[jobwarden: sent SIGTERM",
            "[jobwarden: prepare killed by SIGTERM after ",
            "(aborted)]",
        ],
    );
    wait_until("the prepare group to be gone", secs(3), || {
        group_members(pgid).is_empty().then_some(())
    });
    assert!(!pid_alive(child));
}

#[test]
fn abort_as_prepare_ends_never_starts_the_main_command() {
    let sb = Sandbox::new();
    // Whether the monitor sees the marker before or after prepare's exit,
    // the next stage must not start. (A job cannot write its own run
    // folder: the marker comes from outside, and prepare exits as soon as
    // it is there.)
    let prepare = sb.script(
        "prepare",
        r#"touch "$OUT/preparing"
while [ ! -e "$JOBWARDEN_RUN_DIR/ABORT" ]; do sleep 0.01; done
exit 0"#,
    );
    let main = sb.script("main", r#"echo ran > "$OUT/main-ran""#);
    sb.configure(&config(&main).profile("prepare", &phase(&prepare, "5s")));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "between", "aborted between stages\n");
    wait_until("prepare to run", secs(15), || {
        sb.out().join("preparing").exists().then_some(())
    });
    let job = sb.jobs_for("proj", "between").pop().expect("the job");
    let tmp = job.dir.join("ABORT.tmp");
    fs::write(&tmp, "between stages\n").expect("write the marker");
    fs::rename(&tmp, job.dir.join("ABORT")).expect("rename the marker in");

    let done = sb.wait_done("proj", "between", secs(15));
    assert_eq!(done.state(), "aborted", "{:#}", done.record);
    assert_eq!(
        done.str_field("state_reason"),
        Some("aborted by request: between stages")
    );
    assert!(
        !sb.out().join("main-ran").exists(),
        "the main command never ran"
    );
    assert!(
        !done.ops().iter().any(|o| o == "started"),
        "{:?}",
        done.ops()
    );
    assert_eq!(event(&done, "abort_requested")["while"], "preparing");
    assert_eq!(
        transitions(&done),
        pairs(&[("queued", "preparing"), ("preparing", "aborted")])
    );
}

#[test]
fn abort_during_publish_ends_the_job_aborted_and_kills_the_publish_group() {
    let sb = Sandbox::new();
    let blocking = sb.script("blocking", BLOCKING_STAGE);
    let main = sb.script("main", "echo main done");
    sb.configure(
        &config(&main)
            .unsandboxed()
            .profile("publish", &named_phase(&blocking, "publish")),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "stoppub", "aborted while publishing\n");

    let (job, pgid) = wait_stage(&sb, "stoppub", "publishing", "publish.pid");
    let child = wait_pid_file(&sb.out().join("publish-child.pid"), secs(5));
    // The stage's own line is in the log before the abort, so that the
    // order of the log is the stage's, not the pump's.
    wait_until("the publish line in the log", secs(5), || {
        sb.job(&job.id)
            .filter(|j| j.log().contains("publish waiting\n"))
    });
    assert!(group_members(pgid).contains(&child));
    write_abort(&job, "stop publishing\n");

    let done = sb.wait_done("proj", "stoppub", secs(15));
    assert_eq!(done.state(), "aborted", "{:#}", done.record);
    assert_eq!(
        done.record["exit_code"], 0,
        "the main command's: {:#}",
        done.record
    );
    assert!(done.record["result_ref"].is_null(), "{:#}", done.record);
    assert_eq!(event(&done, "abort_requested")["while"], "publishing");
    assert_eq!(event(&done, "phase_exited")["phase"], "publish");
    assert_eq!(
        transitions(&done).last(),
        Some(&("publishing".to_string(), "aborted".to_string()))
    );
    assert_in_order(
        &done.log(),
        &[
            "main done\n",
            "publish waiting\n",
            "[jobwarden: publish killed by SIGTERM after ",
        ],
    );
    wait_until("the publish group to be gone", secs(3), || {
        group_members(pgid).is_empty().then_some(())
    });
    assert!(!pid_alive(child));
}

/// A stage that appends its name to `$OUT/ran`, then waits for
/// `$OUT/release-<name>`.
const GATED_STAGE: &str = r#"echo "$1" >> "$OUT/ran"
while [ ! -e "$OUT/release-$1" ]; do sleep 0.05; done
echo "$1 released""#;

/// SIGKILLs the daemon and starts another; waits until it adopted `id`
/// (its `adopted` event count reaches `adoptions`).
fn restart_daemon(sb: &Sandbox, daemon: &mut Daemon, id: &str, adoptions: usize) -> Daemon {
    kill(Pid::from_raw(daemon.pid), Signal::SIGKILL).expect("kill -9 the daemon");
    daemon.wait_exit(secs(5));
    let next = Daemon::start(sb);
    sb.wait_id(id, "the restarted daemon to adopt the job", secs(10), |j| {
        j.ops().iter().filter(|o| *o == "adopted").count() == adoptions
    });
    next
}

#[test]
fn restarted_daemon_adopts_a_job_in_prepare_and_in_publish_and_it_completes() {
    let sb = Sandbox::new();
    let gated = sb.script("gated", GATED_STAGE);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &gated, "run"])
            .profile("prepare", &named_phase(&gated, "prepare"))
            .profile("publish", &named_phase(&gated, "publish")),
    );
    let mut daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "survivor", "outlives two daemons\n");

    let job = sb.wait_state("proj", "survivor", "preparing", secs(15));
    let mut daemon = restart_daemon(&sb, &mut daemon, &job.id, 1);
    assert_eq!(sb.job(&job.id).expect("job").state(), "preparing");
    for stage in ["prepare", "run"] {
        fs::write(sb.out().join(format!("release-{stage}")), "").expect("release");
    }

    sb.wait_state("proj", "survivor", "publishing", secs(15));
    let _last = restart_daemon(&sb, &mut daemon, &job.id, 2);
    assert_eq!(sb.job(&job.id).expect("job").state(), "publishing");
    fs::write(sb.out().join("release-publish"), "").expect("release");

    let done = sb.wait_done("proj", "survivor", secs(15));
    assert_eq!(done.id, job.id);
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(done.str_field("result_ref"), Some("publish released"));
    assert_eq!(
        fs::read_to_string(sb.out().join("ran")).expect("ran"),
        "prepare\nrun\npublish\n",
        "each stage ran exactly once"
    );
    check_events(&done);
    assert_eq!(sb.jobs().len(), 1, "no other attempt was started");
}

#[test]
fn killed_monitor_during_publish_interrupts_the_job_and_kills_the_publish_group() {
    let sb = Sandbox::new();
    let blocking = sb.script("blocking", BLOCKING_STAGE);
    let main = sb.script("main", "echo main done");
    sb.configure(
        &config(&main)
            .unsandboxed()
            .global("max_interrupts", "1")
            .profile("publish", &named_phase(&blocking, "publish")),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "lostpub", "loses its monitor while publishing\n");

    let (job, pgid) = wait_stage(&sb, "lostpub", "publishing", "publish.pid");
    let child = wait_pid_file(&sb.out().join("publish-child.pid"), secs(5));
    // The stage's own line is in the log before the abort, so that the
    // order of the log is the stage's, not the pump's.
    wait_until("the publish line in the log", secs(5), || {
        sb.job(&job.id)
            .filter(|j| j.log().contains("publish waiting\n"))
    });
    let monitor = job.int_field("monitor_pid").expect("monitor_pid") as i32;
    kill(Pid::from_raw(monitor), Signal::SIGKILL).expect("SIGKILL the monitor");

    let done = sb.wait_id(&job.id, "the job to be interrupted", secs(10), |j| {
        j.is_terminal()
    });
    assert_eq!(done.state(), "interrupted", "{:#}", done.record);
    assert_eq!(
        transitions(&done).last(),
        Some(&("publishing".to_string(), "interrupted".to_string()))
    );
    wait_until("the publish group to be gone", secs(3), || {
        group_members(pgid).is_empty().then_some(())
    });
    assert!(!pid_alive(child));
}
