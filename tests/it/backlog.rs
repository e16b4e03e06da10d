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
