//! Storage refusing writes under the root. A full disk: jobs that end
//! meanwhile are recorded once space returns, output that cannot be written
//! is accounted for, the daemon keeps running and says so in `status`, and
//! a prompt that arrives while nothing can be written waits in the inbox
//! until it can be claimed. A read-only root: the daemon refuses to start,
//! naming it, and nothing in the inbox is lost.
//! Uses a small tmpfs mounted on the sandbox root (needs root privileges;
//! skipped with a printed reason where mounting is not allowed).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// A tmpfs mounted for the test; lazily unmounted on drop.
pub(crate) struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` (the caller skips; the reason is printed) where mounting is
    /// not allowed.
    pub(crate) fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: cannot mount a tmpfs here (needs root and mount rights)");
        }
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Tmpfs {
    /// Remount read-only (`ro = true`) or read-write. Fails while any file
    /// on it is open for writing.
    fn remount(&self, ro: bool) {
        let opts = if ro { "remount,ro" } else { "remount,rw" };
        let status = Command::new("mount")
            .args(["-o", opts])
            .arg(&self.0)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount -o {opts} {}", self.0.display());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `status --json`, parsed (exit 0 with a daemon, 3 without).
fn status(sb: &Sandbox) -> serde_json::Value {
    let out = sb.run(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_str(&out.stdout).expect("status --json is JSON");
    let answer = if st["daemon"]["alive"] == true { 0 } else { 3 };
    assert_eq!(out.code(), answer, "status: {}", out.stderr);
    st
}

/// Write zeros into `path` until the filesystem refuses.
fn fill(path: &Path) {
    let mut f = fs::File::create(path).expect("filler");
    for size in [64 * 1024, 4096, 512, 1] {
        let block = vec![0u8; size];
        while f.write_all(&block).is_ok() {}
    }
}

#[test]
fn a_full_disk_delays_records_and_claims_but_loses_nothing() {
    let sb = Sandbox::new();
    let Some(_mount) = Tmpfs::mount(&sb.root, "4m") else {
        return;
    };
    let gate = sb.script(
        "gate",
        r#"while [ ! -e "$OUT/release" ]; do sleep 0.05; done; echo "done, and this line is lost""#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate]));
    let d = Daemon::start(&sb);
    sb.drop_prompt("proj", "full", "x\n");
    let job = sb.wait_state("proj", "full", "running", secs(15));
    let stage = sb.root.join("stage");
    fs::create_dir_all(&stage).expect("stage");
    fs::write(stage.join("late.tmp"), "arrived while full\n").expect("staged prompt");

    fill(&sb.root.join("filler"));
    fs::write(sb.out().join("release"), "").expect("release");
    fs::rename(
        stage.join("late.tmp"),
        sb.inbox().join("proj/late.prompt.md"),
    )
    .expect("drop while full");
    assert_never(
        "the job's end shown in job.json while nothing can be written",
        millis(1500),
        || sb.view_is_terminal(&job.id),
    );
    // Between rescans it waits as `.prompt.md`; a rescan's retry holds it as
    // `.running.md` for an instant before putting it back.
    let waiting = |suffix: &str| sb.inbox().join(format!("proj/late.{suffix}.md")).exists();
    assert!(
        waiting("prompt") || waiting("running"),
        "the late prompt waits in the inbox: {:?}",
        sb.inbox_files()
    );
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.pid), None).is_ok(),
        "the daemon keeps running"
    );
    let full = wait_until("status reports the full disk", secs(10), || {
        Some(status(&sb)).filter(|s| s["storage"]["condition"] == "full")
    });
    assert_eq!(full["daemon"]["alive"], true, "{full:#}");
    let human = sb.run(&["status"]);
    assert!(
        human.stdout.contains("FULL") && human.stdout.contains("claims and job starts wait"),
        "{}",
        human.stdout
    );

    fs::remove_file(sb.root.join("filler")).expect("free space");
    let ended = wait_until(
        "the job's end recorded once space returns",
        secs(15),
        || sb.job(&job.id).filter(Job::is_done),
    );
    assert_eq!(ended.state(), "succeeded", "{:#}", ended.record);
    let reason = ended.str_field("state_reason").unwrap_or_default();
    assert!(
        reason.contains("bytes of its output could not be written to job.log"),
        "the lost output is accounted for: {reason:?}"
    );
    assert!(
        ended.ops().iter().any(|op| op == "output_lost"),
        "{:?}",
        ended.ops()
    );
    let late = sb.wait_done("proj", "late", secs(15));
    assert_eq!(late.state(), "succeeded", "{:#}", late.record);
    let shown = sb.run(&["history", "show", &job.id, "--json"]);
    assert_eq!(shown.code(), 0, "its ledger row exists: {}", shown.stderr);
    wait_until("status reports the storage ok again", secs(10), || {
        Some(status(&sb)).filter(|s| s["storage"]["condition"] == "ok")
    });
}

/// A monitor killed while the disk is full: its `interrupted` end is
/// recorded (and the prompt requeued) once space returns; a queued job whose
/// start could not be written meanwhile stays queued and runs then.
#[test]
fn ends_and_starts_blocked_by_a_full_disk_happen_when_space_returns() {
    let sb = Sandbox::new();
    let Some(_mount) = Tmpfs::mount(&sb.root, "4m") else {
        return;
    };
    let gate = sb.script(
        "gate",
        r#"while [ ! -e "$OUT/release" ]; do sleep 0.05; done; echo ran >> "$OUT/runs.$JOBWARDEN_JOB_ID""#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate]).global("max_jobs", "1"));
    let d = Daemon::start(&sb);
    sb.drop_prompt("proj", "first", "x\n");
    let first = sb.wait_state("proj", "first", "running", secs(15));
    sb.drop_prompt("proj", "second", "y\n");
    let second = sb.wait_state("proj", "second", "queued", secs(15));

    fill(&sb.root.join("filler"));
    let monitor = first.int_field("monitor_pid").expect("monitor pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::SIGKILL,
    )
    .expect("kill the monitor");
    wait_until("status reports the full disk", secs(10), || {
        Some(status(&sb)).filter(|s| s["storage"]["condition"] == "full")
    });
    assert_never(
        "anything recorded or started while full",
        millis(1000),
        || {
            sb.view_is_terminal(&first.id)
                || sb.job(&second.id).is_some_and(|j| j.state() != "queued")
        },
    );

    fs::remove_file(sb.root.join("filler")).expect("free space");
    fs::write(sb.out().join("release"), "").expect("release");
    let interrupted = wait_until("the dead monitor's job recorded", secs(15), || {
        sb.job(&first.id).filter(|j| j.is_terminal())
    });
    assert_eq!(
        interrupted.state(),
        "interrupted",
        "{:#}",
        interrupted.record
    );
    let second = wait_until("the queued job ran", secs(15), || {
        sb.job(&second.id).filter(Job::is_done)
    });
    assert_eq!(second.state(), "succeeded", "{:#}", second.record);
    let retried =
        sb.wait_done_excluding("proj", "first", std::slice::from_ref(&first.id), secs(20));
    assert_eq!(retried.state(), "succeeded", "{:#}", retried.record);
    for job in [&second.id, &retried.id] {
        let runs = fs::read_to_string(sb.out().join(format!("runs.{job}"))).expect("ran");
        assert_eq!(runs, "ran\n", "job {job} ran exactly once");
    }
    let log = d.stderr();
    assert_eq!(
        log.matches("storage refuses writes").count(),
        1,
        "the condition is reported once:\n{log}"
    );
    assert_eq!(log.matches("accepts writes again").count(), 1, "{log}");
}

/// A read-only root: the daemon refuses to start, naming the root and what
/// to do; `status` says so; a prompt left in the inbox is claimed once the
/// root is writable again.
#[test]
fn a_read_only_root_is_refused_clearly_and_its_inbox_kept() {
    let sb = Sandbox::new();
    let Some(mount) = Tmpfs::mount(&sb.root, "4m") else {
        return;
    };
    sb.configure(&ConfigToml::new(&["/bin/cat"]));
    let mut d = Daemon::start(&sb);
    d.sigterm();
    assert!(d.wait_exit(secs(10)).success(), "{}", d.stderr());
    sb.drop_prompt("proj", "kept", "still here\n");
    mount.remount(true);

    let refused = sb.run(&["daemon"]);
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    let root = sb.root.display().to_string();
    assert!(
        refused.stderr.contains(&root)
            && refused.stderr.contains("read-only")
            && refused.stderr.contains("remount it read-write"),
        "{}",
        refused.stderr
    );
    let st = status(&sb);
    assert_eq!(st["storage"]["condition"], "read_only", "{st:#}");
    assert_eq!(st["daemon"]["alive"], false, "{st:#}");
    let jobs = sb.run(&["jobs"]);
    assert_eq!(jobs.code(), 0, "read from a snapshot: {jobs:?}");
    assert!(
        jobs.stdout
            .lines()
            .any(|l| l.contains("proj/kept") && l.contains("waiting")),
        "the prompt kept in the inbox is listed: {jobs:?}"
    );

    mount.remount(false);
    let _d = Daemon::start(&sb);
    let kept = sb.wait_done("proj", "kept", secs(15));
    assert_eq!(kept.state(), "succeeded", "{:#}", kept.record);
    assert!(kept.log().contains("still here"), "{}", kept.log());
}
