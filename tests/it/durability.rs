//! The job's three durable points (docs/on-disk.md, "The journal"), each
//! crossed and then cut: every process of the root killed with SIGKILL at
//! a fault-injection pause right after the point, what a power cut could
//! take back taken back by hand (the unsynced `job.json`, the claim's
//! unsynced files), then a restart. Nothing runs twice, nothing is lost,
//! and every job ends as its journal says.

use std::fs;

use serde_json::Value;

use crate::support::*;

/// Appends its job's id to `$OUT/ran`, then runs until `$OUT/release` exists.
const GATED: &str = r#"echo "$JOBWARDEN_JOB_ID" >> "$OUT/ran"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#;

fn gated(sb: &Sandbox) -> ConfigToml {
    let gate = sb.script("gate", GATED);
    ConfigToml::new(&["/bin/sh", &gate])
}

/// Each job id's number of starts.
fn starts(sb: &Sandbox) -> std::collections::BTreeMap<String, usize> {
    let mut count = std::collections::BTreeMap::new();
    for id in sb.ran_lines() {
        *count.entry(id).or_insert(0) += 1;
    }
    count
}

/// The journal lines of job `id` (those carrying its record), in order.
fn journal(sb: &Sandbox, id: &str) -> Vec<Value> {
    let text = fs::read_to_string(sb.run_dir(id).join("events.jsonl")).expect("events.jsonl");
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e.get("record").is_some())
        .collect()
}

/// The ops of job `id`'s journal lines, in order.
fn journal_ops(sb: &Sandbox, id: &str) -> Vec<String> {
    journal(sb, id)
        .iter()
        .map(|e| e["op"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// Put `record` back as job `id`'s `job.json`: what a power cut leaves
/// when it takes the unsynced rewrites after it.
fn roll_back_view(sb: &Sandbox, id: &str, record: &Value) {
    let bytes = serde_json::to_vec_pretty(record).expect("record");
    fs::write(sb.run_dir(id).join("job.json"), bytes).expect("roll job.json back");
}

/// The rows of `history list --json`.
fn history_rows(sb: &Sandbox) -> Vec<Value> {
    let out = sb.run(&["history", "list", "--json"]);
    serde_json::from_str::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// The only job of prompt `proj/name`, once its record exists.
fn only_job(sb: &Sandbox, name: &str) -> Job {
    let job = sb.wait_job("proj", name, secs(15));
    assert_eq!(sb.jobs_for("proj", name).len(), 1, "one job of {name}");
    job
}

#[test]
fn a_start_durable_in_the_journal_is_never_run_again_even_without_job_json() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb));
    let mut paused = Paused::start(&sb, "monitor-started", "go");
    sb.drop_prompt("proj", "a", "x\n");
    paused.wait_reached("the monitor's start to be durable", secs(15));
    let job = only_job(&sb, "a");
    let ops = journal_ops(&sb, &job.id);
    assert_eq!(ops, ["queued", "monitor_started"], "the journal so far");
    sb.kill_everything();
    paused.daemon.wait_exit(secs(5));
    // The start's view is owed, and so was its claim's (a place was free:
    // the job started at once): only the journal holds the record.
    assert!(
        sb.try_read_view(&job.id).is_none(),
        "no job.json yet: {:?}",
        sb.try_read_view(&job.id)
    );

    fs::write(sb.out().join("release"), "").expect("release");
    let _daemon = Daemon::start(&sb);
    let first = wait_until("the first attempt to end", secs(15), || {
        sb.job(&job.id).filter(Job::is_terminal)
    });
    assert_eq!(first.state(), "interrupted", "{:#}", first.record);
    let again = sb.wait_done_excluding("proj", "a", std::slice::from_ref(&job.id), secs(15));
    assert_eq!(again.state(), "succeeded", "{:#}", again.record);
    let ran = starts(&sb);
    assert_eq!(
        ran.get(&job.id),
        None,
        "the first attempt never ran: {ran:?}"
    );
    assert_eq!(ran.get(&again.id), Some(&1), "the retry ran once: {ran:?}");
    let rows = wait_until("a row for each attempt", secs(10), || {
        let rows = history_rows(&sb);
        (rows.len() >= 2).then_some(rows)
    });
    assert_eq!(rows.len(), 2, "a row for each attempt: {rows:?}");
}

/// The monitor's lock is its run folder: no file is made for it, and a
/// monitor that died holding only the lock ran nothing, so its job is
/// queued again as itself (its record names no monitor).
#[test]
fn a_monitor_killed_before_its_first_record_line_leaves_its_job_to_run_once() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb));
    fs::write(sb.out().join("release"), "").expect("the job ends at once");
    let mut paused = Paused::start(&sb, "monitor-locked", "go");
    sb.drop_prompt("proj", "c", "x\n");
    paused.wait_reached("the monitor to hold its lock", secs(15));
    let job = only_job(&sb, "c");
    let ops = journal_ops(&sb, &job.id);
    assert_eq!(ops, ["queued"], "the journal so far");
    let holders = jobwarden_sys::procfs::flock_holders(&sb.run_dir(&job.id)).expect("locks");
    assert_eq!(
        holders.len(),
        1,
        "the monitor holds the run folder: {holders:?}"
    );
    assert!(
        !sb.run_dir(&job.id).join("monitor.lock").exists(),
        "no lock file is made"
    );
    sb.kill_everything();
    paused.daemon.wait_exit(secs(5));

    let _daemon = Daemon::start(&sb);
    let done = wait_until("the job to end", secs(15), || {
        sb.job(&job.id).filter(Job::is_done)
    });
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(done.int_field("attempt"), Some(1), "{:#}", done.record);
    assert_eq!(sb.jobs_for("proj", "c").len(), 1, "no other attempt");
    let ran = starts(&sb);
    assert_eq!(ran.get(&job.id), Some(&1), "it ran once: {ran:?}");
}

#[test]
fn an_end_durable_in_the_journal_is_finished_as_the_journal_says_after_a_kill() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb));
    fs::write(sb.out().join("release"), "").expect("the job ends at once");
    let mut paused = Paused::start(&sb, "monitor-exit", "go");
    sb.drop_prompt("proj", "b", "x\n");
    paused.wait_reached("the monitor to have recorded the end", secs(15));
    let job = only_job(&sb, "b");
    let lines = journal(&sb, &job.id);
    let last = lines.last().expect("a journal line");
    assert_eq!(last["to"], "succeeded", "{last}");
    let running = lines
        .iter()
        .rev()
        .find(|e| e["to"] == "running")
        .expect("a running line");
    sb.kill_everything();
    paused.daemon.wait_exit(secs(5));
    // The terminal view is lost; the journal holds the end.
    roll_back_view(&sb, &job.id, &running["record"]);
    assert!(
        sb.inbox().join("proj/b.running.md").exists(),
        "still claimed"
    );

    let _daemon = Daemon::start(&sb);
    let done = wait_until("the end to be finished", secs(15), || {
        let job = sb.job(&job.id)?;
        (job.state() == "succeeded" && job.str_field("archive_path").is_some()).then_some(job)
    });
    let archived = sb
        .root
        .join(done.str_field("archive_path").expect("archived"));
    wait_until("the prompt in the archive", secs(10), || {
        (archived.exists() && !sb.inbox().join("proj/b.running.md").exists()).then_some(())
    });
    assert_eq!(fs::read_to_string(&archived).expect("archived"), "x\n");
    assert_eq!(starts(&sb).get(&job.id), Some(&1), "ran once");
    assert_eq!(sb.jobs_for("proj", "b").len(), 1, "no second attempt");
    let rows = wait_until("its ledger row", secs(10), || {
        let rows = history_rows(&sb);
        (!rows.is_empty()).then_some(rows)
    });
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "success", "{:?}", rows[0]);
}

#[test]
fn a_claim_whose_unsynced_files_a_power_cut_took_runs_once_after_the_restart() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb));
    fs::write(sb.out().join("release"), "").expect("the job ends at once");
    let mut paused = Paused::start(&sb, "daemon-claimed", "go");
    sb.drop_prompt("proj", "c", "x\n");
    paused.wait_reached("the claim to be committed", secs(15));
    let job = only_job(&sb, "c");
    sb.kill_everything();
    paused.daemon.wait_exit(secs(5));
    // Only the rename and the run folder were synced: the journal is lost
    // (and `job.json`, which a claim whose job starts at once leaves to
    // its monitor).
    fs::remove_file(sb.run_dir(&job.id).join("events.jsonl")).expect("lose the journal");
    let _ = fs::remove_file(sb.run_dir(&job.id).join("job.json"));

    let _daemon = Daemon::start(&sb);
    let done = sb.wait_done_excluding("proj", "c", std::slice::from_ref(&job.id), secs(15));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    let ran = starts(&sb);
    assert_eq!(ran.len(), 1, "one job ran, once: {ran:?}");
    assert_eq!(ran.get(&done.id), Some(&1), "{ran:?}");
    let listed = sb.run(&["jobs", "--json"]);
    let listed: Value = serde_json::from_str(&listed.stdout).expect("jobs --json");
    let ids: Vec<&str> = listed
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, [done.id.as_str()], "the claim cut short is no job");
}

#[test]
fn readers_prefer_the_journal_to_a_job_json_behind_it() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb));
    let daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "d", "x\n");
    let job = sb.wait_state("proj", "d", "running", secs(15));
    let queued = journal(&sb, &job.id)
        .first()
        .map(|e| e["record"].clone())
        .expect("the queued line");
    fs::write(sb.out().join("release"), "").expect("release");
    sb.wait_done("proj", "d", secs(15));
    drop(daemon);
    roll_back_view(&sb, &job.id, &queued);
    let shown = sb.run(&["show", &job.id, "--json"]);
    assert_eq!(shown.code(), 0, "{}", shown.stderr);
    let shown: Value = serde_json::from_str(&shown.stdout).expect("show --json");
    assert_eq!(shown["job"]["state"], "succeeded", "{shown}");
    let listed = sb.run(&["jobs", "--json"]);
    let listed: Value = serde_json::from_str(&listed.stdout).expect("jobs --json");
    let row = listed
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == job.id.as_str()))
        .cloned()
        .expect("listed");
    assert_eq!(row["state"], "succeeded", "{row}");
    // Start-up writes the view again from the journal.
    let _again = Daemon::start(&sb);
    wait_until("job.json written again", secs(10), || {
        let view = sb.try_read_view(&job.id)?;
        (view["state"] == "succeeded").then_some(())
    });
}

/// A start's view is owed (its journal holds the record); a command that
/// runs a moment has `job.json` itself say so. The one holding the slot is
/// `running` there, the one waiting for it `queued` (the claim's view),
/// each view carrying the `seq` of the journal's last line.
#[test]
fn a_job_that_waits_or_runs_a_moment_has_its_view_written() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb).global("max_jobs", "1"));
    let _daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "holder", "x\n");
    let holder = sb.wait_state("proj", "holder", "running", secs(15));
    sb.drop_prompt("proj", "waiter", "y\n");
    let waiter = sb.wait_job("proj", "waiter", secs(15));
    for (job, state) in [(&holder, "running"), (&waiter, "queued")] {
        let view = wait_until(
            &format!("job.json of {} to say {state}", job.id),
            secs(10),
            || sb.try_read_view(&job.id).filter(|v| v["state"] == state),
        );
        let last = journal(&sb, &job.id).last().map(|e| e["seq"].clone());
        assert_eq!(view["journal_seq"], last.unwrap_or_default(), "{view:#}");
    }
    fs::write(sb.out().join("release"), "").expect("release");
    for name in ["holder", "waiter"] {
        let done = sb.wait_done("proj", name, secs(15));
        let view = sb.try_read_view(&done.id).expect("the end's view");
        assert_eq!(view["state"], "succeeded", "{view:#}");
    }
}

#[test]
fn a_job_guessed_to_start_at_once_that_waits_after_all_has_its_view_written() {
    let sb = Sandbox::new();
    sb.configure(&gated(&sb));
    let _daemon = Daemon::start(&sb);
    // A place is free, but its project is paused: the claim guesses it
    // starts at once and leaves its view; the start that did not happen
    // writes it.
    let paused = sb.run(&["pause", "--project", "proj"]);
    assert_eq!(paused.code(), 0, "{}", paused.stderr);
    sb.drop_prompt("proj", "held", "x\n");
    let job = sb.wait_job("proj", "held", secs(15));
    let view = wait_until("job.json of the waiting job", secs(10), || {
        sb.try_read_view(&job.id)
    });
    assert_eq!(view["state"], "queued", "{view:#}");
    let last = journal(&sb, &job.id).last().map(|e| e["seq"].clone());
    assert_eq!(view["journal_seq"], last.unwrap_or_default(), "{view:#}");
    let resumed = sb.run(&["resume", "--project", "proj"]);
    assert_eq!(resumed.code(), 0, "{}", resumed.stderr);
    fs::write(sb.out().join("release"), "").expect("release");
    let done = sb.wait_done("proj", "held", secs(15));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
}
