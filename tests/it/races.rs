//! Commands racing each other and the daemon: concurrent `retry`, `abort`,
//! `gc` and `history repair`; an archive name that is already taken; and a
//! daemon killed at random moments while jobs finish.

use std::fs;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::support::*;

/// A job that succeeds at once, leaving its name in `$OUT/ran`.
const QUICK: &str = r#"echo "$1" >> "$OUT/ran""#;

fn ran_count(sb: &Sandbox, name: &str) -> usize {
    fs::read_to_string(sb.out().join("ran"))
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == name)
        .count()
}

/// Runs `n` copies of the CLI command `args` at once; their outputs.
fn at_once(sb: &Sandbox, n: usize, args: &[&str]) -> Vec<CliOutput> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n).map(|_| s.spawn(|| sb.run(args))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("CLI thread"))
            .collect()
    })
}

/// Every row of the ledger's `executions`, as `history list --json` gives them.
fn history_rows(sb: &Sandbox) -> Vec<Value> {
    let out = sb.run(&["history", "list", "--json", "--limit", "100000"]);
    assert!(out.code() <= 1, "{out:?}");
    serde_json::from_str::<Vec<Value>>(&out.stdout).unwrap_or_default()
}

/// The ids of those rows.
fn execution_ids(sb: &Sandbox) -> Vec<String> {
    history_rows(sb)
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect()
}

/// Starts a daemon right after another was killed. A monitor the killed
/// daemon was forking holds its lock until it execs, so the first tries may
/// find the root locked: try again until one starts.
fn start_after_kill(sb: &Sandbox) -> Daemon {
    wait_until(
        "a daemon to start after the last one was killed",
        secs(20),
        || {
            let mut daemon = Daemon::spawn(sb, &[]);
            let ready = wait_until_every(
                "the daemon to be ready or to exit",
                secs(10),
                millis(10),
                || {
                    if daemon.try_status().is_some() {
                        return Some(false);
                    }
                    let v: Value =
                        serde_json::from_slice(&fs::read(sb.root.join("daemon.json")).ok()?)
                            .ok()?;
                    (v["pid"] == daemon.pid && v["phase"] == "running").then_some(true)
                },
            );
            ready.then_some(daemon)
        },
    )
}

fn sigkill(daemon: &mut Daemon) {
    let _ = kill(Pid::from_raw(daemon.pid), Signal::SIGKILL);
    daemon.wait_exit(secs(10));
}

/// Nothing of `name` is left in the inbox: not waiting, not claimed.
fn settled_in_inbox(sb: &Sandbox) -> bool {
    sb.inbox_files().iter().all(|p| {
        let n = p.to_string_lossy();
        !n.ends_with(".running.md") && !n.ends_with(".prompt.md")
    })
}

// -- finishing across daemon restarts ------------------------------------------

#[test]
fn a_daemon_killed_while_jobs_finish_leaves_every_job_archived_and_retryable() {
    let sb = Sandbox::new();
    let script = sb.script("quick", QUICK);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "8"));
    let rounds = 30;
    let mut names = Vec::new();
    for round in 0..rounds {
        let mut daemon = start_after_kill(&sb);
        for k in 0..3 {
            let name = format!("r{round}-{k}");
            sb.drop_prompt("loop", &name, format!("round {round}\n"));
            names.push(name);
        }
        // Kill it at a moment that varies from round to round: jobs are
        // claimed, started and finishing around then.
        std::thread::sleep(millis(5 + (round * 7) % 45));
        sigkill(&mut daemon);
    }
    let _last = start_after_kill(&sb);
    let done = |jobs: &[Job], name: &str| {
        jobs.iter().any(|j| {
            j.record["name"] == name && j.is_terminal() && j.record["disposition"] == "archived"
        })
    };
    wait_until_every(
        "every prompt of the loop to be done",
        secs(60),
        millis(100),
        || {
            let jobs = sb.jobs();
            let all = names.iter().all(|n| done(&jobs, n));
            (all && settled_in_inbox(&sb)).then_some(())
        },
    );
    let jobs: Vec<Job> = sb.jobs();
    for job in &jobs {
        assert!(job.is_terminal(), "{:#}", job.record);
        let archived = job.str_field("archive_path");
        assert!(
            archived.is_some() || job.record["disposition"] == "requeued",
            "a terminal job without archive_path that was not requeued: {:#}",
            job.record
        );
        if let Some(rel) = archived {
            assert!(sb.root.join(rel).is_file(), "{rel} exists");
        }
    }
    let archived: Vec<&Job> = jobs
        .iter()
        .filter(|j| j.str_field("archive_path").is_some())
        .collect();
    std::thread::scope(|s| {
        for chunk in archived.chunks(archived.len().div_ceil(4).max(1)) {
            let sb = &sb;
            s.spawn(move || {
                for job in chunk {
                    let out = sb.run(&["retry", &job.id]);
                    assert_eq!(out.code(), 0, "retry of {}: {out:?}", job.id);
                }
            });
        }
    });
}

// -- archive names -------------------------------------------------------------

#[test]
fn an_archive_name_already_taken_gets_a_free_name_and_nothing_is_stuck() {
    let sb = Sandbox::new();
    let script = sb.script("quick", QUICK);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let planted = sb.root.join("archive/succeeded/proj/x.taken-1.md");
    fs::create_dir_all(planted.parent().expect("folder")).expect("archive folder");
    fs::write(&planted, "a leftover, not this job's prompt\n").expect("plant");
    let _d = Daemon::start(&sb);
    let prompt = "---\njob_id: taken-1\n---\nrun me\n";
    sb.drop_prompt("proj", "x", prompt);

    // The planted file satisfies `wait_done` at once: wait for the end of
    // the finish itself instead.
    let job = sb.wait_job_where("its prompt moved", "proj", "x", &[], secs(15), |j| {
        j.is_terminal() && j.ops().iter().any(|o| o.starts_with("archive"))
    });
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(
        job.str_field("archive_path"),
        Some("archive/succeeded/proj/x.taken-1.1.md"),
        "{:#}",
        job.record
    );
    let archived = sb.root.join("archive/succeeded/proj/x.taken-1.1.md");
    assert_eq!(fs::read_to_string(&archived).expect("archived"), prompt);
    assert_eq!(
        fs::read_to_string(&planted).expect("planted"),
        "a leftover, not this job's prompt\n",
        "never overwritten"
    );
    assert!(settled_in_inbox(&sb), "{:?}", sb.inbox_files());
    assert!(job.ops().iter().any(|o| o == "archived"), "{:?}", job.ops());

    let out = sb.run(&["retry", &job.id, "--now"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let again = sb.wait_done_excluding("proj", "x", std::slice::from_ref(&job.id), secs(15));
    assert_eq!(again.state(), "succeeded", "{:#}", again.record);
    assert_eq!(ran_count(&sb, "x"), 2);
}

// -- retry -------------------------------------------------------------------------

#[test]
fn twenty_concurrent_retries_of_one_job_put_it_back_once() {
    let sb = Sandbox::new();
    let script = sb.script("quick", QUICK);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "once", "run me again, once\n");
    let first = sb.wait_done("proj", "once", secs(15));
    assert_eq!(ran_count(&sb, "once"), 1);

    let outs = at_once(&sb, 20, &["retry", &first.id, "--now"]);
    let won: Vec<&CliOutput> = outs.iter().filter(|o| o.code() == 0).collect();
    assert_eq!(won.len(), 1, "exactly one retry wins: {outs:#?}");
    assert!(
        won[0].stdout.contains("put back for attempt 2"),
        "{:?}",
        won[0]
    );
    for lost in outs.iter().filter(|o| o.code() != 0) {
        assert_eq!(lost.code(), 1, "a loser is a clean no: {lost:?}");
        assert!(
            lost.stderr.contains("already put back")
                && lost.stderr.contains("by another retry")
                && lost.stderr.contains(&first.id),
            "a loser is told why: {lost:?}"
        );
    }
    let retried = sb.wait_done_excluding("proj", "once", std::slice::from_ref(&first.id), secs(15));
    assert_eq!(
        retried.int_field("attempt"),
        Some(2),
        "{:#}",
        retried.record
    );
    assert_eq!(retried.str_field("retry_of"), Some(first.id.as_str()));
    assert_never("a third run of the prompt", millis(1500), || {
        ran_count(&sb, "once") > 2 || sb.jobs_for("proj", "once").len() > 2
    });
    assert_eq!(ran_count(&sb, "once"), 2, "the retry ran exactly once");
    assert!(settled_in_inbox(&sb), "{:?}", sb.inbox_files());

    let late = sb.run(&["retry", &first.id]);
    assert_eq!(late.code(), 1, "retried once already: {late:?}");
    assert!(late.stderr.contains("retry the newest job"), "{late:?}");
}

// -- abort -------------------------------------------------------------------------

/// Waits for `$OUT/release-<name>` or `$OUT/release-all`.
const GATED: &str = r#"echo "$1" >> "$OUT/ran"
while [ ! -e "$OUT/release-$1" ] && [ ! -e "$OUT/release-all" ]; do sleep 0.05; done"#;

#[test]
fn concurrent_aborts_of_one_job_request_it_once() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "stop", "abort me\n");
    let job = sb.wait_state("proj", "stop", "running", secs(15));

    let outs = at_once(&sb, 20, &["abort", &job.id, "--reason", "enough"]);
    let won: Vec<&CliOutput> = outs.iter().filter(|o| o.code() == 0).collect();
    assert_eq!(
        won.len(),
        1,
        "exactly one abort writes the marker: {outs:#?}"
    );
    assert!(won[0].stdout.contains("abort requested"), "{:?}", won[0]);
    for lost in outs.iter().filter(|o| o.code() != 0) {
        assert_eq!(lost.code(), 1, "{lost:?}");
        // Told why: another abort went first (or, once the job had ended
        // meanwhile, that it ended).
        let told = ["abort already requested", "already ended (aborted)"];
        assert!(told.iter().any(|t| lost.stdout.contains(t)), "{lost:?}");
    }
    let done = sb.wait_id(&job.id, "the job to end", secs(15), Job::is_done);
    assert_eq!(done.state(), "aborted", "{:#}", done.record);
    let ops = check_events(&done);
    let count = |op: &str| ops.iter().filter(|o| *o == op).count();
    assert_eq!(count("abort_requested"), 1, "{ops:?}");
    let to_aborted = done
        .events()
        .iter()
        .filter(|e| e["op"] == "state" && e["to"] == "aborted")
        .count();
    assert_eq!(to_aborted, 1, "{ops:?}");

    let again = sb.run(&["abort", &job.id]);
    assert_eq!(again.code(), 1, "{again:?}");
    assert!(again.stdout.contains("already ended"), "{again:?}");
}

// -- gc and history repair racing the daemon ----------------------------------------

/// Runs `args` over and over on `threads` threads until `done()`; every run.
fn while_running(
    sb: &Sandbox,
    threads: usize,
    args: &[&str],
    done: impl Fn() -> bool + Sync,
) -> Vec<CliOutput> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut outs = Vec::new();
                    while !done() {
                        outs.push(sb.run(args));
                    }
                    outs
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("CLI thread"))
            .collect()
    })
}

/// Drops `n` prompts `<prefix>-<i>` in `proj`, one every few milliseconds.
fn drop_many(sb: &Sandbox, prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}-{i}");
            sb.drop_prompt("proj", &name, format!("{name}\n"));
            std::thread::sleep(millis(5));
            name
        })
        .collect()
}

fn all_ran_once(sb: &Sandbox, names: &[String]) -> bool {
    names.iter().all(|n| ran_count(sb, n) >= 1) && settled_in_inbox(sb)
}

#[test]
fn gc_while_jobs_finish_loses_nothing_and_reports_no_error() {
    let sb = Sandbox::new();
    let script = sb.script("quick", QUICK);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script, "{name}"])
            .global("keep_runs", "0")
            .global("keep_days", "0")
            .global("gc_interval", "\"50ms\""),
    );
    let _d = Daemon::start(&sb);
    let names = std::sync::Mutex::new(Vec::new());
    let dropped = std::sync::atomic::AtomicBool::new(false);
    let outs = std::thread::scope(|s| {
        s.spawn(|| {
            *names.lock().expect("names") = drop_many(&sb, "gc", 40);
            dropped.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        while_running(&sb, 3, &["gc", "--json"], || {
            dropped.load(std::sync::atomic::Ordering::SeqCst)
                && all_ran_once(&sb, &names.lock().expect("names"))
        })
    });
    let names = names.into_inner().expect("names");
    for out in &outs {
        assert_eq!(out.code(), 0, "{out:?}");
        let report: Value = serde_json::from_str(&out.stdout).expect("gc --json");
        assert_eq!(report["errors"], 0, "{out:?}");
    }
    wait_until("every job's row in the ledger", secs(15), || {
        (execution_ids(&sb).len() >= names.len()).then_some(())
    });
    let ids = execution_ids(&sb);
    assert_eq!(ids.len(), names.len(), "one row per job: {ids:?}");
    for name in &names {
        assert_eq!(ran_count(&sb, name), 1, "{name} ran exactly once");
    }
    assert!(settled_in_inbox(&sb), "{:?}", sb.inbox_files());
}

#[test]
fn history_repair_while_the_daemon_claims_and_records_loses_no_job_and_takes_no_row() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "4"));
    let _d = Daemon::start(&sb);
    let names = std::sync::Mutex::new(Vec::new());
    let dropped = std::sync::atomic::AtomicBool::new(false);
    let claimed = |n: usize| {
        let waiting = sb
            .inbox_files()
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".prompt.md"));
        !waiting && sb.jobs().len() >= n
    };
    // Claims race the repairs' listing of runs/ (the job index) ...
    let outs = std::thread::scope(|s| {
        s.spawn(|| {
            *names.lock().expect("names") = drop_many(&sb, "rep", 30);
            dropped.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        while_running(&sb, 3, &["history", "repair", "--json"], || {
            dropped.load(std::sync::atomic::Ordering::SeqCst) && claimed(30)
        })
    });
    let listed = sb.run(&["jobs", "--json", "--limit", "1000"]);
    let listed: Vec<Value> = serde_json::from_str(&listed.stdout).expect("jobs --json");
    assert_eq!(
        listed.len(),
        30,
        "every claimed job is in the index: {listed:#?}"
    );
    // ... and jobs finishing race them for the ledger rows.
    fs::write(sb.out().join("release-all"), "").expect("release");
    let names = names.into_inner().expect("names");
    let mut outs = outs;
    outs.extend(while_running(
        &sb,
        3,
        &["history", "repair", "--json"],
        || all_ran_once(&sb, &names) && sb.jobs().iter().all(Job::is_done),
    ));
    for out in &outs {
        assert_eq!(out.code(), 0, "{out:?}");
    }
    let rows = history_rows(&sb);
    assert_eq!(rows.len(), 30, "one row per job, none twice: {rows:#?}");
    for row in &rows {
        assert_eq!(
            row["source"], "daemon",
            "the monitor writes its own row, with its output tails: {row:#}"
        );
    }
}
