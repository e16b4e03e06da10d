//! Waiting for work: `jobwarden wait` exits with each outcome's code
//! (docs/exit-codes.md), the worst one when jobs end differently, after
//! `--timeout`, and with `--all` once nothing is waiting; its progress
//! lines off a terminal; `submit --wait`'s progress, `logs -f`'s exit code,
//! and `status`'s exit code with and without a daemon.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Instant;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::support::*;

/// By the prompt's name (`$1`): `ok` succeeds, `fail` exits 3, `slow`
/// sleeps, `cool` fails at once, `chatty` writes a line every 50 ms for a
/// second and succeeds, `once` fails the first time only; anything else says `ready` and runs until
/// `$OUT/release-<name>` or `$OUT/release-all` exists.
const BY_NAME: &str = r#"case "$1" in
  ok) echo fine; exit 0 ;;
  chatty) for i in $(seq 20); do echo "line $i"; sleep 0.05; done; exit 0 ;;
  once) [ -e "$OUT/once-failed" ] && exit 0; touch "$OUT/once-failed"; exit 3 ;;
  fail|cool) echo failing; exit 3 ;;
  slow) sleep 30 ;;
esac
echo ready
while [ ! -e "$OUT/release-$1" ] && [ ! -e "$OUT/release-all" ]; do sleep 0.05; done
echo released"#;

fn sandbox_with(adjust: impl FnOnce(ConfigToml) -> ConfigToml) -> Sandbox {
    let sb = Sandbox::new();
    let script = sb.script("by-name", BY_NAME);
    sb.configure(&adjust(ConfigToml::new(&["/bin/sh", &script, "{name}"])));
    sb
}

fn release(sb: &Sandbox, name: &str) {
    fs::write(sb.out().join(format!("release-{name}")), "").expect("release file");
}

/// The job of `proj/<name>` running and past its `ready` line.
fn running(sb: &Sandbox, name: &str) -> Job {
    sb.wait_job_where(
        &format!("proj/{name} to run"),
        "proj",
        name,
        &[],
        secs(15),
        |j| j.state() == "running" && j.log().contains("ready"),
    )
}

fn json(out: &CliOutput) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is one JSON object ({e}): {out:?}"))
}

/// `wait <args>` run while `meanwhile` acts; what it printed.
fn wait_while(sb: &Sandbox, args: &[&str], meanwhile: impl FnOnce()) -> CliOutput {
    std::thread::scope(|s| {
        let waiter = s.spawn(|| sb.run(&[&["wait"], args].concat()));
        meanwhile();
        waiter.join().expect("wait thread")
    })
}

/// A command started in the background, its output going to files the
/// test can read while it runs.
struct Running {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Running {
    fn start(sb: &Sandbox, args: &[&str], tag: &str) -> Running {
        let stdout = sb.out().join(format!("{tag}.stdout"));
        let stderr = sb.out().join(format!("{tag}.stderr"));
        let child = sb
            .command(args)
            .stdout(fs::File::create(&stdout).expect("stdout file"))
            .stderr(fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("spawn jobwarden");
        Running {
            child,
            stdout,
            stderr,
        }
    }

    /// Wait until its stderr says `text`.
    fn said(&self, text: &str) {
        wait_until(&format!("{text:?} on stderr"), secs(15), || {
            fs::read_to_string(&self.stderr)
                .unwrap_or_default()
                .contains(text)
                .then_some(())
        });
    }

    fn finish(mut self) -> CliOutput {
        let status = wait_until("the command to exit", secs(20), || {
            self.child.try_wait().expect("try_wait")
        });
        CliOutput {
            status,
            stdout: fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: fs::read_to_string(&self.stderr).unwrap_or_default(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User and system CPU time of `pid` so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after_comm = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of stat, 12 and 13 after the comm.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

#[test]
fn a_waiting_command_sleeps_while_the_job_runs() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "idle", "x\n");
    let job = running(&sb, "idle");
    let waiter = Running::start(&sb, &["wait", &job.id], "waiter");
    waiter.said("running");
    let before = cpu_ticks(waiter.child.id());
    // A window of time to measure over, not a wait for something.
    std::thread::sleep(secs(1));
    let used = cpu_ticks(waiter.child.id()) - before;
    // Its own reads of job.json once woke it again at once: a whole core.
    assert!(
        used <= 20,
        "`wait` used {used} ticks of CPU in one second of waiting"
    );
    release(&sb, "idle");
    assert_eq!(waiter.finish().code(), 0);
}

#[test]
fn wait_exits_0_when_the_job_succeeded_and_prints_each_change() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "gated", "run until released\n");
    let job = running(&sb, "gated");

    let waiting = Running::start(&sb, &["wait", &job.id], "wait");
    let first = format!("job {} (proj/gated): running\n", job.id);
    waiting.said(&first);
    release(&sb, "gated");
    let out = waiting.finish();

    assert_eq!(out.code(), 0, "{out:?}");
    let change = format!("job {} (proj/gated): running → succeeded", job.id);
    assert!(out.stderr.contains(&change), "one line per change: {out:?}");
    assert!(out.stderr.contains("1 succeeded"), "{out:?}");
    assert!(!out.stderr.contains('\r'), "no live line off a terminal");
    assert_eq!(out.stdout, "", "without --json stdout stays empty");
    assert!(
        sb.job(&job.id).expect("job").is_done(),
        "archived on return"
    );
}

#[test]
fn wait_exits_4_when_the_job_failed() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "fail", "fail please\n");
    let job = sb.wait_done("proj", "fail", secs(15));

    let out = sb.run(&["wait", "proj/fail", "--json"]);

    assert_eq!(out.code(), 4, "{out:?}");
    let v = json(&out);
    assert_eq!(v["exit_code"], 4, "{v:#}");
    assert_eq!(v["result"], "failed", "{v:#}");
    assert_eq!(v["complete"], true, "{v:#}");
    assert_eq!(v["jobs"][0]["id"], job.id.as_str(), "{v:#}");
    assert_eq!(v["jobs"][0]["exit_code"], 3, "{v:#}");
    assert_eq!(v["jobs"][0]["counted"], true, "{v:#}");
    assert!(out.stderr.contains("failed (exit 3)"), "{out:?}");
}

#[test]
fn wait_exits_124_when_the_job_timed_out() {
    let sb = sandbox_with(|c| c.profile("timeout", "\"1s\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "slow", "take forever\n");
    let job = sb.wait_job("proj", "slow", secs(15));

    let out = sb.run(&["wait", &job.id]);

    assert_eq!(out.code(), 124, "{out:?}");
    assert_eq!(sb.job(&job.id).expect("job").state(), "timed_out");
}

#[test]
fn wait_exits_130_when_the_job_is_aborted() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "stuck", "never ends\n");
    let job = running(&sb, "stuck");

    let out = wait_while(&sb, &[&job.id], || {
        let marked = sb.run(&["abort", &job.id, "--reason", "enough"]);
        assert_eq!(marked.code(), 0, "{marked:?}");
    });

    assert_eq!(out.code(), 130, "{out:?}");
    assert!(out.stderr.contains("aborted by request: enough"), "{out:?}");
}

#[test]
fn wait_exits_75_when_the_monitor_is_killed() {
    let sb = sandbox_with(|c| c.global("max_interrupts", "1"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "orphan", "lose my monitor\n");
    let job = running(&sb, "orphan");
    let monitor = job.int_field("monitor_pid").expect("monitor_pid") as i32;

    let out = wait_while(&sb, &[&job.id], || {
        kill(Pid::from_raw(monitor), Signal::SIGKILL).expect("SIGKILL the monitor");
    });

    assert_eq!(out.code(), 75, "{out:?}");
    assert_eq!(sb.job(&job.id).expect("job").state(), "interrupted");
}

#[test]
fn wait_for_a_project_exits_65_when_its_prompt_is_rejected() {
    let sb = sandbox_with(|c| c);
    // No daemon yet: the prompt waits in the inbox, and so does `wait`.
    sb.drop_prompt("rej", "bad", "---\nprofle: fast\n---\nbody\n");

    let waiting = Running::start(&sb, &["wait", "--project", "rej", "--json"], "wait");
    waiting.said("no daemon is running");
    let _d = Daemon::start(&sb);
    let out = waiting.finish();

    assert_eq!(out.code(), 65, "{out:?}");
    assert!(out.stderr.contains("no daemon is running"), "{out:?}");
    let v = json(&out);
    assert_eq!(v["result"], "rejected", "{v:#}");
    assert_eq!(v["jobs"][0]["state"], "rejected", "{v:#}");
    assert_eq!(v["jobs"][0]["name"], "bad", "{v:#}");
    assert!(
        v["jobs"][0]["state_reason"]
            .as_str()
            .is_some_and(|r| r.contains("profle")),
        "{v:#}"
    );
}

#[test]
fn mixed_outcomes_exit_with_the_worst_by_the_documented_precedence() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    for name in ["ok", "fail", "stuck"] {
        sb.drop_prompt("proj", name, format!("{name}\n"));
    }
    let ok = sb.wait_done("proj", "ok", secs(15));
    let fail = sb.wait_done("proj", "fail", secs(15));
    let stuck = running(&sb, "stuck");

    let out = wait_while(&sb, &[&ok.id, &fail.id, &stuck.id, "--json"], || {
        sb.run(&["abort", &stuck.id]);
    });

    // failed comes before aborted, aborted before succeeded.
    assert_eq!(out.code(), 4, "{out:?}");
    let v = json(&out);
    let states: Vec<&str> = v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["succeeded", "failed", "aborted"], "{v:#}");

    let without_the_failure = sb.run(&["wait", &ok.id, &stuck.id]);
    assert_eq!(without_the_failure.code(), 130, "{without_the_failure:?}");
}

#[test]
fn wait_all_returns_once_the_inbox_and_the_queue_are_empty() {
    let sb = sandbox_with(|c| {
        c.global("max_jobs", "1")
            .profile("max_attempts", "2")
            .profile("cooldown", "\"1h\"")
    });
    let _d = Daemon::start(&sb);
    // A failure requeued into an hour's cooldown: listed, not waited for.
    sb.drop_prompt("proj", "cool", "fails\n");
    sb.wait_state("proj", "cool", "failed", secs(15));
    wait_until("cool back in the inbox", secs(10), || {
        sb.project_dir("proj")
            .join("cool.prompt.md")
            .exists()
            .then_some(())
    });
    for name in ["a", "b", "c"] {
        sb.drop_prompt("proj", name, format!("{name}\n"));
    }
    running(&sb, "a");

    let out = std::thread::scope(|s| {
        let waiter = s.spawn(|| sb.run(&["wait", "--all"]));
        assert_never(
            "wait --all returning while b and c wait",
            millis(800),
            || waiter.is_finished(),
        );
        release(&sb, "all");
        waiter.join().expect("wait thread")
    });

    assert_eq!(out.code(), 0, "{out:?}");
    for name in ["a", "b", "c"] {
        let jobs = sb.jobs_for("proj", name);
        assert!(
            jobs.len() == 1 && jobs[0].is_done() && jobs[0].state() == "succeeded",
            "{name} ended before wait returned: {jobs:?}"
        );
    }
    let left: Vec<_> = sb
        .inbox_files()
        .into_iter()
        .filter(|p| !p.ends_with("cool.prompt.md"))
        .collect();
    assert!(left.is_empty(), "nothing else waits: {left:?}");
    assert!(
        out.stderr
            .contains("not waited for: proj/cool (in cooldown until"),
        "{out:?}"
    );
    assert!(out.stderr.contains("3 succeeded"), "{out:?}");
}

#[test]
fn wait_timeout_gives_up_with_exit_5() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "long", "runs on\n");
    let job = running(&sb, "long");

    let started = Instant::now();
    let out = sb.run(&["wait", &job.id, "--timeout", "400ms", "--json"]);

    assert_eq!(out.code(), 5, "{out:?}");
    assert!(started.elapsed() < secs(10), "{:?}", started.elapsed());
    let v = json(&out);
    assert_eq!(v["complete"], false, "{v:#}");
    assert_eq!(v["result"], "unfinished", "{v:#}");
    assert_eq!(v["jobs"][0]["state"], "running", "{v:#}");
    assert_eq!(v["jobs"][0]["counted"], false, "{v:#}");
    assert!(out.stderr.contains("gave up after"), "{out:?}");
    assert_eq!(sb.job(&job.id).expect("job").state(), "running");
}

#[test]
fn wait_for_an_unknown_job_is_exit_1_and_needs_something_to_wait_for() {
    let sb = sandbox_with(|c| c);
    let out = sb.run(&["wait", "proj/never"]);
    assert_eq!(out.code(), 1, "{out:?}");
    let nothing = sb.run(&["wait"]);
    assert_eq!(nothing.code(), 2, "{nothing:?}");
    let empty = sb.run(&["wait", "--project", "idle"]);
    assert_eq!(empty.code(), 0, "nothing to wait for: {empty:?}");
}

#[test]
fn logs_follow_exits_with_the_code_of_a_failure() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "fail", "fail please\n");
    let job = sb.wait_done("proj", "fail", secs(15));

    let out = sb.run(&["logs", &job.id, "-f"]);

    assert_eq!(out.code(), 4, "{out:?}");
    assert_eq!(out.stdout, "failing\n");
    assert!(out.stderr.contains("failed (exit 3)"), "{out:?}");
}

#[test]
fn status_exits_3_without_a_daemon_and_0_with_one() {
    let sb = sandbox_with(|c| c);
    for args in [&["status", "--json"][..], &["status"]] {
        let out = sb.run(args);
        assert_eq!(out.code(), 3, "no daemon: {out:?}");
        if args.len() == 2 {
            assert_eq!(json(&out)["daemon"]["alive"], false, "{out:?}");
        } else {
            assert!(out.stdout.contains("not running"), "{out:?}");
        }
    }
    let _d = Daemon::start(&sb);
    let out = sb.run(&["status", "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(json(&out)["daemon"]["alive"], true, "{out:?}");
}

#[test]
fn submit_wait_says_each_change_on_stderr() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    let file = sb.base.join("gated.prompt.md");
    fs::write(&file, "run until released\n").expect("prompt file");
    let file = file.to_str().expect("UTF-8 path");

    let submitting = Running::start(
        &sb,
        &["submit", file, "--project", "proj", "--wait"],
        "submit",
    );
    let job = running(&sb, "gated");
    // First seen queued or running, depending on the race with the claim.
    submitting.said("running\n");
    release(&sb, "gated");
    let out = submitting.finish();

    assert_eq!(out.code(), 0, "{out:?}");
    let id = out.stdout.trim();
    assert_eq!(id, job.id);
    assert!(
        out.stderr
            .contains(&format!("job {id} (proj/gated): running → succeeded")),
        "{out:?}"
    );
}

#[test]
fn wait_shows_a_live_line_on_a_terminal() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "gated", "run until released\n");
    let job = running(&sb, "gated");
    let line = format!(
        "{} --root {} --config {} wait {} 2>&1",
        BIN,
        sb.root.display(),
        sb.config.display(),
        job.id
    );
    let typescript = sb.out().join("typescript");
    let Some(mut child) = on_a_terminal(&line, &typescript) else {
        return;
    };
    let said = |what: &str| {
        let text = fs::read_to_string(&typescript).unwrap_or_default();
        text.contains(what).then_some(text)
    };
    wait_until("the live line", secs(15), || said("] 1 running"));
    release(&sb, "gated");
    let status = wait_until("script to exit", secs(20), || {
        child.try_wait().expect("try_wait")
    });

    let text = said("").unwrap_or_default();
    assert!(status.success(), "{status:?}\n{text:?}");
    assert!(text.contains("\r\x1b[2K["), "redrawn in place: {text:?}");
    assert!(
        text.contains(&format!("job {} (proj/gated): succeeded", job.id)),
        "an end stays as a line: {text:?}"
    );
    assert!(
        !text.contains("running →"),
        "no change lines on a terminal: {text:?}"
    );
    let frames = live_frames(&text);
    assert!(
        frames.windows(2).all(|w| w[0] != w[1]),
        "no frame drawn twice in a row: {frames:?}"
    );
}

/// The live lines drawn in `typescript`: each follows an erase of the line.
fn live_frames(typescript: &str) -> Vec<&str> {
    typescript
        .split("\r\x1b[2K")
        .skip(1)
        .map(|f| f.split(['\r', '\n']).next().unwrap_or(""))
        .filter(|f| !f.is_empty())
        .collect()
}

/// A prompt file `<name>.prompt.md` outside the root, for `submit`.
fn prompt_file(sb: &Sandbox, name: &str) -> String {
    let file = sb.base.join(format!("{name}.prompt.md"));
    fs::write(&file, format!("{name}\n")).expect("prompt file");
    file.to_str().expect("UTF-8 path").to_owned()
}

#[test]
fn submit_wait_says_the_end_once() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    let file = prompt_file(&sb, "ok");

    let out = sb.run(&["submit", &file, "--project", "proj", "--wait"]);

    assert_eq!(out.code(), 0, "{out:?}");
    let ends: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("succeeded"))
        .collect();
    assert_eq!(ends.len(), 1, "the end is said once: {out:?}");
    let id = out.stdout.trim();
    assert!(
        ends[0].starts_with(&format!("job {id} (proj/ok): ")),
        "{out:?}"
    );
}

/// Give `line` (a shell command line) a terminal with `script`; `None`
/// where there is no `script` that can open one (no /dev/ptmx in some
/// containers).
fn on_a_terminal(line: &str, typescript: &std::path::Path) -> Option<Child> {
    let works = Command::new("script")
        .args(["-qec", "true", "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        eprintln!("skipped: no `script` that can give the command a terminal");
        return None;
    }
    let child = Command::new("script")
        .args(["-qefc", line])
        .arg(typescript)
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run script");
    Some(child)
}

#[test]
fn submit_wait_on_a_terminal_draws_each_live_line_once() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    let file = prompt_file(&sb, "chatty");
    let line = format!(
        "{} --root {} --config {} submit {file} --project proj --wait 2>&1",
        BIN,
        sb.root.display(),
        sb.config.display(),
    );
    let typescript = sb.out().join("typescript");
    let Some(mut child) = on_a_terminal(&line, &typescript) else {
        return;
    };
    let status = wait_until("script to exit", secs(30), || {
        child.try_wait().expect("try_wait")
    });

    let text = fs::read_to_string(&typescript).unwrap_or_default();
    assert!(status.success(), "{status:?}\n{text:?}");
    let job = sb.wait_done("proj", "chatty", secs(5));
    assert!(
        job.log().contains("line 20"),
        "its output woke the command many times: {}",
        job.log()
    );
    // One drawn twice is a redraw that changed nothing.
    let frames = live_frames(&text);
    let running = format!("job {}: running", job.id);
    assert_eq!(
        frames.iter().filter(|f| f.ends_with(&running)).count(),
        1,
        "the running line is drawn once: {frames:?}\n{text:?}"
    );
    let ends = text.matches("succeeded").count();
    assert_eq!(ends, 1, "the end is said once: {text:?}");
}

#[test]
fn wait_for_a_project_counts_its_jobs_that_ended_before_the_wait() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "fail", "fail please\n");
    sb.drop_prompt("proj", "ok", "fine\n");
    let fail = sb.wait_done("proj", "fail", secs(15));
    let ok = sb.wait_done("proj", "ok", secs(15));

    let out = sb.run(&["wait", "--project", "proj", "--json"]);

    assert_eq!(out.code(), 4, "the failure counts: {out:?}");
    let v = json(&out);
    let jobs = v["jobs"].as_array().expect("jobs");
    for job in [&fail, &ok] {
        let row = jobs
            .iter()
            .find(|j| j["id"] == job.id.as_str())
            .unwrap_or_else(|| panic!("{} listed: {v:#}", job.id));
        assert_eq!(row["counted"], true, "{v:#}");
        assert_eq!(row["before_wait"], true, "{v:#}");
    }
    assert!(
        out.stderr
            .contains(&format!("job {} (proj/fail): failed (exit 3)", fail.id)),
        "{out:?}"
    );
    let other = sb.run(&["wait", "--project", "elsewhere"]);
    assert_eq!(
        other.code(),
        0,
        "another project's end is not counted: {other:?}"
    );
}

#[test]
fn wait_for_a_project_counts_a_prompt_by_its_last_attempt() {
    let sb = sandbox_with(|c| c.profile("max_attempts", "2").profile("cooldown", "\"0s\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "once", "fails, then succeeds\n");
    let retried = sb.wait_job_where(
        "the second attempt to succeed",
        "proj",
        "once",
        &[],
        secs(15),
        |j| j.is_done() && j.state() == "succeeded",
    );
    assert_eq!(sb.jobs_for("proj", "once").len(), 2);

    let out = sb.run(&["wait", "--project", "proj", "--json"]);

    assert_eq!(out.code(), 0, "the retry replaced the failure: {out:?}");
    let v = json(&out);
    let counted: Vec<&str> = v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter(|j| j["counted"] == true)
        .map(|j| j["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(counted, [retried.id.as_str()], "{v:#}");
}

/// A `*.running.md` no claim made (a careless job wrote it into the
/// inbox) is no job to wait for: the wait ends, once the file is a few
/// seconds old, with the project's own result.
#[test]
fn wait_for_a_project_ends_beside_a_claimed_name_no_claim_made() {
    let sb = sandbox_with(|c| c);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "ok", "fine\n");
    sb.wait_done("proj", "ok", secs(15));
    fs::write(sb.root.join("inbox/proj/ok.running.md"), "a stray\n").expect("stray");

    let out = sb.run(&["wait", "--project", "proj", "--timeout", "60s"]);

    assert_eq!(out.code(), 0, "the stray is not waited for: {out:?}");
}
