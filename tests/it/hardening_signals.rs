//! Regressions for attacks by a job on the daemon's signals and on its
//! judgement of who is alive: a job runs as the daemon's user and can write
//! anything under the root, so no file it writes may make the daemon or a
//! command signal a process, kill a live job, or lose an attempt. Each
//! attack is made from the job's own command, as a job would make it.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// The config of every test here whose job attacks: the default profile
/// runs `script` (which dispatches on the prompt's name).
/// The job attacks the root itself: without its sandbox, which would
/// refuse every such write, so that the check under attack is the one
/// that holds on its own.
fn attack_config(script: &str) -> ConfigToml {
    ConfigToml::new(&["/bin/sh", script]).unsandboxed()
}

/// A job that says it runs (`$OUT/<name>.ran`, one line per run) and
/// waits until `$OUT/release` exists.
const WAITER: &str = r#"echo "$JOBWARDEN_JOB_ID" >> "$OUT/$JOBWARDEN_NAME.ran"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#;

/// Lines of `$OUT/<name>.ran`: the runs of the job named `name`.
fn runs_of(sb: &Sandbox, name: &str) -> Vec<String> {
    fs::read_to_string(sb.out().join(format!("{name}.ran")))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn monitor_pid(job: &Job) -> i32 {
    job.int_field("monitor_pid")
        .unwrap_or_else(|| panic!("no monitor pid: {:#}", job.record)) as i32
}

/// `daemon.json` as the daemon wrote it, when it reads.
fn daemon_json(sb: &Sandbox) -> Option<Value> {
    let bytes = fs::read(sb.root.join("daemon.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The attack on `reload`: the job links `$OUT/target.path` over
/// `daemon.lock` (a folder, which cannot be hard-linked, by a symlink),
/// then rewrites `daemon.json` every 20 ms to name
/// `$OUT/target.pid`, until `$OUT/stop` exists.
const FORGE_DAEMON: &str = r#"python3 - <<'EOF'
import json, os, time
out = os.environ["OUT"]
root = os.path.dirname(os.path.dirname(os.environ["JOBWARDEN_RUN_DIR"]))
target = open(os.path.join(out, "target.path")).read().strip()
pid = int(open(os.path.join(out, "target.pid")).read().strip())
lock = os.path.join(root, "daemon.lock")
if os.path.isdir(target):
    os.symlink(target, lock + ".new")
else:
    os.link(target, lock + ".new")
os.replace(lock + ".new", lock)
state = os.path.join(root, "daemon.json")
while not os.path.exists(os.path.join(out, "stop")):
    try:
        with open(state) as f:
            d = json.load(f)
        d["pid"] = pid
        with open(state + ".forged", "w") as f:
            json.dump(d, f)
        os.replace(state + ".forged", state)
        open(os.path.join(out, "forging"), "w").close()
    except (OSError, ValueError):
        pass
    time.sleep(0.02)
EOF"#;

/// Start the job `attacker` (which runs [`FORGE_DAEMON`]) against `target`
/// (linked over `daemon.lock`) and `pid` (written into `daemon.json`), and
/// wait until it forges.
fn forge_the_daemon_file(sb: &Sandbox, target: &Path, pid: i32) {
    fs::write(
        sb.out().join("target.path"),
        target.to_string_lossy().as_bytes(),
    )
    .expect("target path");
    fs::write(sb.out().join("target.pid"), pid.to_string()).expect("target pid");
    sb.drop_prompt("proj", "attacker", "forge\n");
    wait_until("the attacker to forge daemon.json", secs(15), || {
        sb.out().join("forging").exists().then_some(())
    });
}

fn dispatching_script(sb: &Sandbox, attacks: &[(&str, &str)]) -> String {
    let mut body = String::from("case \"$JOBWARDEN_NAME\" in\n");
    for (name, code) in attacks {
        body.push_str(&format!("{name})\n{code}\n;;\n"));
    }
    body.push_str(&format!("*)\n{WAITER}\n;;\nesac\n"));
    sb.script("attack", &body)
}

#[test]
fn reload_never_signals_a_monitor_that_a_job_linked_over_daemon_lock() {
    let sb = Sandbox::new();
    let script = dispatching_script(&sb, &[("attacker", FORGE_DAEMON)]);
    sb.configure(&attack_config(&script));
    let d = Daemon::start(&sb);
    sb.drop_prompt("proj", "victim", "wait\n");
    let victim = sb.wait_state("proj", "victim", "running", secs(15));
    let monitor = monitor_pid(&victim);
    // The folder the victim's monitor holds its lock on.
    forge_the_daemon_file(&sb, &victim.dir, monitor);

    let out = sb.run(&["reload", "--timeout", "3s"]);
    assert!(
        pid_alive(monitor),
        "reload signalled the victim's monitor: {}\n{}",
        out.stdout,
        out.stderr
    );
    if out.code() == 0 {
        // It found the daemon itself: the daemon's own answer.
        assert!(out.stdout.contains("reload #"), "{}", out.stdout);
    } else {
        assert!(
            out.stderr.contains(&format!("{monitor}")) && out.stderr.contains("not"),
            "the refusal names the process and why: {}",
            out.stderr
        );
    }
    assert_never("the victim's monitor dying", millis(500), || {
        !pid_alive(monitor)
    });
    let st = sb.run(&["status", "--json"]);
    let st: Value = serde_json::from_str(&st.stdout).expect("status --json");
    assert_eq!(
        st["daemon"]["pid"], d.pid,
        "status names the daemon: {st:#}"
    );
    assert!(
        st["daemon"]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("not this root's daemon")),
        "status says the lock's holder is not the daemon: {st:#}"
    );
    fs::write(sb.out().join("stop"), "").expect("stop");
    fs::write(sb.out().join("release"), "").expect("release");
    let done = sb.wait_done("proj", "victim", secs(15));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(runs_of(&sb, "victim").len(), 1, "the victim ran once");
    drop(d);
}

#[test]
fn reload_never_signals_a_stranger_holding_a_lock_a_job_linked_over_daemon_lock() {
    let sb = Sandbox::new();
    let script = dispatching_script(&sb, &[("attacker", FORGE_DAEMON)]);
    sb.configure(&attack_config(&script));
    let held = sb.out().join("stranger.lock");
    fs::write(&held, "").expect("stranger's file");
    let ready = sb.out().join("stranger.ready");
    let mut stranger = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import fcntl, sys, time\n\
             f = open(sys.argv[1], 'r+')\n\
             fcntl.flock(f, fcntl.LOCK_EX)\n\
             open(sys.argv[2], 'w').close()\n\
             time.sleep(120)\n",
        )
        .arg(&held)
        .arg(&ready)
        .spawn()
        .expect("the stranger");
    wait_until("the stranger to hold its lock", secs(10), || {
        ready.exists().then_some(())
    });
    let stranger_pid = stranger.id() as i32;
    let _d = Daemon::start(&sb);
    forge_the_daemon_file(&sb, &held, stranger_pid);

    let out = sb.run(&["reload", "--timeout", "3s"]);
    let alive = stranger.try_wait().expect("try_wait").is_none();
    let _ = stranger.kill();
    let _ = stranger.wait();
    fs::write(sb.out().join("stop"), "").expect("stop");
    assert!(
        alive,
        "reload signalled a process that is not the daemon: {}\n{}",
        out.stdout, out.stderr
    );
}

#[test]
fn a_second_daemon_refuses_to_start_beside_one_whose_lock_file_was_replaced() {
    let sb = Sandbox::new();
    let replace = r#"root=$(dirname "$(dirname "$JOBWARDEN_RUN_DIR")")
rm "$root/daemon.lock" && touch "$root/daemon.lock" && touch "$OUT/replaced""#;
    let script = dispatching_script(&sb, &[("attacker", replace)]);
    sb.configure(&attack_config(&script));
    let mut first = Daemon::start(&sb);
    sb.drop_prompt("proj", "attacker", "replace the lock\n");
    let done = sb.wait_done("proj", "attacker", secs(15));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert!(sb.out().join("replaced").exists());

    let mut second = Daemon::spawn(&sb, &[]);
    let status = second.wait_exit(secs(10));
    assert!(!status.success(), "the second daemon must refuse to start");
    let said = second.stderr();
    assert!(
        said.contains(&first.pid.to_string()),
        "the refusal names the running daemon:\n{said}"
    );
    assert!(first.is_running(), "the first daemon runs on");
}

#[test]
fn a_fifo_at_daemon_lock_is_moved_aside_and_the_daemon_starts() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/sh", "-c", "true"]));
    let lock = sb.root.join("daemon.lock");
    nix::unistd::mkfifo(&lock, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");

    let mut d = Daemon::spawn(&sb, &[]);
    d.wait_ready(&sb, secs(10));
    let displaced: Vec<_> = fs::read_dir(&sb.root)
        .expect("root")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("daemon.lock.displaced-")
        })
        .collect();
    assert_eq!(displaced.len(), 1, "the FIFO is kept, moved aside");
    let kind = displaced[0].file_type().expect("type");
    use std::os::unix::fs::FileTypeExt;
    assert!(kind.is_fifo(), "what was moved aside is the FIFO");
    assert!(fs::symlink_metadata(&lock).expect("lock").is_file());
    assert!(
        d.stderr().contains("daemon.lock"),
        "a warning names the path:\n{}",
        d.stderr()
    );
}

/// The attack on recovery: every 20 ms the job sets the victim's
/// `monitor_start_time` to 1 in its `job.json`, and once appends a
/// journal line carrying that forged record (the journal wins over the
/// view, so this is the record every reader takes), until `$OUT/stop`
/// exists.
const FORGE_MONITOR: &str = r#"python3 - <<'EOF'
import json, os, time
out = os.environ["OUT"]
victim = open(os.path.join(out, "victim.dir")).read().strip()
record = os.path.join(victim, "job.json")
events = os.path.join(victim, "events.jsonl")
journaled = False
while not os.path.exists(os.path.join(out, "stop")):
    try:
        with open(record) as f:
            d = json.load(f)
        d["monitor_start_time"] = 1
        with open(record + ".forged", "w") as f:
            json.dump(d, f)
        os.replace(record + ".forged", record)
        if not journaled:
            line = {"seq": 1000000, "op": "state", "ts": d.get("updated_at", ""), "record": d}
            with open(events, "a") as f:
                f.write(json.dumps(line) + "\n")
            journaled = True
        open(os.path.join(out, "forging"), "w").close()
    except (OSError, ValueError):
        pass
    time.sleep(0.02)
EOF"#;

#[test]
fn a_forged_start_time_in_the_view_and_the_journal_never_gets_a_live_job_killed() {
    let sb = Sandbox::new();
    let script = dispatching_script(&sb, &[("attacker", FORGE_MONITOR)]);
    sb.configure(&attack_config(&script));
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("proj", "victim", "wait\n");
    let victim = sb.wait_state("proj", "victim", "running", secs(15));
    let monitor = monitor_pid(&victim);
    fs::write(
        sb.out().join("victim.dir"),
        victim.dir.to_string_lossy().as_bytes(),
    )
    .expect("victim dir");
    sb.drop_prompt("proj", "attacker", "forge\n");
    wait_until("the attacker to forge the victim's files", secs(15), || {
        sb.out().join("forging").exists().then_some(())
    });

    d.sigterm();
    d.wait_exit(secs(15));
    let d = Daemon::start(&sb);
    wait_until("the restarted daemon's start-up check", secs(20), || {
        daemon_json(&sb).filter(|s| s["pid"] == d.pid && s["startup_check"] == "done")
    });
    assert_never("the victim's monitor or job killed", millis(1500), || {
        !pid_alive(monitor) || sb.job(&victim.id).is_some_and(|j| j.state() != "running")
    });
    fs::write(sb.out().join("stop"), "").expect("stop");
    fs::write(sb.out().join("release"), "").expect("release");
    let done = wait_until("the victim to end", secs(20), || {
        sb.job(&victim.id).filter(Job::is_done)
    });
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(runs_of(&sb, "victim").len(), 1, "the victim ran once");
}

/// A job that holds 1.5 GiB, touched, in its first run; the next run
/// ends at once.
const BIG: &str = r#"if [ ! -e "$OUT/big.first" ]; then
touch "$OUT/big.first"
exec python3 -c '
import os, time
b = b"\x01" * (1536 << 20)
open(os.path.join(os.environ["OUT"], "big.ready"), "w").close()
time.sleep(300)
'
fi
echo "$JOBWARDEN_JOB_ID" >> "$OUT/big.ran""#;

#[test]
fn a_big_job_whose_monitor_was_killed_is_requeued_once_it_has_exited() {
    let sb = Sandbox::new();
    let script = sb.script("big", BIG);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "big", "hold memory\n");
    let first = sb.wait_state("proj", "big", "running", secs(15));
    wait_until("the job to hold its memory", secs(60), || {
        sb.out().join("big.ready").exists().then_some(())
    });
    let monitor = monitor_pid(&first);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the monitor");

    let ended = wait_until("the first attempt to end", secs(30), || {
        sb.job(&first.id).filter(Job::is_terminal)
    });
    assert_eq!(ended.state(), "interrupted", "{:#}", ended.record);
    let second = sb.wait_done_excluding("proj", "big", std::slice::from_ref(&first.id), secs(30));
    assert_eq!(second.state(), "succeeded", "{:#}", second.record);
    assert_eq!(runs_of(&sb, "big"), vec![second.id.clone()]);
}

/// Ledger rows `history show` finds for job `id`.
fn has_row(sb: &Sandbox, id: &str) -> bool {
    sb.run(&["history", "show", id, "--json"]).code() == 0
}

/// Jobs that end and jobs that wait while the ledger refuses writes (as
/// on a full disk; the records are still written): once writes succeed
/// again, the running daemon's view (`status`) and the ledger converge,
/// without a restart.
#[test]
fn after_a_full_disk_the_running_daemon_converges_without_a_restart() {
    let sb = Sandbox::new();
    let gate = sb.script(
        "gate",
        r#"while [ ! -e "$OUT/release" ]; do sleep 0.05; done; echo "$JOBWARDEN_JOB_ID" >> "$OUT/$JOBWARDEN_NAME.ran""#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate]).global("max_jobs", "2"));
    let full = sb.out().join("ledger-full");
    let full_s = full.to_string_lossy().into_owned();
    let _d = Daemon::start_with_env(
        &sb,
        &[
            ("JOBWARDEN_TEST_FAULT", "ledger-full"),
            ("JOBWARDEN_TEST_FAULT_WHEN", &full_s),
        ],
    );
    for name in ["a", "b"] {
        sb.drop_prompt("proj", name, "x\n");
        sb.wait_state("proj", name, "running", secs(15));
    }
    for name in ["c", "d"] {
        sb.drop_prompt("proj", name, "y\n");
        sb.wait_state("proj", name, "queued", secs(15));
    }
    // Long after the start-up check, which backfills what it finds.
    wait_until("the start-up check", secs(20), || {
        daemon_json(&sb).filter(|s| s["startup_check"] == "done")
    });
    fs::write(&full, "").expect("the ledger refuses writes");
    fs::write(sb.out().join("release"), "").expect("release");
    let names = ["a", "b", "c", "d"];
    let done: Vec<Job> = names
        .iter()
        .map(|n| sb.wait_done("proj", n, secs(30)))
        .collect();
    for job in &done {
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    }
    assert!(
        done.iter().any(|j| !has_row(&sb, &j.id)),
        "a row was written while the ledger refused writes"
    );
    fs::remove_file(&full).expect("the ledger accepts writes again");

    wait_until(
        "status to show nothing queued or running, and every row in the ledger",
        secs(15),
        || {
            let out = sb.run(&["status", "--json"]);
            let st: Value = serde_json::from_str(&out.stdout).ok()?;
            let settled = st["daemon"]["queued"] == 0
                && st["daemon"]["running"] == 0
                && st["counts"]["queued"] == 0
                && st["counts"]["running"] == 0
                && st["counts"]["succeeded"] == 4;
            (settled && done.iter().all(|j| has_row(&sb, &j.id))).then_some(())
        },
    );
}
