//! Every file under the root is untrusted (DESIGN §13): a job runs with the
//! daemon's uid and may leave symlinks, FIFOs or swapped folders anywhere
//! under the root. Each case must end with a clear error or warning naming
//! the path: nothing followed, nothing hung.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, symlink};
use std::path::{Path, PathBuf};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::stat::Mode;

use crate::support::*;

const SECRET: &str = "TOPSECRET-d41d8cd9";

/// Removes a FIFO on drop, so that a failing test's sandbox dump (which
/// reads job files plainly) cannot block on it.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn mkfifo(path: &Path) -> RemoveOnDrop {
    let _ = fs::remove_file(path);
    nix::unistd::mkfifo(path, Mode::S_IRUSR | Mode::S_IWUSR).expect("mkfifo");
    RemoveOnDrop(path.to_path_buf())
}

/// A FIFO whose buffer is full, held open by the test: any writer blocks.
fn full_fifo(path: &Path) -> (RemoveOnDrop, fs::File) {
    let guard = mkfifo(path);
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open fifo read-write");
    fcntl(&f, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("nonblocking");
    while f.write(&[b'x'; 4096]).is_ok() {}
    (guard, f)
}

/// A finished job of `name` (project `p`), its daemon stopped.
fn finished_job(sb: &Sandbox, name: &str) -> Job {
    sb.configure(&ConfigToml::new(&["cat"]));
    let mut d = Daemon::start(sb);
    sb.drop_prompt("p", name, "hello\n");
    let job = sb.wait_done("p", name, secs(20));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    d.sigterm();
    d.wait_exit(secs(20));
    job
}

fn status_json(sb: &Sandbox) -> serde_json::Value {
    let out = sb.run(&["status", "--json"]);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("status --json: {e}: {out:?}"))
}

fn wait_watch(sb: &Sandbox, watch: &str) -> serde_json::Value {
    wait_until(
        &format!("status to say the inbox watch is {watch}"),
        secs(20),
        || {
            let s = status_json(sb);
            (s["daemon"]["watch"] == watch).then_some(s)
        },
    )
}

#[test]
fn archive_folder_symlinked_outside_the_root_is_never_written_through() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let outside = sb.base.join("outside");
    fs::create_dir_all(&outside).expect("outside");
    fs::create_dir_all(sb.root.join("archive/succeeded")).expect("archive");
    symlink(&outside, sb.root.join("archive/succeeded/p")).expect("symlink");
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "x", "keep me\n");
    let job = wait_until(
        "the job's record to say why it was not archived",
        secs(20),
        || {
            sb.jobs_for("p", "x")
                .into_iter()
                .find(|j| j.is_terminal() && j.record.get("archive_error").is_some())
        },
    );
    let why = job
        .str_field("archive_error")
        .unwrap_or_default()
        .to_owned();
    assert!(why.contains("is a symlink"), "{why}");
    assert!(
        why.contains("archive/succeeded/p"),
        "names the folder: {why}"
    );
    let written: Vec<_> = fs::read_dir(&outside).expect("ls outside").collect();
    assert!(written.is_empty(), "written outside the root: {written:?}");
    let held = sb
        .root
        .join(job.str_field("inbox_path").expect("the prompt's place"));
    assert_eq!(fs::read_to_string(&held).expect("prompt kept"), "keep me\n");
}

/// Move `dir` outside the root while it is watched, leave a symlink to it
/// in its place, and drop a prompt there: the old watch reports it under
/// the inbox path, and a claim must not follow the link.
fn swap_for_outside_symlink(sb: &Sandbox, dir: &Path) -> PathBuf {
    let outside = sb.base.join("outside");
    // Swap in one step (as a job could): a daemon that sees the folder go
    // makes it again at once, so a move-then-symlink would race with it.
    let link = dir.with_extension("swap");
    symlink(&outside, &link).expect("symlink beside the folder");
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        &link,
        nix::fcntl::AT_FDCWD,
        dir,
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    )
    .expect("exchange the folder and the symlink");
    fs::rename(&link, &outside).expect("move the folder out");
    fs::write(outside.join(".y.tmp"), "outside\n").expect("write");
    fs::rename(outside.join(".y.tmp"), outside.join("y.prompt.md")).expect("drop");
    outside
}

#[test]
fn inbox_replaced_by_a_symlink_is_refused_and_nothing_is_claimed_through_it() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let d = Daemon::start(&sb);
    sb.drop_prompt("", "first", "x\n");
    sb.wait_done("", "first", secs(20));
    let outside = swap_for_outside_symlink(&sb, &sb.inbox());
    let s = wait_watch(&sb, "refused");
    let why = s["daemon"]["watch_reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("is a symlink") && why.contains("inbox"),
        "{s:#}"
    );
    assert_never("the prompt outside the root to be claimed", secs(3), || {
        !sb.jobs_for("", "y").is_empty() || !outside.join("y.prompt.md").exists()
    });
    assert!(d.stderr().contains("is a symlink"), "a warning names it");
    // Fixed: a real folder again, claims resume.
    fs::remove_file(sb.inbox()).expect("remove the link");
    fs::create_dir(sb.inbox()).expect("a real inbox");
    wait_watch(&sb, "inotify");
    sb.drop_prompt("", "after", "x\n");
    sb.wait_done("", "after", secs(20));
}

#[test]
fn project_folder_replaced_by_a_symlink_is_never_claimed_through() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let d = Daemon::start(&sb);
    sb.drop_prompt("proj", "first", "x\n");
    sb.wait_done("proj", "first", secs(20));
    let outside = swap_for_outside_symlink(&sb, &sb.project_dir("proj"));
    assert_never("the prompt outside the root to be claimed", secs(3), || {
        !sb.jobs_for("proj", "y").is_empty() || !outside.join("y.prompt.md").exists()
    });
    wait_until("a warning naming the symlinked folder", secs(10), || {
        d.stderr().contains("inbox/proj is a symlink").then_some(())
    });
}

#[test]
fn job_log_and_events_symlinked_to_a_secret_are_never_read() {
    let sb = Sandbox::new();
    let job = finished_job(&sb, "x");
    let secret = sb.base.join("secret");
    let line =
        format!("{{\"seq\": 99, \"op\": \"{SECRET}\", \"ts\": \"2026-01-01T00:00:00.000Z\"}}\n");
    fs::write(&secret, line).expect("secret");
    for f in ["job.log", "events.jsonl"] {
        fs::remove_file(job.dir.join(f)).expect("rm");
        symlink(&secret, job.dir.join(f)).expect("symlink");
    }
    for args in [
        vec!["show", &job.id],
        vec!["show", "--json", &job.id],
        vec!["events", &job.id],
        vec!["events", "--json", &job.id],
        vec!["logs", &job.id],
        vec!["logs", "-f", &job.id],
        vec!["history", "repair"],
        vec!["history", "show", "p", "x"],
    ] {
        let out = sb.run(&args);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(
            !all.contains(SECRET),
            "{args:?} printed the secret: {out:?}"
        );
        if args[0] != "history" {
            assert!(all.contains("is a symlink"), "{args:?} says why: {out:?}");
        }
    }
}

#[test]
fn fifo_at_job_log_never_hangs_show_or_logs() {
    let sb = Sandbox::new();
    let job = finished_job(&sb, "x");
    let _fifo = mkfifo(&job.dir.join("job.log"));
    let show = sb.run(&["show", &job.id]);
    assert_eq!(show.code(), 0, "{show:?}");
    assert!(show.stderr.contains("is a FIFO"), "{show:?}");
    assert!(show.stdout.contains(&job.id), "{show:?}");
    let logs = sb.run(&["logs", &job.id]);
    assert_eq!(logs.code(), 2, "{logs:?}");
    assert!(logs.stderr.contains("job.log: is a FIFO"), "{logs:?}");
    let follow = sb.run(&["logs", "-f", &job.id]);
    assert_eq!(follow.code(), 0, "{follow:?}");
    assert!(follow.stderr.contains("is a FIFO"), "{follow:?}");
    assert!(follow.stderr.contains("succeeded"), "{follow:?}");
}

#[test]
fn fifo_at_job_json_never_hangs_gc_history_repair_or_daemon_start() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let id = "0190b6a0-0000-7000-8000-00000000f1f0";
    fs::create_dir_all(sb.run_dir(id)).expect("run dir");
    let _fifo = mkfifo(&sb.run_dir(id).join("job.json"));
    for args in [&["gc"][..], &["history", "repair"], &["jobs"], &["status"]] {
        let out = sb.run(args);
        assert!(
            out.code() != 2 || out.stderr.contains("FIFO"),
            "{args:?}: {out:?}"
        );
    }
    let d = Daemon::start(&sb);
    let aside = wait_until("the FIFO record to be moved aside", secs(10), || {
        fs::read_dir(sb.run_dir(id)).ok()?.flatten().find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("job.json.corrupt-")
        })
    });
    assert!(
        aside.file_type().expect("type").is_fifo(),
        "moved, not replaced"
    );
    assert!(d.stderr().contains("is a FIFO"), "the daemon says why");
    sb.drop_prompt("", "after", "x\n");
    assert_eq!(sb.wait_done("", "after", secs(20)).state(), "succeeded");
}

#[test]
fn fifo_at_events_jsonl_never_blocks_the_daemon() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", "while [ ! -e \"$OUT/go\" ]; do sleep 0.05; done");
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate]).global("max_jobs", "1"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("", "first", "x\n");
    sb.wait_state("", "first", "running", secs(20));
    sb.drop_prompt("", "second", "x\n");
    let second = sb.wait_state("", "second", "queued", secs(20));
    let (_fifo, _holder) = full_fifo(&second.dir.join("events.jsonl"));
    fs::write(second.dir.join("ABORT"), "stop\n").expect("abort");
    let second = sb.wait_state("", "second", "cancelled", secs(20));
    assert_eq!(second.state(), "cancelled");
    fs::write(sb.out().join("go"), "").expect("open the gate");
    sb.drop_prompt("", "third", "x\n");
    assert_eq!(sb.wait_done("", "third", secs(20)).state(), "succeeded");
}

#[test]
fn inbox_deleted_or_replaced_is_watched_again_at_once() {
    let sb = Sandbox::new();
    // Rescans are an hour apart: only a re-established watch claims fast.
    sb.configure(&ConfigToml::new(&["cat"]).global("rescan_interval", "\"1h\""));
    let d = Daemon::start(&sb);
    sb.drop_prompt("", "first", "x\n");
    sb.wait_done("", "first", secs(20));
    let rewatched = |n: usize| {
        wait_until("the watch to be re-established", secs(20), || {
            (d.stderr().matches("watch re-established").count() >= n).then_some(())
        })
    };

    fs::remove_dir_all(sb.inbox()).expect("delete the inbox");
    fs::create_dir_all(sb.inbox()).expect("make it again");
    rewatched(1);
    sb.drop_prompt("", "after-delete", "x\n");
    sb.wait_done("", "after-delete", secs(10));
    assert_eq!(status_json(&sb)["daemon"]["watch"], "inotify");

    let new = sb.root.join("inbox.new");
    fs::create_dir(&new).expect("new folder");
    fs::rename(sb.inbox(), sb.root.join("inbox.old")).expect("move the inbox away");
    fs::rename(&new, sb.inbox()).expect("replace it");
    rewatched(2);
    sb.drop_prompt("", "after-replace", "x\n");
    sb.wait_done("", "after-replace", secs(10));
    assert_eq!(status_json(&sb)["daemon"]["watch"], "inotify");
}

/// A folder outside the root holding one file of the test's: what a job
/// points its symlinks at. Returns it and its listing.
fn outside_folder(sb: &Sandbox) -> (PathBuf, Vec<String>) {
    let outside = sb.base.join("outside");
    fs::create_dir_all(&outside).expect("outside");
    fs::write(outside.join("mine.txt"), "the test's\n").expect("outside file");
    let listing = listing(&outside);
    (outside, listing)
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn run_folder_swapped_for_a_symlink_is_moved_aside_and_never_written_through() {
    let sb = Sandbox::new();
    let (outside, before) = outside_folder(&sb);
    let moved = sb.base.join("moved");
    let script = sb.script(
        "swap",
        &format!(
            // The monitor may make the folder again between the mv and
            // the ln (then `ln -T` fails): swap again until the link is in.
            "i=0\nuntil [ -L \"$JOBWARDEN_RUN_DIR\" ]; do\n  i=$((i+1)); [ $i -lt 50 ] || exit 9\n  mv \"$JOBWARDEN_RUN_DIR\" {moved}.$i && ln -sT {outside} \"$JOBWARDEN_RUN_DIR\"\ndone\nsleep 1\nexit 0",
            moved = q(&moved.to_string_lossy()),
            outside = q(&outside.to_string_lossy()),
        ),
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).unsandboxed());
    let d = Daemon::start(&sb);
    sb.drop_prompt("p", "swap", "x\n");
    let id = wait_until("the job to end in a real run folder", secs(30), || {
        let id = sb.jobs_for("p", "swap").pop()?.id;
        let real = fs::symlink_metadata(sb.run_dir(&id)).is_ok_and(|m| m.is_dir());
        (real && sb.job(&id)?.is_done()).then_some(id)
    });
    assert_eq!(listing(&outside), before, "written outside the root");
    let job = sb.job(&id).expect("record");
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let aside: Vec<_> = listing(&sb.runs())
        .into_iter()
        .filter(|n| n.starts_with(&format!("{id}.displaced-")))
        .collect();
    let runs = listing(&sb.runs());
    assert_eq!(
        aside.len(),
        1,
        "the symlink moved aside: {runs:?}\n{}",
        d.stderr()
    );
    let link = fs::read_link(sb.runs().join(&aside[0])).expect("still the job's symlink");
    assert_eq!(link, outside);
    assert!(d.stderr().contains("moved it aside"), "{}", d.stderr());
}

#[test]
fn archive_swapped_for_a_symlink_is_never_written_through() {
    let sb = Sandbox::new();
    let (outside, before) = outside_folder(&sb);
    sb.configure(&ConfigToml::new(&["cat"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "first", "x\n");
    sb.wait_done("p", "first", secs(20));
    let archive = sb.root.join("archive");
    fs::rename(&archive, sb.base.join("archive-moved")).expect("move archive out");
    symlink(&outside, &archive).expect("symlink in its place");
    sb.drop_prompt("p", "x", "keep me\n");
    let job = wait_until(
        "the record to say why it was not archived",
        secs(20),
        || {
            sb.jobs_for("p", "x")
                .into_iter()
                .find(|j| j.is_terminal() && j.record.get("archive_error").is_some())
        },
    );
    let why = job.str_field("archive_error").unwrap_or_default();
    assert!(
        why.contains("is a symlink") && why.contains("archive"),
        "{why}"
    );
    assert_eq!(listing(&outside), before, "written outside the root");
    let held = sb.root.join(job.str_field("inbox_path").expect("claimed"));
    assert_eq!(fs::read_to_string(&held).expect("prompt kept"), "keep me\n");
}

#[test]
fn runs_swapped_for_a_symlink_fails_the_claim_and_keeps_the_prompt() {
    let sb = Sandbox::new();
    let (outside, before) = outside_folder(&sb);
    sb.configure(&ConfigToml::new(&["cat"]));
    let d = Daemon::start(&sb);
    sb.drop_prompt("p", "first", "x\n");
    sb.wait_done("p", "first", secs(20));
    let runs = sb.runs();
    fs::rename(&runs, sb.base.join("runs-moved")).expect("move runs out");
    symlink(&outside, &runs).expect("symlink in its place");
    let prompt = sb.drop_prompt("p", "late", "x\n");
    wait_until("the daemon to name the refused folder", secs(20), || {
        let err = d.stderr();
        (err.contains("claim failed") && err.contains("runs: is a symlink")).then_some(())
    });
    assert_eq!(listing(&outside), before, "written outside the root");
    // Repaired: the prompt was never lost, and is claimed at the next rescan.
    fs::remove_file(&runs).expect("remove the link");
    fs::create_dir(&runs).expect("a real runs/");
    sb.wait_done("p", "late", secs(20));
    assert!(!prompt.exists(), "claimed from the inbox");
    assert_eq!(listing(&outside), before, "written outside the root");
}
