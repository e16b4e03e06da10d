//! Closed and full pipes never kill anything: a daemon (and its monitors)
//! whose stderr reader went away or stopped reading keeps claiming and
//! running jobs, and every CLI command whose stdout reader closes early
//! (`| head -1`) exits quietly. A monitor that panics exits even when its
//! stderr is full, and a daemon started with its standard descriptors
//! closed writes no log line into a file it opened.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use serde_json::Value;

use crate::support::*;

/// The smallest pipe Linux makes (one page): a command whose output is
/// longer than this and one line cannot finish before its reader closes.
const SMALL_PIPE: usize = 4096;

/// A pipe: (read end, write end), neither inherited by children (a
/// daemon holding the read end itself would never see it closed).
fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).expect("pipe")
}

/// A pipe of [`SMALL_PIPE`] bytes.
fn small_pipe() -> (OwnedFd, OwnedFd) {
    let (read, write) = pipe();
    fcntl(write.as_fd(), FcntlArg::F_SETPIPE_SZ(SMALL_PIPE as i32)).expect("F_SETPIPE_SZ");
    (read, write)
}

/// Fills the pipe of `write` to the brim with whole lines (non-blocking
/// only while filling: the flag is the pipe's, shared with whoever gets it).
fn fill(write: &OwnedFd) {
    fcntl(write.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("set O_NONBLOCK");
    let line = b"filler line from the test\n";
    loop {
        match nix::unistd::write(write, line) {
            Ok(_) => continue,
            Err(nix::errno::Errno::EAGAIN) => break,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
    // A last partial line may have gone in; what matters is that it is full.
    fcntl(write.as_fd(), FcntlArg::F_SETFL(OFlag::empty())).expect("clear O_NONBLOCK");
}

/// A job that prints a little and takes a moment.
fn slow_printing_job(sb: &Sandbox) -> ConfigToml {
    let job = sb.script(
        "job",
        "echo start; i=0; while [ $i -lt 20 ]; do echo \"line $i\"; i=$((i+1)); done\n\
         sleep 0.3\necho done",
    );
    ConfigToml::new(&["/bin/sh", &job])
}

/// Waits for the job of `name` to end, failing at once if the daemon dies.
fn wait_done_alive(sb: &Sandbox, daemon: &mut Daemon, name: &str) -> Job {
    wait_until(&format!("job {name} to end"), secs(60), || {
        if let Some(status) = daemon.try_status() {
            panic!("the daemon died ({status}) before job {name} ended");
        }
        sb.jobs_for("p", name).into_iter().find(Job::is_done)
    })
}

/// Drops `names` and checks that each one's job succeeded and the daemon
/// lives on.
fn drop_and_expect_success(sb: &Sandbox, daemon: &mut Daemon, names: &[String]) {
    for name in names {
        sb.drop_prompt("p", name, "print something\n");
    }
    for name in names {
        let job = wait_done_alive(sb, daemon, name);
        assert_eq!(
            job.state(),
            "succeeded",
            "job {name} ended {} ({:?})",
            job.state(),
            job.str_field("state_reason")
        );
    }
    assert!(daemon.is_running(), "the daemon exited");
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[test]
fn closed_stderr_never_kills_the_daemon_or_its_monitors() {
    let sb = Sandbox::new();
    sb.configure(&slow_printing_job(&sb));
    let (read, write) = pipe();
    let mut daemon = Daemon::spawn_with_stderr(&sb, &[], write.into());
    daemon.wait_ready(&sb, secs(20));
    // The reader goes away (a log shipper that exited): every log line of
    // the daemon and of its monitors now meets a broken pipe.
    drop(read);
    drop_and_expect_success(&sb, &mut daemon, &names("first", 4));
    // Still claiming after all that.
    drop_and_expect_success(&sb, &mut daemon, &names("later", 2));
}

#[test]
fn full_stderr_never_blocks_claims_or_jobs() {
    let sb = Sandbox::new();
    sb.configure(&slow_printing_job(&sb));
    // A reader that never reads: the pipe is full before the daemon starts.
    let (read, write) = small_pipe();
    fill(&write);
    // A short queue, so that the few lines a daemon logs overflow it.
    let mut daemon =
        Daemon::spawn_with_stderr(&sb, &[("JOBWARDEN_TEST_LOG_QUEUE", "4")], write.into());
    daemon.wait_ready(&sb, secs(20));
    drop_and_expect_success(&sb, &mut daemon, &names("stalled", 4));

    // The reader starts reading again: the daemon says what it dropped.
    let seen = Arc::new(Mutex::new(String::new()));
    drain_in_background(read, Arc::clone(&seen));
    wait_until("the daemon to report dropped log lines", secs(30), || {
        let text = seen.lock().expect("log text").clone();
        text.contains("dropped while stderr was closed or full")
            .then_some(())
    });
    drop_and_expect_success(&sb, &mut daemon, &names("drained", 1));
}

/// Reads `read` until every writer has closed it, appending to `seen`.
fn drain_in_background(read: OwnedFd, seen: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        let mut file = File::from(read);
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = file.read(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            seen.lock().expect("log text").push_str(&text);
        }
    });
}

/// How a command run into a pipe ended.
struct PipedRun {
    status: ExitStatus,
    stderr: String,
}

/// Runs `args` with stdout into a one-page pipe whose reader takes one
/// line (none when `lines` is 0) and then closes its end.
fn run_into_reader_taking(sb: &Sandbox, args: &[&str], lines: usize, tag: &str) -> PipedRun {
    let (read, write) = small_pipe();
    let err_path = sb.base.join(format!("piped-{tag}.stderr"));
    let mut cmd = sb.command(args);
    cmd.stdout(Stdio::from(write))
        .stderr(File::create(&err_path).expect("create stderr file"));
    let mut child = cmd.spawn().expect("spawn jobwarden");
    drop(cmd); // our copy of the write end
    take_lines(read, lines);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > secs(30) {
            let _ = child.kill();
            panic!("jobwarden {args:?} did not exit after its reader closed");
        }
        std::thread::sleep(millis(10));
    };
    PipedRun {
        status,
        stderr: fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// Reads `lines` lines from `read` byte by byte (so that nothing more is
/// taken from the pipe), then closes it.
fn take_lines(read: OwnedFd, lines: usize) {
    let mut file = File::from(read);
    let mut seen = 0;
    let mut byte = [0u8; 1];
    while seen < lines {
        match file.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => seen += 1,
            Ok(1) => {}
            _ => break,
        }
    }
}

/// A root with plenty to print: one real job with a long log (ending in
/// wide lines, for `show`'s tail) and a long event history, 120 finished copies of it, 20 running and 20 queued
/// ones (indexed by `history repair`), and a config with many variables.
/// Retention is set to remove every finished job (for `gc --dry-run`).
fn busy_root() -> (Sandbox, String) {
    let sb = Sandbox::new();
    let job = sb.script(
        "long",
        "i=0; while [ $i -lt 400 ]; do echo \"log line $i of a long job, long enough to fill a pipe\"; i=$((i+1)); done\n\
         wide=$(printf '%01500d' 0)\n\
         for j in 1 2 3 4 5 6 7 8 9 10; do echo \"wide line $j $wide\"; done",
    );
    let mut cfg = ConfigToml::new(&["/bin/sh", &job]);
    for i in 0..300 {
        cfg = cfg.env(&format!("JW_IT_VARIABLE_{i:03}"), "a value for config show");
    }
    sb.configure(&cfg);
    let mut daemon = Daemon::start(&sb);
    // A long prompt name: tables size their columns to what they hold, and
    // every listing must outgrow the pipe.
    let project = "a-project/with-a-long-name";
    sb.drop_prompt(project, "long", "print a lot\n");
    let real = sb.wait_done(project, "long", secs(60));
    assert_eq!(real.state(), "succeeded", "{:?}", real.record);
    daemon.sigterm();
    daemon.wait_exit(secs(20));

    lengthen_events(&real.dir.join("events.jsonl"), 200);
    for i in 0..160 {
        let state = match i {
            0..120 => None,
            120..140 => Some("running"),
            _ => Some("queued"),
        };
        clone_run(&sb, &real, i, state);
    }
    let repair = sb.run(&["history", "repair"]);
    assert_eq!(repair.code(), 0, "{repair:?}");
    sb.configure(&cfg.global("keep_runs", "0").global("keep_days", "0"));
    (sb, real.id)
}

/// Appends `n` copies of the last event, numbered on.
fn lengthen_events(path: &Path, n: u64) {
    let text = fs::read_to_string(path).expect("read events.jsonl");
    let last: Value = serde_json::from_str(text.lines().last().expect("an event")).expect("event");
    let first_seq = last["seq"].as_u64().expect("seq") + 1;
    let mut more = text.clone();
    for seq in first_seq..first_seq + n {
        let mut event = last.clone();
        event["seq"] = seq.into();
        more.push_str(&format!("{event}\n"));
    }
    fs::write(path, more).expect("write events.jsonl");
}

/// Copies the run folder of `real` under a new id (its last 12 digits
/// replaced by `i`), in `state` when given.
fn clone_run(sb: &Sandbox, real: &Job, i: usize, state: Option<&str>) {
    let id = format!("{}{i:012}", &real.id[..real.id.len() - 12]);
    let dir = sb.run_dir(&id);
    fs::create_dir_all(&dir).expect("create clone run folder");
    for entry in fs::read_dir(&real.dir).expect("read run folder").flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy run file");
        }
    }
    let mut record = real.record.clone();
    record["job_id"] = id.into();
    if let Some(state) = state {
        record["state"] = state.into();
        for key in ["finished_at", "exit_code"] {
            record[key] = Value::Null;
        }
    }
    fs::write(dir.join("job.json"), record.to_string()).expect("write clone job.json");
}

#[test]
fn every_command_exits_quietly_when_its_reader_closes_early() {
    let (sb, id) = busy_root();
    let commands: [&[&str]; 8] = [
        &["config", "show"],
        &["gc", "--dry-run"],
        &["jobs", "--limit", "1000"],
        &["events", &id],
        &["logs", &id],
        &["history", "list", "--limit", "1000"],
        &["show", &id],
        &["status"],
    ];
    for (n, args) in commands.iter().enumerate() {
        let full = sb.run(args);
        // No daemon runs on this root: `status` answers so with exit 3.
        let answer = if args[0] == "status" { 3 } else { 0 };
        assert_eq!(full.code(), answer, "{args:?} into a file: {full:?}");
        // Long enough that a reader taking one line breaks the pipe mid-way
        // (status is short by nature: the reader that is already gone
        // breaks it at the first line).
        if args[0] != "status" {
            assert!(
                full.stdout.len() > 2 * SMALL_PIPE,
                "{args:?} printed only {} bytes: the pipe would not break",
                full.stdout.len()
            );
        }
        for lines in [1, 0] {
            let run = run_into_reader_taking(&sb, args, lines, &format!("{n}-{lines}"));
            let what = format!("{args:?} into a reader that took {lines} line(s)");
            // Quiet (0) once a write met the closed pipe; the answer
            // itself if everything fitted in the pipe before it closed.
            assert!(
                [Some(0), Some(answer)].contains(&run.status.code()),
                "{what} ended {} with stderr:\n{}",
                run.status,
                run.stderr
            );
            for bad in ["panicked", "failed printing", "Broken pipe", "broken pipe"] {
                assert!(
                    !run.stderr.contains(bad),
                    "{what}: stderr says {bad:?}:\n{}",
                    run.stderr
                );
            }
        }
    }
}

/// Attempt 1 arms the monitor's injected fault (`$OUT/panic-now`) and
/// waits; later attempts disarm it and succeed.
const PANIC_ONCE: &str = r#"if [ "$JOBWARDEN_ATTEMPT" = 1 ]; then
  echo "$JOBWARDEN_JOB_ID" > "$OUT/id"
  touch "$OUT/panic-now"
  exec sleep 600
fi
rm -f "$OUT/panic-now""#;

#[test]
fn a_panicking_monitor_exits_on_a_full_stderr_and_its_job_is_requeued() {
    let sb = Sandbox::new();
    let job = sb.script("panic-once", PANIC_ONCE);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]));
    let trigger = sb.out().join("panic-now").display().to_string();
    // A reader that never reads: the monitor's panic report meets a full pipe.
    let (_read, write) = small_pipe();
    fill(&write);
    let env = [
        ("JOBWARDEN_TEST_FAULT", "monitor-heartbeat"),
        ("JOBWARDEN_TEST_FAULT_WHEN", trigger.as_str()),
    ];
    let mut daemon = Daemon::spawn_with_stderr(&sb, &env, write.into());
    daemon.wait_ready(&sb, secs(20));
    sb.drop_prompt("p", "panicky", "panic in your monitor\n");
    let first = wait_until("the first attempt to write its id", secs(30), || {
        let id = fs::read_to_string(sb.out().join("id")).ok()?;
        id.ends_with('\n').then(|| id.trim().to_owned())
    });
    let ended = sb.wait_id(
        &first,
        "the first attempt to end",
        secs(60),
        Job::is_terminal,
    );
    assert_eq!(ended.state(), "interrupted", "{:#}", ended.record);
    let retry = sb.wait_done_excluding("p", "panicky", std::slice::from_ref(&first), secs(60));
    assert_eq!(retry.state(), "succeeded", "{:#}", retry.record);
    assert_eq!(retry.int_field("attempt"), Some(2));
    assert!(daemon.is_running(), "the daemon lives on");
}

/// Every file under `dir` whose bytes contain one of `needles`.
fn files_containing(sb: &Sandbox, dir: &Path, needles: &[&str]) -> Vec<String> {
    sb.files_under(dir)
        .into_iter()
        .filter_map(|path| {
            let bytes = fs::read(&path).ok()?;
            let text = String::from_utf8_lossy(&bytes);
            needles
                .iter()
                .find(|n| text.contains(*n))
                .map(|n| format!("{} holds {n:?}", path.display()))
        })
        .collect()
}

#[test]
fn closed_standard_descriptors_never_send_log_lines_into_files() {
    let sb = Sandbox::new();
    sb.configure(&slow_printing_job(&sb));
    // Started as by a careless supervisor: no stdin, stdout or stderr at
    // all, so the first files the daemon opens would get numbers 0 to 2.
    let mut daemon = Daemon::spawn_with(&sb, &[], |cmd| {
        // SAFETY: close(2) is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                for fd in 0..=2 {
                    libc::close(fd);
                }
                Ok(())
            });
        }
    });
    daemon.wait_ready(&sb, secs(20));
    for fd in 0..=2 {
        let target = fs::read_link(format!("/proc/{}/fd/{fd}", daemon.pid));
        assert_eq!(
            target.ok().as_deref(),
            Some(Path::new("/dev/null")),
            "the daemon's fd {fd}"
        );
    }
    drop_and_expect_success(&sb, &mut daemon, &names("closed", 3));
    daemon.sigterm();
    daemon.wait_exit(secs(20));
    let spoiled = files_containing(&sb, &sb.root, &["daemon ready", " INFO ", " DEBUG "]);
    assert!(spoiled.is_empty(), "log text in files: {spoiled:#?}");
}
