//! The Slurm executor against a real single-node cluster
//! (`support/slurm.rs`): a profile with `executor = "slurm"` submits its
//! jobs with `sbatch`, follows them with one poll for all, and records
//! them as it records local jobs.

use serde_json::Value;

use crate::support::slurm::Cluster;
use crate::support::*;

/// A sandbox whose default profile runs `body` (a shell script) on the
/// cluster, and a daemon that knows the cluster.
fn on_slurm(cluster: &Cluster, body: &str, extra: &str) -> (Sandbox, Daemon) {
    let sb = Sandbox::new();
    let job = sb.script("job", body);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &job])
            .global("slurm_poll_interval", "\"300ms\"")
            .profile("executor", "\"slurm\"")
            .extra(&format!(
                "[profiles.default.slurm]\npartition = \"debug\"\n{extra}"
            )),
    );
    let daemon = daemon_on(cluster, &sb);
    (sb, daemon)
}

/// A daemon on `sb` whose Slurm cluster is `cluster`.
fn daemon_on(cluster: &Cluster, sb: &Sandbox) -> Daemon {
    let conf = cluster.conf_path().to_string_lossy().into_owned();
    Daemon::start_with_env(sb, &[("SLURM_CONF", &conf)])
}

fn slurm_of(job: &Job) -> Value {
    job.record["slurm"].clone()
}

#[test]
fn a_prompt_on_a_slurm_profile_runs_there_with_its_log_and_ledger_row() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let (sb, _d) = on_slurm(
        &cluster,
        r#"echo "$SLURM_JOB_ID" >> "$OUT/ran"; echo "read: $(cat)"; echo "to stderr" >&2; echo done"#,
        "",
    );
    sb.drop_prompt("p", "hello", "the prompt\n");
    let job = sb.wait_done("p", "hello", secs(60));
    assert_eq!(
        job.state(),
        "succeeded",
        "{:#}\n{}",
        job.record,
        cluster.logs()
    );
    let s = slurm_of(&job);
    let ran = std::fs::read_to_string(sb.out().join("ran")).expect("ran");
    assert_eq!(ran.lines().count(), 1, "ran once: {ran}");
    assert_eq!(s["job_id"].as_str(), Some(ran.trim()), "{s:#}");
    assert_eq!(s["node"].as_str(), Some(cluster.node.as_str()), "{s:#}");
    assert_eq!(s["name"].as_str(), Some(format!("jw-{}", job.id).as_str()));
    assert!(s["pending_ms"].is_u64() && s["run_ms"].is_u64(), "{s:#}");
    assert_eq!(s["state"], "COMPLETED", "Slurm's word on its end: {s:#}");
    assert_eq!(job.record["exit_code"], 0);
    let log = std::fs::read_to_string(job.dir.join("job.log")).expect("log");
    assert!(log.contains("read: the prompt"), "{log}");
    assert!(log.contains("to stderr") && log.contains("done"), "{log}");
    let row = wait_row(&sb, &job.id);
    assert_eq!(row["outcome"], "success", "{row:#}");
    assert_eq!(
        row["slurm"]["slurm_job_id"].as_str(),
        Some(ran.trim()),
        "{row:#}"
    );
    assert_eq!(
        row["slurm"]["node"].as_str(),
        Some(cluster.node.as_str()),
        "{row:#}"
    );
    assert_eq!(row["slurm"]["state"], "COMPLETED", "{row:#}");
    assert!(
        row["slurm"]["pending_ms"].is_u64() && row["slurm"]["run_ms"].is_u64(),
        "{row:#}"
    );
    let human = sb.run(&["history", "show", &job.id]);
    assert!(
        human
            .stdout
            .contains(&format!("slurm        {} on {}", ran.trim(), cluster.node)),
        "{}",
        human.stdout
    );
    let shown = sb.run(&["show", &job.id]);
    assert!(
        shown.stdout.contains(&format!("Slurm job {}", ran.trim())),
        "{}",
        shown.stdout
    );
    assert!(
        artifact_text(&row, "stdout_tail").is_some_and(|t| t.contains("done")),
        "{row:#}"
    );
    // Slurm agrees.
    let shown = cluster.show(ran.trim());
    assert!(shown.contains("JobState=COMPLETED"), "{shown}");
}

#[test]
fn a_failing_slurm_job_records_its_exit_code() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let (sb, _d) = on_slurm(&cluster, "cat >/dev/null; echo failing; exit 7", "");
    sb.drop_prompt("p", "bad", "x\n");
    let job = sb.wait_done("p", "bad", secs(60));
    assert_eq!(
        job.state(),
        "failed",
        "{:#}\n{}",
        job.record,
        cluster.logs()
    );
    assert_eq!(job.record["exit_code"], 7);
    assert_eq!(
        job.str_field("state_reason"),
        Some("the command exited with code 7")
    );
    assert_eq!(job.record["failure_stage"], "run");
    let row = wait_row(&sb, &job.id);
    assert_eq!(row["outcome"], "failure", "{row:#}");
    assert_eq!(row["exit_code"], 7, "{row:#}");
}

/// A job that says it ran (its Slurm id in `ran-<name>`), then waits for
/// `release-<name>`; a SIGTERM is written down in `term-<name>`.
const HELD: &str = r#"cat >/dev/null
echo "$SLURM_JOB_ID" >> "$OUT/ran-$JOBWARDEN_NAME"
trap 'echo TERM >> "$OUT/term-$JOBWARDEN_NAME"; exit 143' TERM
echo "waiting for release"
while [ ! -e "$OUT/release-$JOBWARDEN_NAME" ]; do sleep 0.1; done
echo released"#;

fn started(sb: &Sandbox, name: &str) -> String {
    let path = sb.out().join(format!("ran-{name}"));
    wait_until(&format!("{name} to run in Slurm"), secs(60), || {
        std::fs::read_to_string(&path)
            .ok()
            .filter(|t| t.ends_with('\n'))
    })
}

/// The pid of `job`'s monitor.
fn monitor_of(job: &Job) -> i32 {
    job.int_field("monitor_pid").expect("monitor_pid") as i32
}

fn kill9(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL");
}

fn release(sb: &Sandbox, name: &str) {
    std::fs::write(sb.out().join(format!("release-{name}")), "").expect("release");
}

fn runs(sb: &Sandbox, name: &str) -> usize {
    std::fs::read_to_string(sb.out().join(format!("ran-{name}")))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn abort_of_a_running_slurm_job_sends_it_sigterm_and_of_a_pending_one_cancels_it_unstarted() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let (sb, _d) = on_slurm(&cluster, HELD, "");
    sb.drop_prompt("p", "run", "x\n");
    started(&sb, "run");
    let job = sb.wait_state("p", "run", "running", secs(10));
    let out = sb.run(&["abort", &job.id]);
    assert_eq!(out.code(), 0, "{out:?}");
    let job = sb.wait_done("p", "run", secs(60));
    assert_eq!(job.state(), "aborted", "{:#}", job.record);
    let term = std::fs::read_to_string(sb.out().join("term-run")).unwrap_or_default();
    assert_eq!(term.trim(), "TERM", "the command got SIGTERM");
    let log = std::fs::read_to_string(job.dir.join("job.log")).expect("log");
    assert!(log.contains("scancel --signal=TERM --full"), "{log}");
    let row = wait_row(&sb, &job.id);
    assert_eq!(row["outcome"], "aborted", "{row:#}");

    // Held in Slurm: never started, cancelled there.
    let (sb, _d) = on_slurm(&cluster, HELD, "sbatch_args = [\"--begin=now+3600\"]\n");
    sb.drop_prompt("p", "held", "x\n");
    let job = sb.wait_job_where("held pending in Slurm", "p", "held", &[], secs(30), |j| {
        j.record["slurm"]["state"] == "PENDING"
    });
    let slurm_id = job.record["slurm"]["job_id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(sb.run(&["abort", &job.id]).code(), 0);
    let job = sb.wait_done("p", "held", secs(60));
    assert_eq!(job.state(), "aborted", "{:#}", job.record);
    assert!(
        job.str_field("state_reason")
            .is_some_and(|r| r.contains("Slurm had not started it")),
        "{:#}",
        job.record
    );
    assert_eq!(runs(&sb, "held"), 0, "it never ran");
    let shown = cluster.show(&slurm_id);
    assert!(shown.contains("JobState=CANCELLED"), "{shown}");
}

#[test]
fn a_slurm_job_over_its_timeout_is_timed_out_by_the_monitor() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let (sb, _d) = on_slurm(&cluster, HELD, "");
    let cfg = std::fs::read_to_string(&sb.config).expect("config");
    std::fs::write(
        &sb.config,
        cfg.replace(
            "executor = \"slurm\"",
            "executor = \"slurm\"\ntimeout = \"3s\"",
        ),
    )
    .expect("config");
    assert_eq!(sb.run(&["reload"]).code(), 0);
    sb.drop_prompt("p", "slow", "x\n");
    let slurm_id = started(&sb, "slow");
    // Slurm's own limit is a backstop: the timeout and a minute, in
    // whole minutes.
    let shown = cluster.show(slurm_id.trim());
    assert!(shown.contains("TimeLimit=00:02:00"), "{shown}");
    let job = sb.wait_done("p", "slow", secs(60));
    assert_eq!(job.state(), "timed_out", "{:#}", job.record);
    assert!(
        job.str_field("state_reason")
            .is_some_and(|r| r.starts_with("timed out after")),
        "{:#}",
        job.record
    );
    assert_eq!(runs(&sb, "slow"), 1);
    let row = wait_row(&sb, &job.id);
    assert_eq!(row["outcome"], "timeout", "{row:#}");
}

#[test]
fn a_slurm_job_outlives_its_killed_monitor_and_daemon_and_is_recorded_once() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let (sb, d) = on_slurm(&cluster, HELD, "");
    sb.drop_prompt("p", "m", "x\n");
    sb.drop_prompt("p", "d", "x\n");
    let ids = [started(&sb, "m"), started(&sb, "d")].map(|id| id.trim().to_owned());
    // One question to Slurm for both, from the daemon.
    wait_until("the daemon's poll to ask about both", secs(20), || {
        let polled: Value =
            serde_json::from_slice(&std::fs::read(sb.root.join("slurm.json")).ok()?).ok()?;
        let asked: Vec<&str> = polled["asked"]
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        ids.iter()
            .all(|id| asked.contains(&id.as_str()))
            .then_some(())
    });
    // The log follows the batch output while the job runs.
    let m = sb.wait_job_where("its first line in job.log", "p", "m", &[], secs(20), |j| {
        std::fs::read_to_string(j.dir.join("job.log"))
            .is_ok_and(|l| l.contains("waiting for release"))
    });
    assert_eq!(m.state(), "running");
    let monitor = monitor_of(&m);
    // The monitor killed: another follows the job, which goes on.
    kill9(monitor);
    let m = sb.wait_id(&m.id, "a new monitor", secs(30), |j| {
        j.int_field("monitor_pid")
            .is_some_and(|p| p as i32 != monitor)
    });
    assert_eq!(m.state(), "running", "{:#}", m.record);
    // The daemon and the other job's monitor killed, and the job ends in
    // Slurm while nobody watches: the next daemon's start follows it and
    // finds its true end.
    let dj = sb.wait_state("p", "d", "running", secs(10));
    let monitor_d = monitor_of(&dj);
    drop(d);
    kill9(monitor_d);
    release(&sb, "d");
    wait_until("d's batch script to record its end", secs(30), || {
        dj.dir.join("slurm-exit.json").exists().then_some(())
    });
    let _d = daemon_on(&cluster, &sb);
    release(&sb, "m");
    for name in ["m", "d"] {
        let job = sb.wait_done("p", name, secs(60));
        assert_eq!(job.state(), "succeeded", "{name}: {:#}", job.record);
        assert_eq!(runs(&sb, name), 1, "{name} ran once");
        let log = std::fs::read_to_string(job.dir.join("job.log")).expect("log");
        assert_eq!(log.matches("waiting for release").count(), 1, "{log}");
        assert!(log.contains("released"), "{log}");
        let rows = sb.run(&["history", "list", "--name", name, "--json"]);
        let rows: Value = serde_json::from_str(&rows.stdout).expect("history");
        assert_eq!(rows.as_array().map(Vec::len), Some(1), "{name}: {rows:#}");
    }
}

#[test]
fn a_slurmctld_restarted_mid_job_loses_and_duplicates_nothing() {
    let Some(mut cluster) = Cluster::up_or_skip() else {
        return;
    };
    let (sb, _d) = on_slurm(&cluster, HELD, "");
    sb.drop_prompt("p", "c", "x\n");
    let slurm_id = started(&sb, "c");
    cluster.stop_ctld();
    // Without a controller the job is followed on: still running.
    assert_never(
        "the job ending without its controller",
        millis(1500),
        || sb.jobs_for("p", "c").iter().any(|j| j.is_terminal()),
    );
    cluster.restart_ctld();
    release(&sb, "c");
    let job = sb.wait_done("p", "c", secs(90));
    assert_eq!(
        job.state(),
        "succeeded",
        "{:#}\n{}",
        job.record,
        cluster.logs()
    );
    assert_eq!(runs(&sb, "c"), 1);
    assert_eq!(
        job.record["slurm"]["job_id"].as_str(),
        Some(slurm_id.trim())
    );
    assert_eq!(sb.jobs_for("p", "c").len(), 1, "one job");
}

#[test]
fn sbatch_missing_a_refused_submission_and_an_unreachable_cluster_are_setup_failures() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    let job = sb.script("job", "cat >/dev/null; echo ran >> \"$OUT/ran\"");
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &job])
            .global("slurm_poll_interval", "\"300ms\"")
            .profile("executor", "\"slurm\"")
            .extra(
                "[profiles.nosbatch]\nenv = { PATH = \"/nonexistent\" }\n\
                 [profiles.refused.slurm]\npartition = \"nosuchpartition\"\n",
            ),
    );
    let d = daemon_on(&cluster, &sb);
    for name in ["nosbatch", "refused"] {
        sb.drop_prompt("p", name, format!("---\nprofile: {name}\n---\nx\n"));
    }
    let said = |name: &str| {
        let job = sb.wait_done("p", name, secs(90));
        assert_eq!(job.state(), "setup_failed", "{name}: {:#}", job.record);
        job.str_field("state_reason").unwrap_or_default().to_owned()
    };
    let why = said("nosbatch");
    assert!(
        why.contains("sbatch is not installed or not in PATH"),
        "{why}"
    );
    let why = said("refused");
    assert!(why.contains("Invalid partition"), "{why}");
    // A daemon whose cluster's controller does not answer.
    drop(d);
    let down = sb.base.join("down.conf");
    let text = std::fs::read_to_string(cluster.conf_path()).expect("conf");
    let port = text
        .lines()
        .find_map(|l| l.strip_prefix("SlurmctldPort="))
        .expect("port");
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    std::fs::write(
        &down,
        text.replace(
            &format!("SlurmctldPort={port}"),
            &format!("SlurmctldPort={free}"),
        ),
    )
    .expect("down.conf");
    let down = down.to_string_lossy().into_owned();
    let _d = Daemon::start_with_env(&sb, &[("SLURM_CONF", &down)]);
    sb.drop_prompt("p", "down", "x\n");
    let why = said("down");
    assert!(why.contains("Unable to contact slurm controller"), "{why}");
    assert!(!sb.out().join("ran").exists(), "nothing ran");
    // No cooldown: a setup failure is fixed, not waited out.
    let check = sb.run(&["history", "check", "p", "down"]);
    assert_eq!(check.code(), 1, "eligible at once: {check:?}");
}

#[test]
fn a_node_that_fails_under_a_slurm_job_interrupts_it_and_slurm_never_reruns_it() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let (sb, _d) = on_slurm(&cluster, HELD, "");
    sb.drop_prompt("p", "n", "x\n");
    let slurm_id = started(&sb, "n");
    let out = cluster
        .command("scontrol")
        .args([
            "update",
            &format!("NodeName={}", cluster.node),
            "State=DOWN",
            "Reason=test",
        ])
        .output()
        .expect("scontrol update");
    assert!(out.status.success(), "{out:?}");
    let job = sb.wait_job_where("the job to end", "p", "n", &[], secs(60), |j| {
        j.is_terminal()
    });
    assert_eq!(job.state(), "interrupted", "{:#}", job.record);
    let why = job.str_field("state_reason").unwrap_or_default();
    assert!(why.contains("NODE_FAIL"), "{why}");
    assert_eq!(
        job.record["slurm"]["state"], "NODE_FAIL",
        "{:#}",
        job.record
    );
    let shown = cluster.show(slurm_id.trim());
    assert!(
        shown.contains("Requeue=0"),
        "Slurm may not rerun it: {shown}"
    );
    assert_eq!(runs(&sb, "n"), 1);
    let row = wait_row(&sb, &job.id);
    assert_eq!(row["outcome"], "interrupted", "{row:#}");
}

#[test]
fn a_forged_slurm_id_in_a_record_never_touches_another_slurm_job() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let other = cluster.run(
        "sbatch",
        &[
            "--parsable",
            "-J",
            "someone-else",
            "--output=/dev/null",
            "--wrap",
            "sleep 300",
        ],
    );
    let other = other.trim().to_owned();
    assert!(!other.is_empty(), "the other job was submitted");
    let (sb, d) = on_slurm(&cluster, HELD, "");
    sb.drop_prompt("p", "f", "x\n");
    let ours = started(&sb, "f");
    let job = sb.wait_state("p", "f", "running", secs(10));
    let monitor = monitor_of(&job);
    drop(d);
    kill9(monitor);
    // What a careless job could do: its record now names another job.
    let path = job.dir.join("job.json");
    let mut rec: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("job.json")).expect("json");
    rec["slurm"]["job_id"] = Value::String(other.clone());
    std::fs::write(&path, serde_json::to_vec_pretty(&rec).expect("json")).expect("forge");
    let _d = daemon_on(&cluster, &sb);
    let job = sb.wait_id(&job.id, "its own Slurm job followed again", secs(60), |j| {
        j.record["slurm"]["job_id"].as_str() == Some(ours.trim())
    });
    assert_eq!(sb.run(&["abort", &job.id]).code(), 0);
    let job = sb.wait_done("p", "f", secs(60));
    assert_eq!(job.state(), "aborted", "{:#}", job.record);
    assert_eq!(runs(&sb, "f"), 1);
    let theirs = cluster.show(&other);
    assert!(
        theirs.contains("JobState=RUNNING"),
        "the other job runs on: {theirs}"
    );
}

#[test]
fn a_monitor_killed_while_sbatch_runs_never_lets_the_command_run_twice() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    let job = sb.script("job", HELD);
    // An sbatch that takes its time, as one talking to a busy controller.
    let slow = sb.base.join("slowbin");
    std::fs::create_dir_all(&slow).expect("slowbin");
    install_program(
        &slow.join("sbatch"),
        "#!/bin/sh\nsleep 4\nexec sbatch \"$@\"\n",
    );
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", slow.display());
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &job])
            .global("slurm_poll_interval", "\"300ms\"")
            .profile("executor", "\"slurm\"")
            .env("PATH", &path),
    );
    let _d = daemon_on(&cluster, &sb);
    sb.drop_prompt("p", "s", "x\n");
    let job = sb.wait_job_where("its submission under way", "p", "s", &[], secs(20), |j| {
        j.state() == "running"
            && j.record["slurm"]["job_id"].is_null()
            && !j.record["slurm"].is_null()
    });
    kill9(monitor_of(&job));
    let ended = sb.wait_job_where("the job to end", "p", "s", &[], secs(60), |j| {
        j.is_terminal()
    });
    assert_eq!(ended.state(), "interrupted", "{:#}", ended.record);
    assert!(
        ended
            .str_field("state_reason")
            .is_some_and(|r| r.contains("not retried on its own")),
        "{:#}",
        ended.record
    );
    // The sbatch died with its monitor: nothing reached Slurm, nothing
    // runs, and no other attempt was made.
    assert_never("the command to run", secs(6), || runs(&sb, "s") > 0);
    assert_eq!(sb.jobs_for("p", "s").len(), 1, "one job");
    assert!(cluster.queue().trim().is_empty(), "{}", cluster.queue());
}

#[test]
fn a_slurm_job_that_cuts_its_batch_output_and_forges_its_exit_record_is_recorded_as_it_ran() {
    let Some(cluster) = Cluster::up_or_skip() else {
        return;
    };
    let (sb, _d) = on_slurm(
        &cluster,
        r#"echo "first: a line long enough that the cut output is shorter than what was copied"
sleep 1
: > "$JOBWARDEN_SLURM_DIR/slurm.out"
sleep 1
echo second
printf '{"exit_code":0,"host":"forged","ended_at":"2026-01-01T00:00:00.000Z"}\n' > "$JOBWARDEN_SLURM_DIR/slurm-exit.json"
touch "$OUT/forged"
while [ ! -e "$OUT/go" ]; do sleep 0.1; done
echo third
exit 3"#,
        "",
    );
    sb.drop_prompt("p", "cut", "x\n");
    wait_until("the job to forge its exit record", secs(60), || {
        sb.out().join("forged").exists().then_some(())
    });
    // The record says exit 0, but Slurm says the job still runs: not an end.
    assert_never(
        "the job to end on the record it wrote itself",
        secs(2),
        || sb.jobs_for("p", "cut").iter().any(Job::is_terminal),
    );
    std::fs::write(sb.out().join("go"), "").expect("let the job end");
    let job = sb.wait_done("p", "cut", secs(60));
    assert_eq!(job.state(), "failed", "{:#}", job.record);
    assert_eq!(
        job.record["exit_code"], 3,
        "the command's own exit: {:#}",
        job.record
    );
    let log = job.log();
    assert!(log.contains("first: a line"), "{log}");
    assert!(
        log.contains("was cut from"),
        "the cut is said in job.log: {log}"
    );
    assert!(log.contains("second") && log.contains("third"), "{log}");
}
