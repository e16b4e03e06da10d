//! The daemon's monitors: one started ahead of need, handed the next job,
//! proven by its monitor lock after a daemon restart, replaced when it dies
//! or the config is reloaded, gone when the daemon stops; a monitor whose
//! job ended takes the next one, and the idle ones beyond one retire.

use std::fs;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::*;

/// Waits for `$OUT/release-<name>`, after saying it started.
const GATED: &str = r#"echo "$1" >> "$OUT/ran"
while [ ! -e "$OUT/release-$1" ]; do sleep 0.05; done"#;

/// Pids of the monitors under this sandbox's root that were started
/// ahead of their job (busy or waiting).
fn spares(sb: &Sandbox) -> Vec<i32> {
    let root = sb.root.display().to_string();
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let argv: Vec<String> = raw
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let under_root = argv.windows(2).any(|w| w[0] == "--root" && w[1] == root);
        let spare = argv
            .windows(2)
            .any(|w| w[0] == "monitor" && w[1] == "--spare");
        if under_root && spare && pid_alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// The one waiting spare, besides `other_than` (a former spare that took
/// a job keeps its command line).
fn one_spare(sb: &Sandbox, other_than: Option<i32>) -> i32 {
    wait_until("one spare monitor", secs(10), || {
        let waiting: Vec<i32> = spares(sb)
            .into_iter()
            .filter(|&p| Some(p) != other_than)
            .collect();
        match waiting.as_slice() {
            [pid] => Some(*pid),
            _ => None,
        }
    })
}

fn release(sb: &Sandbox, name: &str) {
    fs::write(sb.out().join(format!("release-{name}")), "").expect("release file");
}

#[test]
fn the_spare_becomes_the_jobs_monitor_and_survives_a_daemon_restart_as_its_monitor() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let mut first = Daemon::start(&sb);
    let spare = one_spare(&sb, None);

    sb.drop_prompt("proj", "a", "x\n");
    let a = sb.wait_state("proj", "a", "running", secs(15));
    assert_eq!(
        a.record["monitor_pid"].as_i64(),
        Some(i64::from(spare)),
        "the spare took the job: {:#}",
        a.record
    );
    // Another is made ready for the next job.
    let next = one_spare(&sb, Some(spare));

    // kill -9: the waiting spare sees its stdin close and leaves; the
    // spare that became a's monitor goes on, and the next daemon proves
    // it by the lock it holds (its command line names no job).
    kill(Pid::from_raw(first.pid), Signal::SIGKILL).expect("kill the daemon");
    first.wait_exit(secs(5));
    wait_until("the waiting spare to leave", secs(10), || {
        (!pid_alive(next)).then_some(())
    });
    let _second = Daemon::start(&sb);
    wait_until("a adopted", secs(10), || {
        let job = sb.job(&a.id)?;
        job.ops().iter().any(|o| o == "adopted").then_some(())
    });
    assert_eq!(sb.job(&a.id).expect("a").state(), "running");
    release(&sb, "a");
    let done = sb.wait_done("proj", "a", secs(15));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(sb.ran_lines(), ["a"], "ran exactly once");
    assert_eq!(sb.jobs_for("proj", "a").len(), 1);
}

#[test]
fn a_spare_that_died_waiting_is_replaced_and_the_job_still_runs_once() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    let spare = one_spare(&sb, None);
    kill(Pid::from_raw(spare), Signal::SIGKILL).expect("kill the spare");
    wait_until("the spare gone", secs(5), || {
        (!pid_alive(spare)).then_some(())
    });

    sb.drop_prompt("proj", "b", "x\n");
    let b = sb.wait_state("proj", "b", "running", secs(15));
    assert_ne!(b.record["monitor_pid"].as_i64(), Some(i64::from(spare)));
    release(&sb, "b");
    let done = sb.wait_done("proj", "b", secs(15));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(sb.ran_lines(), ["b"]);
    wait_until("monitors waiting for the next job", secs(10), || {
        let waiting = spares(&sb);
        (!waiting.is_empty() && !waiting.contains(&spare)).then_some(())
    });
}

#[test]
fn a_reload_retires_the_spare_and_a_stop_leaves_none() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let mut d = Daemon::start(&sb);
    let old = one_spare(&sb, None);

    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "2"));
    let out = sb.run(&["reload"]);
    assert_eq!(out.code(), 0, "{out:?}");
    wait_until("the old spare to leave", secs(10), || {
        (!pid_alive(old)).then_some(())
    });
    one_spare(&sb, Some(old));

    d.sigterm();
    assert_eq!(d.wait_exit(secs(10)).code(), Some(0), "{}", d.stderr());
    wait_until("no spare left", secs(10), || {
        spares(&sb).is_empty().then_some(())
    });
}

#[test]
fn a_monitor_whose_job_ended_takes_the_next_job() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "a", "x\n");
    sb.wait_state("proj", "a", "running", secs(15));
    release(&sb, "a");
    let a = sb.wait_done("proj", "a", secs(15));
    assert_eq!(a.state(), "succeeded", "{:#}", a.record);
    wait_monitor_released(&sb, &a.id, secs(10));
    let monitor = a.int_field("monitor_pid").expect("monitor_pid");
    assert!(pid_alive(monitor as i32), "it waits for another job");

    sb.drop_prompt("proj", "b", "x\n");
    let b = sb.wait_state("proj", "b", "running", secs(15));
    assert_eq!(
        b.int_field("monitor_pid"),
        Some(monitor),
        "the monitor that ended a job last took b: {:#}",
        b.record
    );
    release(&sb, "b");
    let b = sb.wait_done("proj", "b", secs(15));
    assert_eq!(b.state(), "succeeded", "{:#}", b.record);
    assert_eq!(sb.ran_lines(), ["a", "b"]);
    assert_eq!(sb.jobs().len(), 2);
}

#[test]
fn a_monitor_busy_across_a_reload_leaves_after_its_job() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "a", "x\n");
    let a = sb.wait_state("proj", "a", "running", secs(15));
    let monitor = a.int_field("monitor_pid").expect("monitor_pid") as i32;

    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "3"));
    let out = sb.run(&["reload"]);
    assert_eq!(out.code(), 0, "{out:?}");
    release(&sb, "a");
    let a = sb.wait_done("proj", "a", secs(15));
    assert_eq!(a.state(), "succeeded", "{:#}", a.record);
    // It holds the old config: it is not given another job.
    wait_until("the monitor of the old config to leave", secs(10), || {
        (!pid_alive(monitor)).then_some(())
    });
    sb.drop_prompt("proj", "b", "x\n");
    let b = sb.wait_state("proj", "b", "running", secs(15));
    assert_ne!(b.int_field("monitor_pid"), Some(i64::from(monitor)));
    release(&sb, "b");
    assert_eq!(sb.wait_done("proj", "b", secs(15)).state(), "succeeded");
}

#[test]
fn idle_monitors_beyond_one_retire() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script, "{name}"])
            .global("max_jobs", "3")
            .global("heartbeat_interval", "\"1s\""),
    );
    let _d = Daemon::start(&sb);
    for name in ["a", "b", "c"] {
        sb.drop_prompt("proj", name, "x\n");
    }
    for name in ["a", "b", "c"] {
        sb.wait_state("proj", name, "running", secs(15));
    }
    for name in ["a", "b", "c"] {
        release(&sb, name);
    }
    for name in ["a", "b", "c"] {
        let job = sb.wait_done("proj", name, secs(15));
        wait_monitor_released(&sb, &job.id, secs(10));
    }
    assert!(spares(&sb).len() >= 3, "{:?}", spares(&sb));
    // Ten seconds idle, then a heartbeat tick retires all but one.
    wait_until("one idle monitor left", secs(30), || {
        (spares(&sb).len() == 1).then_some(())
    });
    sb.drop_prompt("proj", "d", "x\n");
    release(&sb, "d");
    assert_eq!(sb.wait_done("proj", "d", secs(15)).state(), "succeeded");
}

/// The state job `id`'s row in the job index holds (read from the
/// ledger file, as a reader of the index would).
fn indexed_state(sb: &Sandbox, id: &str) -> Option<String> {
    let db = rusqlite::Connection::open(sb.root.join("ledger.db")).ok()?;
    db.query_row("SELECT state FROM jobs WHERE id = ?1", [id], |r| r.get(0))
        .ok()
}

#[test]
fn a_running_job_is_indexed_by_the_daemon_when_its_monitor_reports_it() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    // The start-up check indexes what it finds stale: it must be over.
    wait_check_done(&sb);
    sb.drop_prompt("proj", "a", "x\n");
    let a = sb.wait_state("proj", "a", "running", secs(15));
    // The index says `queued` until the monitor's report reaches the
    // daemon (a monitor with a daemon writes no index row itself).
    wait_until("the index to say a runs", secs(10), || {
        (indexed_state(&sb, &a.id).as_deref() == Some("running")).then_some(())
    });
    release(&sb, "a");
    assert_eq!(sb.wait_done("proj", "a", secs(15)).state(), "succeeded");
    assert_eq!(indexed_state(&sb, &a.id).as_deref(), Some("succeeded"));
}

#[test]
fn a_monitor_whose_daemon_is_gone_indexes_its_running_job_itself() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let mut held = Paused::start(&sb, "monitor-index", "release-index");
    wait_check_done(&sb);
    sb.drop_prompt("proj", "a", "x\n");
    held.wait_reached("the monitor held before its report", secs(15));
    let id = sb.jobs().into_iter().next().expect("the job").id;
    assert_eq!(
        indexed_state(&sb, &id).as_deref(),
        Some("queued"),
        "not told yet"
    );
    kill(Pid::from_raw(held.daemon.pid), Signal::SIGKILL).expect("kill the daemon");
    held.daemon.wait_exit(secs(5));
    held.release();
    wait_until("the monitor to index a itself", secs(10), || {
        (indexed_state(&sb, &id).as_deref() == Some("running")).then_some(())
    });
    release(&sb, "a");
    let a = sb.wait_done("proj", "a", secs(15));
    assert_eq!(a.state(), "succeeded", "{:#}", a.record);
    let monitor = a.int_field("monitor_pid").expect("monitor_pid") as i32;
    wait_until("the monitor to finish and leave", secs(10), || {
        (!pid_alive(monitor)).then_some(())
    });
    assert_eq!(wait_row(&sb, &a.id)["outcome"], "success");
}

/// Says something on each stream, then ends as it is told.
const TALKS: &str = r#"echo "out-$1"; echo "err-$1" >&2"#;

#[test]
fn an_end_handed_over_to_the_daemon_keeps_its_tails_and_paths() {
    let sb = Sandbox::new();
    let script = sb.script("talks", TALKS);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let d = Daemon::start(&sb);
    sb.drop_prompt("proj", "a", "x\n");
    let a = sb.wait_done("proj", "a", secs(15));
    assert_eq!(a.state(), "succeeded", "{:#}", a.record);
    let row = wait_row(&sb, &a.id);
    assert_eq!(row["outcome"], "success", "{row:#}");
    assert_eq!(row["source"], "daemon", "{row:#}");
    assert_eq!(
        artifact_text(&row, "stdout_tail"),
        Some("out-a\n"),
        "{row:#}"
    );
    assert_eq!(
        artifact_text(&row, "stderr_tail"),
        Some("err-a\n"),
        "{row:#}"
    );
    let paths = row["paths"].to_string();
    assert!(paths.contains("a.prompt.md"), "{row:#}");
    let archive = a.str_field("archive_path").expect("archive_path");
    assert!(sb.root.join(archive).is_file(), "{:#}", a.record);
    let handed = format!("its monitor reported its end job={} handed_over=true", a.id);
    assert!(d.stderr().contains(&handed), "{}", d.stderr());
}

#[test]
fn a_monitor_whose_daemon_died_before_its_report_finishes_the_end_alone() {
    let sb = Sandbox::new();
    let script = sb.script("talks", TALKS);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let mut held = Paused::start(&sb, "monitor-exit", "release-monitor");
    sb.drop_prompt("proj", "a", "x\n");
    held.wait_reached("the monitor held before its report", secs(15));
    // Only its record is written: the row and the move were to be handed over.
    let a = sb.jobs().into_iter().next().expect("the job");
    assert_eq!(a.state(), "succeeded", "{:#}", a.record);
    let running = sb.root.join("inbox/proj/a.running.md");
    assert!(running.is_file(), "the prompt is still claimed");
    assert_ne!(sb.run(&["history", "show", &a.id, "--json"]).code(), 0);

    kill(Pid::from_raw(held.daemon.pid), Signal::SIGKILL).expect("kill the daemon");
    held.daemon.wait_exit(secs(5));
    held.release();
    let monitor = a.int_field("monitor_pid").expect("monitor_pid") as i32;
    wait_until("the monitor to finish and leave", secs(10), || {
        (!pid_alive(monitor)).then_some(())
    });
    let row = wait_row(&sb, &a.id);
    assert_eq!(
        artifact_text(&row, "stdout_tail"),
        Some("out-a\n"),
        "{row:#}"
    );
    let a = sb.job(&a.id).expect("record");
    let archive = a.str_field("archive_path").expect("archive_path");
    assert!(sb.root.join(archive).is_file(), "{:#}", a.record);
    assert!(!running.exists());
    assert_eq!(sb.jobs().len(), 1);
}

/// Prints `BEGIN`, `$1` bytes of `x`, then `END` on stdout, and a line
/// on stderr.
const PRINTS: &str =
    r#"printf BEGIN; head -c "$1" /dev/zero | tr '\0' x; printf END; echo err >&2"#;

#[test]
fn a_profile_keeping_output_keeps_it_whole_up_to_its_size_handed_over_or_not() {
    let sb = Sandbox::new();
    let script = sb.script("prints", PRINTS);
    let size = "{name}";
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script, size])
            .global("artifact_tail_bytes", "\"1KiB\"")
            .profile("keep_output", "\"2MiB\""),
    );
    let _d = Daemon::start(&sb);
    let stdout = |n: &str| {
        sb.drop_prompt("proj", n, "x\n");
        let job = sb.wait_done("proj", n, secs(30));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
        let row = wait_row(&sb, &job.id);
        assert_eq!(artifact_text(&row, "stderr_tail"), Some("err\n"));
        row["artifacts"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["kind"] == "stdout_tail"))
            .map(|a| a["content"].clone())
            .expect("a stdout artifact")
    };
    // Under the size: whole, though far above artifact_tail_bytes (and,
    // past what a monitor hands over, recorded by the monitor itself).
    for n in ["200000", "1500000"] {
        let out = stdout(n);
        let text = out["text"].as_str().unwrap_or("");
        let want = n.parse::<usize>().unwrap_or(0) + "BEGINEND".len();
        assert_eq!(text.len(), want, "{n}");
        assert!(text.starts_with("BEGINx") && text.ends_with("xEND"), "{n}");
        assert_eq!(out["truncated"], false, "{n}");
        assert_eq!(out["bytes"], want, "{n}");
    }
    // Over it: its last 2 MiB, said to be cut.
    let out = stdout("2500000");
    let text = out["text"].as_str().unwrap_or("");
    assert_eq!(text.len(), 2 << 20);
    assert!(text.ends_with("xEND") && !text.contains("BEGIN"));
    assert_eq!(out["truncated"], true);
    assert_eq!(out["bytes"], 2_500_000 + "BEGINEND".len());
}
