//! What a job may not do: leave processes behind (however it detached
//! them), or take more memory, CPU time, files or processes than its
//! profile's `limits` allow; and the job's own cgroup where a cgroup v2
//! subtree is delegated.

use std::fs;

use serde_json::Value;

use crate::support::cgroup::TestCgroup;
use crate::support::*;

/// Starts a `sleep` in a session of its own whose parent exits at once
/// (reparented to the monitor), writing its pid to `$OUT/escapee.pid`.
pub const SETSID_ESCAPEE: &str = r#"setsid sh -c 'sleep 300 & echo $! > "$OUT/escapee.pid"'"#;

/// Leaves the job's process group with `setpgrp` and double-forks: the
/// grandchild's parent exits, the grandchild sleeps on.
pub const SETPGRP_ESCAPEE: &str = r#"perl -e 'setpgrp(0, 0); my $p = fork; if ($p) { open(my $f, ">", "$ENV{OUT}/escapee.pid") or die; print $f "$p\n"; close $f; exit 0 } sleep 300'"#;

/// Waits until the escapee a job started is gone.
pub fn wait_escapee_gone(sb: &Sandbox, what: &str) {
    let escapee = wait_pid_file(&sb.out().join("escapee.pid"), secs(10));
    wait_until(
        &format!("the {what} escapee {escapee} to be dead"),
        secs(10),
        || (!pid_alive(escapee)).then_some(()),
    );
}

/// The first event named `op`.
fn event(job: &Job, op: &str) -> Value {
    job.events()
        .into_iter()
        .find(|e| e["op"] == op)
        .unwrap_or_else(|| panic!("no {op} event: {:?}", job.ops()))
}

/// A job that ends by itself leaves nothing running, however its
/// processes detached.
#[test]
fn processes_a_job_detached_die_when_it_exits() {
    for (what, escape) in [("setsid", SETSID_ESCAPEE), ("setpgrp", SETPGRP_ESCAPEE)] {
        let sb = Sandbox::new();
        let script = sb.script("detach", &format!("{escape}\necho started"));
        sb.configure(&ConfigToml::new(&["/bin/sh", &script]).unsandboxed());
        let _d = Daemon::start(&sb);
        sb.drop_prompt("proj", "detach", "detach and exit\n");
        let job = sb.wait_done("proj", "detach", secs(20));
        assert_eq!(job.state(), "succeeded", "{what}: {:#}", job.record);
        wait_escapee_gone(&sb, what);
        assert_eq!(job.str_field("containment"), Some("process-tree"));
        let killed = event(&job, "leftovers_killed");
        assert!(killed["processes"].as_u64() >= Some(1), "{killed}");
    }
}

#[test]
fn memory_limit_fails_an_allocation_beyond_it_with_the_reason() {
    let sb = Sandbox::new();
    let script = sb.script(
        "hog",
        r#"perl -e '$x = "a" x ($ARGV[0] * 1024 * 1024); print "allocated\n"' 512"#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script]).profile("limits", r#"{ memory = "64MiB" }"#),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "hog", "eat memory\n");
    let job = sb.wait_done("proj", "hog", secs(20));
    assert_eq!(job.state(), "failed", "{:#}", job.record);
    let reason = job.str_field("state_reason").unwrap_or_default();
    assert!(
        reason.contains("out of memory") && reason.contains("memory limit 64MiB"),
        "{reason}"
    );
    assert_eq!(job.str_field("outcome"), Some("failure"));
    let limits = event(&job, "limits");
    assert_eq!(limits["limits"]["memory"], "64MiB", "{limits}");
}

#[test]
fn cpu_time_limit_ends_a_busy_loop_failed_with_the_reason() {
    let sb = Sandbox::new();
    sb.configure(
        &ConfigToml::new(&["/bin/sh", "-c", "while :; do :; done"])
            .profile("limits", r#"{ cpu_time = "1s" }"#)
            .profile("timeout", r#""2m""#),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "spin", "spin\n");
    let job = sb.wait_done("proj", "spin", secs(90));
    assert_eq!(job.state(), "failed", "{:#}", job.record);
    assert_eq!(
        job.str_field("state_reason"),
        Some("CPU time limit 1s exceeded (SIGXCPU)"),
        "{:#}",
        job.record
    );
    assert_eq!(job.str_field("signal"), Some("SIGXCPU"));
    assert_eq!(job.str_field("outcome"), Some("failure"));
}

#[test]
fn open_files_and_processes_limits_are_set_on_the_job() {
    let sb = Sandbox::new();
    let script = sb.script(
        "ulimits",
        r#"grep -E '^Max (open files|processes) ' /proc/self/limits > "$OUT/ulimits"
# One file past the limit cannot be opened.
perl -e 'for (1..40) { open(my $f, "<", "/dev/null") or do { print "refused at $_\n"; exit 0 }; push @k, $f } print "all opened\n"' > "$OUT/opened""#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .profile("limits", "{ open_files = 20, processes = 50 }"),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "ulimits", "show limits\n");
    let job = sb.wait_done("proj", "ulimits", secs(20));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let shown = fs::read_to_string(sb.out().join("ulimits")).expect("ulimits written");
    let limit = |name: &str| -> Vec<String> {
        let line = shown
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default();
        line[name.len()..]
            .split_whitespace()
            .take(2)
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(limit("Max open files"), ["20", "20"], "{shown}");
    assert_eq!(limit("Max processes"), ["50", "50"], "{shown}");
    let opened = fs::read_to_string(sb.out().join("opened")).expect("opened written");
    assert!(opened.starts_with("refused at"), "{opened}");
}

/// Under root, RLIMIT_NPROC is not enforced; as another user it is.
#[test]
fn processes_limit_stops_a_fork_bomb_of_an_unprivileged_job() {
    if !nix::unistd::geteuid().is_root() || !on_path("setpriv") {
        say("SKIPPED: needs root and setpriv to run the job as nobody");
        return;
    }
    let sb = Sandbox::new();
    let script = sb.script(
        "forks",
        r#"setpriv --reuid=65534 --regid=65534 --clear-groups perl -e '
my $n = 0;
for (1..40) { my $p = fork; last unless defined $p; if (!$p) { sleep 30; exit } $n++ }
print "started $n\n"' > "$OUT/forks" 2>&1"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).profile("limits", "{ processes = 10 }"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "forks", "fork a lot\n");
    sb.wait_done("proj", "forks", secs(30));
    let out = fs::read_to_string(sb.out().join("forks")).expect("forks written");
    let started: usize = out
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    assert!(
        started < 40,
        "the limit of 10 processes stopped the forks: {out}"
    );
}

fn on_path(program: &str) -> bool {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join(program).is_file())
}

/// A test cgroup, or `None` after saying why the test is skipped.
fn cgroup_or_skip() -> Option<TestCgroup> {
    match TestCgroup::new() {
        Ok(cg) => Some(cg),
        Err(why) => {
            say(&format!("SKIPPED: cgroup v2 is unavailable here: {why}"));
            None
        }
    }
}

#[test]
fn a_job_runs_in_its_own_cgroup_abort_kills_it_whole_and_the_cgroup_is_removed() {
    let Some(cg) = cgroup_or_skip() else { return };
    let sb = Sandbox::new();
    // The escapee ignores SIGTERM: only the final kill ends it.
    let script = sb.script(
        "detach",
        r#"setsid sh -c 'trap "" TERM; sleep 300 & echo $! > "$OUT/escapee.pid"'
echo ready
while :; do sleep 0.1; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).unsandboxed());
    let _d = cg.start_daemon(&sb);
    sb.drop_prompt("proj", "cg", "run contained\n");
    let job = sb.wait_state("proj", "cg", "running", secs(15));
    let escapee = wait_pid_file(&sb.out().join("escapee.pid"), secs(10));
    let job_cg = cg.job(&job.id);
    assert!(job_cg.is_dir(), "{} exists", job_cg.display());
    let of_escapee = TestCgroup::of(escapee).expect("escapee's cgroup");
    assert!(
        of_escapee.ends_with(&format!("/job-{}", job.id)),
        "the escapee is in the job's cgroup: {of_escapee}"
    );
    assert_eq!(
        sb.job(&job.id)
            .and_then(|j| j.str_field("containment").map(str::to_owned))
            .as_deref(),
        Some("cgroup")
    );

    fs::write(job.dir.join("ABORT"), "stop\n").expect("write ABORT");
    let done = sb.wait_id(&job.id, "job to be aborted", secs(15), |j| j.is_terminal());
    assert_eq!(done.state(), "aborted", "{:#}", done.record);
    wait_until("the escapee to be dead", secs(10), || {
        (!pid_alive(escapee)).then_some(())
    });
    wait_until("the job's cgroup to be removed", secs(10), || {
        (!job_cg.exists()).then_some(())
    });
    let limits = event(&done, "limits");
    assert_eq!(limits["containment"], "cgroup", "{limits}");
    let killed = event(&done, "leftovers_killed");
    assert_eq!(killed["cgroup_kill"], true, "{killed}");
}

#[test]
fn under_a_cgroup_memory_max_is_set_and_an_oom_kill_is_reported() {
    let Some(cg) = cgroup_or_skip() else { return };
    if !controller_or_skip(&cg, "memory") {
        return;
    }
    let sb = Sandbox::new();
    // Touches its memory page by page, so RLIMIT_DATA (64MiB, counted on
    // the address space) does not stop it first: the cgroup's does.
    let script = sb.script(
        "hog",
        r#"perl -e 'my @keep; for (1..200) { push @keep, "a" x (1024 * 1024) }' "#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script]).profile("limits", r#"{ memory = "32MiB" }"#),
    );
    let _d = cg.start_daemon(&sb);
    sb.drop_prompt("proj", "oom", "be killed\n");
    let job = sb.wait_done("proj", "oom", secs(30));
    assert_eq!(job.state(), "failed", "{:#}", job.record);
    let reason = job.str_field("state_reason").unwrap_or_default();
    assert!(reason.contains("memory limit 32MiB"), "{reason}");
    let limits = event(&job, "limits");
    assert!(
        limits["cgroup_applied"]
            .to_string()
            .contains("memory.max=33554432"),
        "{limits}"
    );
}

#[test]
fn under_a_cgroup_pids_max_bounds_the_job() {
    let Some(cg) = cgroup_or_skip() else { return };
    if !controller_or_skip(&cg, "pids") {
        return;
    }
    let sb = Sandbox::new();
    let script = sb.script(
        "forks",
        r#"i=0
while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null
echo "started $(jobs -p | wc -l)" > "$OUT/forks""#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).profile("limits", "{ processes = 10 }"));
    let _d = cg.start_daemon(&sb);
    sb.drop_prompt("proj", "forks", "fork a lot\n");
    let job = sb.wait_done("proj", "forks", secs(30));
    let limits = event(&job, "limits");
    assert!(
        limits["cgroup_applied"].to_string().contains("pids.max=10"),
        "{limits}"
    );
    let out = fs::read_to_string(sb.out().join("forks")).expect("forks written");
    assert!(!out.contains("started 40"), "{out}");
}

/// Whether cgroup v2 offers `controller` here; if not, say SKIPPED and why.
fn controller_or_skip(cg: &TestCgroup, controller: &str) -> bool {
    if cg.has_controller(controller) {
        return true;
    }
    say(&format!(
        "SKIPPED: the {controller} controller is not available in cgroup v2 here ({} offers: {:?})",
        cg.base.display(),
        fs::read_to_string(cg.base.join("cgroup.controllers"))
            .unwrap_or_default()
            .trim()
    ));
    false
}
