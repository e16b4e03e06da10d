//! A backlog: far more prompts at once than jobs may run. Every one runs
//! exactly once, and once the backlog has drained the daemon gives the
//! memory its tables grew to back (the footprint promise of an idle daemon
//! after a burst; its size is measured by the benchmark harness).

use std::fs;

use crate::support::*;

#[test]
fn a_backlog_runs_every_prompt_once_and_its_memory_is_given_back_when_drained() {
    const PROMPTS: usize = 120;
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]).global("max_jobs", "2"));
    let d = Daemon::start(&sb);
    let staging = sb.base.join("staging");
    fs::create_dir_all(&staging).expect("staging");
    let dir = sb.project_dir("burst");
    fs::create_dir_all(&dir).expect("project folder");
    for i in 0..PROMPTS {
        let staged = staging.join(format!("p{i:03}.tmp"));
        fs::write(&staged, format!("prompt {i}\n")).expect("stage");
    }
    // Renamed in as fast as possible: most wait in the queue.
    for i in 0..PROMPTS {
        let staged = staging.join(format!("p{i:03}.tmp"));
        fs::rename(&staged, dir.join(format!("p{i:03}.prompt.md"))).expect("drop");
    }
    for i in 0..PROMPTS {
        let job = sb.wait_done("burst", &format!("p{i:03}"), secs(120));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    }
    for i in 0..PROMPTS {
        let runs = sb.jobs_for("burst", &format!("p{i:03}"));
        assert_eq!(runs.len(), 1, "p{i:03} ran {} times", runs.len());
    }
    wait_until(
        "the drained backlog's memory to be given back",
        secs(10),
        || {
            d.stderr()
                .contains("a backlog drained; its memory was given back")
                .then_some(())
        },
    );
}

#[test]
fn a_rescan_that_finds_hundreds_of_prompts_claims_them_all_within_few_descriptors() {
    const PROMPTS: usize = 600;
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]).global("max_jobs", "2"));
    // Nothing starts: every claim waits, and the start-up scan finds all.
    let out = sb.run(&["pause", "--reason", "a backlog"]);
    assert_eq!(out.code(), 0, "{out:?}");
    for i in 0..PROMPTS {
        sb.drop_prompt("burst", &format!("p{i:03}"), format!("prompt {i}\n"));
    }
    // One group commit of 600 claims owes about 1,800 syncs: with a
    // descriptor each, this daemon would run out of them.
    let mut d = daemon_with_fd_limit(&sb, 256, 256);
    d.wait_ready(&sb, secs(10));
    wait_until("every prompt claimed", secs(30), || {
        (sb.jobs().len() == PROMPTS).then_some(())
    });
    assert!(
        sb.inbox_files()
            .iter()
            .all(|p| p.to_string_lossy().ends_with(".running.md"))
    );
    assert!(
        !d.stderr().contains("Too many open files"),
        "{}",
        d.stderr()
    );
}

#[test]
fn the_daemon_raises_its_descriptor_limit_and_jobs_get_the_one_it_was_given() {
    let sb = Sandbox::new();
    let script = sb.script("limit", r#"ulimit -n > "$OUT/limit""#);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let mut d = daemon_with_fd_limit(&sb, 200, 4096);
    d.wait_ready(&sb, secs(10));
    let limits = fs::read_to_string(format!("/proc/{}/limits", d.pid)).expect("limits");
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    assert!(
        open_files.split_whitespace().nth(3) == Some("4096"),
        "{open_files}"
    );
    sb.drop_prompt("proj", "a", "x\n");
    let job = sb.wait_done("proj", "a", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let seen = fs::read_to_string(sb.out().join("limit")).expect("the job's limit");
    assert_eq!(seen.trim(), "200");
}

/// A daemon started with `soft` and `hard` limits on open descriptors.
fn daemon_with_fd_limit(sb: &Sandbox, soft: u64, hard: u64) -> Daemon {
    Daemon::spawn_with(sb, &[], move |cmd| {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe and touches no memory of ours.
        unsafe {
            cmd.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    })
}
