//! Surviving the death of processes: a daemon restarted under a running job
//! adopts it (and keeps its slot), and a job whose monitor is killed is
//! `interrupted` and its process group killed.

use std::fs;

use crate::support::*;

/// Appends its name to `$OUT/ran`, then waits for `$OUT/release-<name>` (or
/// `$OUT/release-all`).
const GATED: &str = r#"echo "$1" >> "$OUT/ran"
echo ready
while [ ! -e "$OUT/release-$1" ] && [ ! -e "$OUT/release-all" ]; do sleep 0.05; done
echo released"#;

fn release(sb: &Sandbox, name: &str) {
    fs::write(sb.out().join(format!("release-{name}")), "").expect("release file");
}

#[test]
fn restarted_daemon_adopts_a_running_job_and_keeps_its_slot() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "1"));
    let mut first = Daemon::start(&sb);
    sb.drop_prompt("proj", "a", "long job\n");
    let a = sb.wait_state("proj", "a", "running", secs(15));

    first.sigterm();
    assert_eq!(
        first.wait_exit(secs(5)).code(),
        Some(0),
        "{}",
        first.stderr()
    );
    let second = Daemon::start(&sb);
    wait_until(
        "the restarted daemon counting the adopted job as running",
        secs(10),
        || {
            let file = fs::read(sb.root.join("daemon.json")).ok()?;
            let v: serde_json::Value = serde_json::from_slice(&file).ok()?;
            (v["pid"] == second.pid && v["running"] == 1).then_some(())
        },
    );
    let adopted = sb.job(&a.id).expect("job a");
    assert!(
        adopted.ops().iter().any(|o| o == "adopted"),
        "an adopted event: {:?}",
        adopted.ops()
    );

    // The adopted job holds the only slot: a new prompt must wait.
    sb.drop_prompt("proj", "b", "must wait for the adopted job\n");
    let b = sb.wait_state("proj", "b", "queued", secs(10));
    assert_never(
        "b leaving queued while a holds the slot",
        millis(800),
        || sb.job(&b.id).is_some_and(|j| j.state() != "queued"),
    );
    assert_eq!(sb.job(&a.id).expect("a").state(), "running");

    release(&sb, "a");
    release(&sb, "b");
    let a_done = sb.wait_done("proj", "a", secs(15));
    assert_eq!(a_done.state(), "succeeded", "{:#}", a_done.record);
    assert_eq!(a_done.id, a.id);
    let ops = check_events(&a_done); // seq stays unique and increasing across both writers
    assert!(ops.iter().position(|o| o == "adopted") < ops.iter().position(|o| o == "exited"));
    let b_done = sb.wait_done("proj", "b", secs(15));
    assert_eq!(b_done.state(), "succeeded", "{:#}", b_done.record);
    assert_eq!(
        sb.ran_lines(),
        vec!["a", "b"],
        "each job ran once, a before b"
    );
    assert_eq!(sb.jobs().len(), 2, "no job was created twice");
}

#[test]
fn killed_monitor_makes_the_job_interrupted_and_kills_its_group() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "orphan", "lose my monitor\n");
    let job = sb.wait_state("proj", "orphan", "running", secs(15));
    let pid = job.pid().expect("pid");
    let pgid = job.int_field("pgid").expect("pgid") as i32;
    let monitor = job.int_field("monitor_pid").expect("monitor_pid") as i32;

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the monitor");

    let done = sb.wait_id(&job.id, "the job to be interrupted", secs(10), |j| {
        j.is_terminal()
    });
    assert_eq!(done.state(), "interrupted", "{:#}", done.record);
    wait_until(
        "the job's process (parent-death signal) to die",
        secs(3),
        || (!pid_alive(pid)).then_some(()),
    );
    wait_until("the job's process group to be gone", secs(3), || {
        group_members(pgid).is_empty().then_some(())
    });
}
