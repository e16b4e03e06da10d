//! Nothing a job can write makes the daemon run, kill or lose the wrong
//! thing: processes are signalled only when proven ours, a live monitor's
//! job is never requeued, the ledger is a second witness of an attempt's
//! end, and a job's workdir is not where its monitor keeps its records.

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::*;

/// Appends its job's name to `$OUT/ran`, then waits for `$OUT/release`.
const GATED: &str = r#"echo "$JOBWARDEN_JOB_ID" > "$OUT/id"
echo "$JOBWARDEN_NAME" >> "$OUT/ran"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#;

fn release(sb: &Sandbox) {
    fs::write(sb.out().join("release"), "").expect("release file");
}

/// The id the job script wrote to `$OUT/id`.
fn written_id(sb: &Sandbox) -> String {
    wait_until("the job to write its id", secs(15), || {
        let id = fs::read_to_string(sb.out().join("id")).ok()?;
        id.ends_with('\n').then(|| id.trim().to_owned())
    })
}

/// Stop `daemon` (its jobs stay with their monitors) and start another.
fn restart(sb: &Sandbox, daemon: &mut Daemon) -> Daemon {
    daemon.sigterm();
    assert_eq!(
        daemon.wait_exit(secs(10)).code(),
        Some(0),
        "{}",
        daemon.stderr()
    );
    Daemon::start(sb)
}

/// A process group whose leader is gone and whose one member, a `sleep`
/// that has nothing to do with jobwarden, lives on. Killed on drop.
struct Bystander {
    pgid: i32,
    pid: i32,
}

impl Bystander {
    fn start() -> Self {
        let leader = Command::new("/bin/sh")
            .args(["-c", "sleep 600 >/dev/null 2>&1 & echo $!"])
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("start the bystander");
        let pgid = leader.id() as i32;
        let out = leader.wait_with_output().expect("bystander's leader");
        let pid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the bystander's pid");
        assert!(pid_alive(pid), "the bystander runs");
        Bystander { pgid, pid }
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
    }
}

fn start_time_of(pid: i32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 1..];
    rest.split_whitespace()
        .nth(19)
        .expect("field 22")
        .parse()
        .expect("number")
}

#[test]
fn a_forged_record_and_lock_never_get_a_bystander_killed() {
    let sb = Sandbox::new();
    let script = sb.script("quick", "echo ok");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let mut daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "real", "x\n");
    let real = sb.wait_done("proj", "real", secs(15));
    daemon.sigterm();
    daemon.wait_exit(secs(10));

    // A record for a job that never was, naming the bystander's group and,
    // as its monitor, the bystander itself, with a lock someone holds.
    let bystander = Bystander::start();
    let id = "forged-1";
    let dir = sb.run_dir(id);
    fs::create_dir_all(&dir).expect("forged run dir");
    let mut rec: Value = real.record.clone();
    for (k, v) in [
        ("job_id", json!(id)),
        ("name", json!("forged")),
        ("state", json!("running")),
        ("inbox_path", json!("inbox/proj/forged.running.md")),
        ("monitor_pid", json!(bystander.pid)),
        ("monitor_start_time", json!(start_time_of(bystander.pid))),
        ("pid", json!(bystander.pgid)),
        ("pgid", json!(bystander.pgid)),
    ] {
        rec[k] = v;
    }
    for k in ["archive_path", "outcome", "disposition", "finished_at"] {
        rec[k] = Value::Null;
    }
    fs::write(
        dir.join("job.json"),
        serde_json::to_vec(&rec).expect("json"),
    )
    .expect("forge");
    fs::write(sb.project_dir("proj").join("forged.running.md"), "forged\n").expect("claim");
    // A stranger holds the monitor lock: the forged run folder itself.
    let lock = fs::File::open(&dir).expect("run folder");
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .expect("hold the forged lock");

    let _daemon = Daemon::start(&sb);
    drop(held);
    let forged = sb.wait_id(id, "the forged job to be ended", secs(15), Job::is_terminal);
    assert_eq!(forged.state(), "interrupted", "{:#}", forged.record);
    assert_never("the bystander being killed", secs(2), || {
        !pid_alive(bystander.pid)
    });
}

/// Two records for jobs that never were, each naming as the prompt it
/// claimed another job's archived prompt (one under another prompt's name,
/// one under that prompt's own name), and a bystander as its monitor and
/// group: ended `interrupted` at start, the archived prompt stays where it
/// is, untouched, and nothing runs again.
#[test]
fn a_forged_record_naming_an_archived_prompt_never_moves_it_or_runs_it_again() {
    let sb = Sandbox::new();
    let script = sb.script("count", r#"echo "$JOBWARDEN_NAME" >> "$OUT/ran""#);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let mut daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "hello", "once is enough\n");
    let real = sb.wait_done("proj", "hello", secs(15));
    assert_eq!(real.state(), "succeeded", "{:#}", real.record);
    daemon.sigterm();
    daemon.wait_exit(secs(10));
    let archive_path = real.str_field("archive_path").expect("archive path");
    let archived = sb.root.join(archive_path);
    let bytes = fs::read(&archived).expect("the archived prompt");

    let bystander = Bystander::start();
    let forged = [("forged-1", "forged"), ("forged-2", "hello")];
    for (id, name) in forged {
        let dir = sb.run_dir(id);
        fs::create_dir_all(&dir).expect("forged run dir");
        let mut rec: Value = real.record.clone();
        for (k, v) in [
            ("job_id", json!(id)),
            ("name", json!(name)),
            ("state", json!("running")),
            ("inbox_path", json!(archive_path)),
            ("monitor_pid", json!(bystander.pid)),
            ("monitor_start_time", json!(start_time_of(bystander.pid))),
            ("pid", json!(bystander.pgid)),
            ("pgid", json!(bystander.pgid)),
        ] {
            rec[k] = v;
        }
        for k in ["archive_path", "outcome", "disposition", "finished_at"] {
            rec[k] = Value::Null;
        }
        fs::write(
            dir.join("job.json"),
            serde_json::to_vec(&rec).expect("json"),
        )
        .expect("forge");
    }

    let _daemon = Daemon::start(&sb);
    for (id, _) in forged {
        let job = sb.wait_id(id, "the forged job to be ended", secs(15), |j| {
            j.is_terminal() && j.str_field("disposition").is_some()
        });
        assert_eq!(job.state(), "interrupted", "{:#}", job.record);
        assert_eq!(job.record["inbox_path"], Value::Null, "{:#}", job.record);
        assert_eq!(job.record["archive_path"], Value::Null, "{:#}", job.record);
        assert_eq!(
            job.str_field("disposition"),
            Some("missing"),
            "{:#}",
            job.record
        );
        let why = job.str_field("archive_error").expect("why nothing moved");
        assert!(why.contains(archive_path), "{why}");
    }
    assert_never("the archived prompt running again", millis(1500), || {
        sb.ran_lines().len() > 1
    });
    assert_eq!(sb.ran_lines(), vec!["hello"]);
    assert_eq!(fs::read(&archived).expect("still archived"), bytes);
    assert_eq!(sb.jobs().len(), 3, "no attempt beyond the forged records");
    let waiting = names_in_inbox(&sb, "proj");
    assert!(waiting.is_empty(), "nothing put back: {waiting:?}");
    assert!(pid_alive(bystander.pid), "the bystander lives");
}

/// The files in the inbox folder of `project`.
fn names_in_inbox(sb: &Sandbox, project: &str) -> Vec<String> {
    fs::read_dir(sb.project_dir(project))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn garbage_over_a_live_jobs_record_neither_requeues_nor_reruns_it() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    // Heartbeats far apart: the garbage is still there when the new
    // daemon looks.
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).global("heartbeat_interval", "\"2s\""));
    let mut daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "once", "run me once\n");
    let id = written_id(&sb);
    daemon.sigterm();
    daemon.wait_exit(secs(10));
    fs::write(sb.run_dir(&id).join("job.json"), "{ not a record").expect("garbage");

    let _daemon = Daemon::start(&sb);
    let record = sb.run_dir(&id).join("job.json");
    wait_until("the monitor to write the record again", secs(15), || {
        let rec: Value = serde_json::from_slice(&fs::read(&record).ok()?).ok()?;
        (rec["state"] == "running").then_some(())
    });
    let restored = sb.job(&id).expect("the record");
    assert!(
        restored.ops().iter().any(|o| o == "adopted"),
        "{:?}",
        restored.ops()
    );
    release(&sb);
    let done = sb.wait_id(&id, "the job to end", secs(15), Job::is_done);
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_never("another run of the prompt", millis(1500), || {
        sb.ran_lines().len() > 1
    });
    assert_eq!(sb.ran_lines(), vec!["once"]);
    assert_eq!(sb.jobs().len(), 1, "no other job was created");
}

#[test]
fn an_ended_attempt_edited_back_to_running_is_not_run_again() {
    let sb = Sandbox::new();
    let script = sb.script("count", r#"echo "$JOBWARDEN_NAME" >> "$OUT/ran""#);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let mut daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "done", "once is enough\n");
    let job = sb.wait_done("proj", "done", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    daemon.sigterm();
    daemon.wait_exit(secs(10));
    let mut rec = job.record.clone();
    rec["state"] = json!("running");
    fs::write(
        job.dir.join("job.json"),
        serde_json::to_vec(&rec).expect("json"),
    )
    .expect("edit");

    let _daemon = Daemon::start(&sb);
    let restored = sb.wait_id(
        &job.id,
        "the record restored from the ledger",
        secs(15),
        |j| j.state() != "running",
    );
    assert_eq!(restored.state(), "succeeded", "{:#}", restored.record);
    assert_never("the prompt running again", millis(1500), || {
        sb.ran_lines().len() > 1
    });
    assert_eq!(sb.jobs().len(), 1, "no other attempt");
    let archived = sb
        .root
        .join(restored.str_field("archive_path").expect("archive path"));
    assert!(archived.is_file(), "{} is archived", archived.display());
}

#[test]
fn a_job_that_removes_its_run_folder_succeeds_with_its_records_back() {
    let sb = Sandbox::new();
    let script = sb.script(
        "vandal",
        r#"echo "$JOBWARDEN_JOB_ID" > "$OUT/id"
rm -rf "$JOBWARDEN_RUN_DIR"
while [ ! -e "$JOBWARDEN_RUN_DIR/job.json" ]; do sleep 0.05; done
echo "$JOBWARDEN_NAME" >> "$OUT/ran"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let mut daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "vandal", "remove your run folder\n");
    let id = written_id(&sb);
    wait_until("the monitor to put the record back", secs(15), || {
        (!sb.ran_lines().is_empty()).then_some(())
    });
    // The monitor locked the folder it made again.
    let monitor = sb
        .job(&id)
        .and_then(|j| j.int_field("monitor_pid"))
        .expect("the record names its monitor") as i32;
    wait_until("the monitor to lock its new run folder", secs(15), || {
        jobwarden_sys::procfs::flock_holders(&sb.run_dir(&id))
            .ok()
            .filter(|holders| holders.contains(&monitor))
            .map(drop)
    });
    // A new daemon judges the job by its monitor, not by the files.
    let _daemon = restart(&sb, &mut daemon);
    release(&sb);
    let done = sb.wait_id(&id, "the job to end", secs(15), Job::is_done);
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(sb.ran_lines(), vec!["vandal"]);
    assert_eq!(sb.jobs().len(), 1);
}

#[test]
fn a_job_that_removes_its_run_folder_keeps_its_later_output_in_the_log() {
    let sb = Sandbox::new();
    let script = sb.script(
        "vandal",
        r#"echo "$JOBWARDEN_JOB_ID" > "$OUT/id"
echo "before the folder went"
until grep -q "before the folder went" "$JOBWARDEN_RUN_DIR/job.log"; do sleep 0.05; done
rm -rf "$JOBWARDEN_RUN_DIR"
while [ ! -e "$JOBWARDEN_RUN_DIR/job.json" ]; do sleep 0.05; done
echo "after the folder came back""#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).unsandboxed());
    let _daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "vandal", "remove your run folder\n");
    let id = written_id(&sb);
    let done = sb.wait_id(&id, "the job to end", secs(30), Job::is_done);
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    let logs = sb.run(&["logs", &id]);
    assert_eq!(logs.code(), 0, "{logs:?}");
    assert!(
        logs.stdout.contains("after the folder came back\n"),
        "{}",
        logs.stdout
    );
    assert!(
        logs.stdout
            .contains("job.log was removed or replaced while the job ran")
            && logs
                .stdout
                .contains("bytes of output written before this line were lost"),
        "{}",
        logs.stdout
    );
    assert!(
        !logs.stdout.contains("before the folder went"),
        "{}",
        logs.stdout
    );
    let log_bytes = done.int_field("log_bytes").expect("log_bytes") as u64;
    assert!(
        log_bytes > done.log_len(),
        "log_bytes counts what went with the old file too: {log_bytes}"
    );
}

#[test]
fn a_job_that_empties_its_workdir_destroys_nothing_of_the_monitors() {
    let sb = Sandbox::new();
    let script = sb.script(
        "tidy",
        r#"echo "$JOBWARDEN_JOB_ID" > "$OUT/id"
pwd -P > "$OUT/pwd"
rm -rf ./*
echo "$JOBWARDEN_NAME" >> "$OUT/ran"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let mut daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "tidy", "clean up your workdir\n");
    let id = written_id(&sb);
    wait_until("the job to empty its workdir", secs(15), || {
        (!sb.ran_lines().is_empty()).then_some(())
    });
    let _daemon = restart(&sb, &mut daemon);
    release(&sb);
    let done = sb.wait_id(&id, "the job to end", secs(15), Job::is_done);
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    let run_dir = sb.run_dir(&id);
    let pwd = fs::read_to_string(sb.out().join("pwd")).expect("pwd");
    assert_ne!(
        pwd.trim(),
        run_dir.to_string_lossy(),
        "the workdir is not the run folder"
    );
    for kept in ["prompt.md", "events.jsonl", "job.log"] {
        assert!(run_dir.join(kept).is_file(), "{kept} survived");
    }
    assert!(
        done.ops().iter().any(|o| o == "started"),
        "{:?}",
        done.ops()
    );
}

/// Attempt 1 holds 1 GiB in its leader (slow to exit once killed) and a
/// child in its group; attempt 2 just succeeds.
const HEAVY: &str = r#"if [ "$JOBWARDEN_ATTEMPT" != 1 ]; then echo "$JOBWARDEN_ATTEMPT" >> "$OUT/ran"; exit 0; fi
exec python3 -c '
import os, subprocess, time
held = b"\x01" * (1 << 30)
child = subprocess.Popen(["sleep", "600"])
with open(os.environ["OUT"] + "/pids.tmp", "w") as f:
    f.write("%d %d\n" % (os.getpid(), child.pid))
os.rename(os.environ["OUT"] + "/pids.tmp", os.environ["OUT"] + "/pids")
time.sleep(600)
'"#;

#[test]
fn a_killed_monitors_memory_heavy_job_is_killed_and_requeued() {
    let sb = Sandbox::new();
    let script = sb.script("heavy", HEAVY);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).unsandboxed());
    let _daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "heavy", "hold a lot of memory\n");
    let pids: Vec<i32> = wait_until("the job to hold its memory", secs(60), || {
        let text = fs::read_to_string(sb.out().join("pids")).ok()?;
        Some(
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect(),
        )
    });
    let first = sb.wait_state("proj", "heavy", "running", secs(15));
    let pgid = first.int_field("pgid").expect("pgid") as i32;
    let monitor = first.int_field("monitor_pid").expect("monitor_pid") as i32;
    kill(Pid::from_raw(monitor), Signal::SIGKILL).expect("SIGKILL the monitor");

    let ended = sb.wait_id(
        &first.id,
        "the first attempt to end",
        secs(90),
        Job::is_terminal,
    );
    assert_eq!(ended.state(), "interrupted", "{:#}", ended.record);
    assert_eq!(
        ended.str_field("disposition"),
        Some("requeued"),
        "{:#}",
        ended.record
    );
    let second = sb.wait_job_where("attempt 2 to end", "proj", "heavy", &[], secs(30), |j| {
        j.int_field("attempt") == Some(2) && j.is_done()
    });
    assert_eq!(second.state(), "succeeded", "{:#}", second.record);
    for pid in pids {
        assert!(
            !pid_alive(pid),
            "process {pid} of the first attempt is gone"
        );
    }
    assert!(group_members(pgid).is_empty(), "its group is gone");
}
