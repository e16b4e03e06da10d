//! Regressions for faults found in review: inputs and crash leftovers that
//! once stranded, misran or froze jobs. Each test is named after the fault
//! it guards against.

use std::fs;
use std::path::Path;

use crate::support::*;

/// A prompt held as `inbox/proj/<name>.running.md` by a queued record, as a
/// claim leaves it just before its daemon died.
fn queued_before_a_crash(sb: &Sandbox, id: &str, name: &str, body: &str) {
    let dir = sb.project_dir("proj");
    fs::create_dir_all(&dir).expect("project dir");
    fs::write(dir.join(format!("{name}.running.md")), body).expect("held prompt");
    let held = format!("inbox/proj/{name}.running.md");
    write_queued_record(sb, id, "proj", name, &held);
}

/// A minimal queued record, as a claim would have written it.
fn write_queued_record(sb: &Sandbox, id: &str, project: &str, name: &str, inbox_path: &str) {
    let dir = sb.run_dir(id);
    fs::create_dir_all(&dir).expect("run dir");
    fs::write(dir.join("prompt.md"), "queued before a crash\n").expect("prompt copy");
    let host = nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8 hostname");
    let rec = serde_json::json!({
        "schema_version": 1, "job_id": id, "attempt": 1, "retry_of": null,
        "project": project, "name": name, "inbox_path": inbox_path,
        "prompt_sha256": null, "profile": "default", "state": "queued",
        "state_reason": null, "failure_stage": null,
        "created_at": "2026-01-01T00:00:00.000Z", "started_at": null, "finished_at": null,
        "updated_at": "2026-01-01T00:00:00.000Z", "heartbeat_at": null, "timeout_at": null,
        "command": null, "workdir": null, "monitor_pid": null, "monitor_start_time": null,
        "pid": null, "pgid": null, "exit_code": null, "signal": null,
        "abort_requested_at": null, "log_path": null, "log_bytes": 0, "log_truncated": false,
        "last_output_at": null, "result_ref": null, "archive_path": null,
        "host": host, "version": "0.1.0"
    });
    fs::write(
        dir.join("job.json"),
        serde_json::to_vec_pretty(&rec).expect("json"),
    )
    .expect("job.json");
}

#[test]
fn claim_cut_short_by_a_crash_is_put_back_and_runs() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    // A claim renamed the prompt and died before writing any record; a
    // newer drop of the same name arrived meanwhile.
    let dir = sb.project_dir("proj");
    fs::create_dir_all(&dir).expect("project dir");
    fs::write(
        dir.join("orphan.running.md"),
        "claimed, then the daemon died\n",
    )
    .expect("orphan");
    fs::write(dir.join("twin.running.md"), "older claim\n").expect("older");
    fs::write(dir.join("twin.prompt.md"), "newer drop\n").expect("newer");
    fs::create_dir_all(sb.runs().join("01a20000-dead-7000-8000-000000000000"))
        .expect("partial run dir");

    let _d = Daemon::start(&sb);
    let orphan = sb.wait_done("proj", "orphan", secs(15));
    assert_eq!(orphan.state(), "succeeded", "{:#}", orphan.record);
    assert_eq!(orphan.log(), "claimed, then the daemon died\n");
    let twin = sb.wait_done("proj", "twin", secs(15));
    assert_eq!(twin.state(), "succeeded", "{:#}", twin.record);
    let recovered = wait_until(
        "the older twin claim, put back aside, to run",
        secs(15),
        || {
            sb.jobs().into_iter().find(|j| {
                j.str_field("name")
                    .is_some_and(|n| n.starts_with("twin.recovered-"))
                    && j.is_done()
            })
        },
    );
    assert_eq!(
        recovered.log(),
        "older claim\n",
        "nothing lost, nothing overwritten"
    );
    assert!(
        sb.inbox_files()
            .iter()
            .all(|p| !p.to_string_lossy().ends_with(".running.md")),
        "no claim left stranded: {:?}",
        sb.inbox_files()
    );
}

#[test]
fn queued_record_from_a_dead_daemon_runs_once_after_restart() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let id = "01a20000-0000-7000-8000-00000000beef";
    queued_before_a_crash(&sb, id, "q", "queued before a crash\n");

    let _d = Daemon::start(&sb);
    let job = wait_until("the recovered queued job to finish", secs(15), || {
        sb.job(id).filter(Job::is_done)
    });
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(
        sb.jobs_for("proj", "q").len(),
        1,
        "run once, under its own id"
    );
}

#[test]
fn fifo_abort_marker_neither_freezes_the_daemon_nor_is_ignored() {
    let sb = Sandbox::new();
    let gate = sb.script(
        "gate",
        r#"while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate]).global("max_jobs", "1"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "holder", "holds the only slot\n");
    sb.wait_state("proj", "holder", "running", secs(15));
    sb.drop_prompt("proj", "waiting", "queued behind it\n");
    let queued = sb.wait_state("proj", "waiting", "queued", secs(15));

    let fifo = sb.run_dir(&queued.id).join("ABORT");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let aborted = wait_until(
        "the queued job cancelled by a FIFO marker",
        secs(10),
        || sb.job(&queued.id).filter(|j| j.state() == "cancelled"),
    );
    assert!(aborted.pid().is_none(), "it never started");

    fs::write(sb.out().join("release"), "").expect("release");
    sb.drop_prompt("proj", "later", "the daemon still claims\n");
    let later = sb.wait_done("proj", "later", secs(15));
    assert_eq!(later.state(), "succeeded", "{:#}", later.record);
}

#[test]
fn monitor_without_the_daemons_config_leaves_the_job_untouched() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let id = "01a20000-0000-7000-8000-00000000cafe";
    queued_before_a_crash(&sb, id, "m", "must not run the demo\n");

    let out = sb.run(&["monitor", id]); // stdin is /dev/null: no handover frame
    assert_eq!(out.code(), 2, "refused: {}", out.stderr);
    assert!(out.stderr.contains("config handover"), "{}", out.stderr);
    let job = sb.job(id).expect("record still there");
    assert_eq!(job.state(), "queued", "untouched: {:#}", job.record);
    assert!(!sb.run_dir(id).join("job.log").exists(), "nothing ran");
}

#[test]
fn symlinked_folder_in_the_inbox_is_never_followed() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let outside = sb.base.join("outside");
    fs::create_dir_all(&outside).expect("outside dir");
    fs::create_dir_all(sb.inbox()).expect("inbox");
    std::os::unix::fs::symlink(&outside, sb.inbox().join("link")).expect("symlink folder");
    let _d = Daemon::start(&sb);

    fs::write(outside.join("x.tmp"), "outside the root\n").expect("tmp");
    fs::rename(outside.join("x.tmp"), outside.join("x.prompt.md")).expect("rename in");
    sb.drop_prompt("proj", "marker", "proves the daemon is watching\n");
    sb.wait_done("proj", "marker", secs(15));
    assert_never(
        "a file behind a symlinked folder being claimed",
        millis(1500),
        || !outside.join("x.prompt.md").exists() || sb.jobs().len() > 1,
    );
}

#[test]
fn tampered_record_cannot_make_the_daemon_move_files_outside_the_root() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let victim = sb.base.join("victim.txt");
    fs::write(&victim, "not jobwarden's\n").expect("victim");
    let id = "01a20000-0000-7000-8000-0000000e0e11";
    write_queued_record(&sb, id, "proj", "evil", &victim.to_string_lossy());
    fs::write(sb.run_dir(id).join("ABORT"), "").expect("marker");

    let _d = Daemon::start(&sb);
    let aside = wait_until("the tampered record moved aside", secs(10), || {
        fs::read_dir(sb.run_dir(id)).ok()?.flatten().find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("job.json.corrupt-")
        })
    });
    assert!(aside.path().is_file());
    assert_eq!(
        fs::read_to_string(&victim).expect("victim"),
        "not jobwarden's\n"
    );
    assert!(
        !sb.run_dir(id).join("job.json").exists(),
        "never silently reset"
    );
}

#[test]
fn prompt_with_a_future_mtime_is_claimed_after_settle() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let prompt = sb.write_prompt("proj", "future", "from a skewed clock\n");
    let future = std::time::SystemTime::now() + secs(3600);
    fs::File::options()
        .write(true)
        .open(&prompt)
        .and_then(|f| f.set_modified(future))
        .expect("set mtime");
    let _d = Daemon::start(&sb); // found by the start-up rescan only
    let job = sb.wait_done("proj", "future", secs(10));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
}

#[test]
fn absurd_config_bounds_are_refused_before_anything_runs() {
    let sb = Sandbox::new();
    sb.write_config("rescan_interval = \"300000000000y\"\n");
    let out = sb.run(&["config", "check"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(out.stderr.contains("rescan_interval"), "{}", out.stderr);
    sb.write_config("max_prompt_bytes = \"16EiB\"\n");
    let out = sb.run(&["config", "check"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(out.stderr.contains("max_prompt_bytes"), "{}", out.stderr);
    assert!(!Path::new(&sb.root.join("daemon.json")).exists());
}

#[test]
fn queued_job_whose_prompt_copy_is_missing_runs_what_was_claimed() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let id = "01a20000-0000-7000-8000-0000000c0b1e";
    queued_before_a_crash(&sb, id, "copyless", "the claimed bytes\n");
    fs::remove_file(sb.run_dir(id).join("prompt.md")).expect("lose the copy");

    let _d = Daemon::start(&sb);
    let job = wait_until("the job to finish", secs(15), || {
        sb.job(id).filter(Job::is_done)
    });
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(job.log(), "the claimed bytes\n");
}

#[test]
fn queued_job_whose_prompt_copy_and_body_are_missing_runs_only_the_body() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let id = "01a20000-0000-7000-8000-0000000b0d1e";
    let claimed = format!("---\njob_id: {id}\n---\nthe body alone\n");
    queued_before_a_crash(&sb, id, "bodiless", &claimed);
    fs::remove_file(sb.run_dir(id).join("prompt.md")).expect("lose the copy");

    let _d = Daemon::start(&sb);
    let job = wait_until("the job to finish", secs(15), || {
        sb.job(id).filter(Job::is_done)
    });
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(job.log(), "the body alone\n");
    let copy = fs::read_to_string(job.dir.join("prompt.md")).expect("restored copy");
    assert_eq!(copy, claimed);
}

/// An unparseable `job.json` (a torn write by a foreign tool) is moved
/// aside and reported; its claimed prompt goes back to the inbox and runs.
#[test]
fn an_unparseable_job_json_is_moved_aside_and_its_prompt_runs() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let id = "01a20000-0000-7000-8000-0000000c0441";
    fs::create_dir_all(sb.run_dir(id)).expect("run dir");
    fs::write(
        sb.run_dir(id).join("job.json"),
        "{\"schema_version\": 1, \"state\": \"runn",
    )
    .expect("torn record");
    fs::create_dir_all(sb.project_dir("proj")).expect("project");
    fs::write(sb.project_dir("proj").join("torn.running.md"), "run me\n").expect("claimed prompt");

    let d = Daemon::start(&sb);
    // Set aside by the start-up check, which lists `runs/` after the first
    // claims: the torn record is read by nothing before.
    wait_until("the torn record to be moved aside", secs(15), || {
        (!sb.run_dir(id).join("job.json").exists()).then_some(())
    });
    let job = sb.wait_done_excluding("proj", "torn", &[], secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert!(job.log().contains("run me"), "{}", job.log());
    let aside: Vec<_> = fs::read_dir(sb.run_dir(id))
        .expect("run dir kept")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("job.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "moved aside, not deleted");
    assert!(
        !sb.run_dir(id).join("job.json").exists(),
        "never silently reset"
    );
    assert!(d.stderr().contains("corrupt record"), "{}", d.stderr());
}
