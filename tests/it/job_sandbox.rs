//! The job's sandbox: a job cannot write the root's records, can write its
//! workdir, `affected` and the inbox, and none of its processes outlives
//! its monitor, however it forked. Each test has the job do the attack
//! itself, as a careless agent would.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::support::*;

/// A job script that tries to write each protected place and writes what
/// happened to `$OUT/tries`, one `<what>: ok|refused` line each.
const ATTACKS: &str = r#"
[ "$JOBWARDEN_NAME" = attacker ] || exit 0
R="$JW_ROOT"
try() { what=$1; shift; if "$@" 2>/dev/null; then echo "$what: ok" >> "$OUT/tries"; else echo "$what: refused" >> "$OUT/tries"; fi; }
try daemon.lock sh -c ": > '$R/daemon.lock'"
try daemon.json sh -c "echo '{}' > '$R/daemon.json'"
try ledger.db sh -c "echo garbage >> '$R/ledger.db'"
try ledger-link ln -s /tmp "$R/ledger.db-wal.x"
try control mkdir "$R/control/jobmark"
try archive mkdir -p "$R/archive/jobmark"
try runs mkdir "$R/runs/jobmark"
try own-record sh -c "echo '{}' > '$JOBWARDEN_RUN_DIR/job.json'"
try own-journal sh -c "mv '$JOBWARDEN_RUN_DIR/events.jsonl' '$JOBWARDEN_RUN_DIR/x'"
try new-at-root touch "$R/jobmark"
try workdir sh -c "echo made > made-here"
try affected sh -c "echo made-here >> '$JOBWARDEN_RUN_DIR/affected'"
try submit sh -c "echo 'a follow-up' | '$JW_BIN' --root '$R' submit - --project proj --name follow"
echo done >> "$OUT/tries"
"#;

fn tries(sb: &Sandbox) -> Vec<String> {
    fs::read_to_string(sb.out().join("tries"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Every attack of [`ATTACKS`] was refused, what the job may do it did,
/// and it ran in its sandbox.
fn assert_attacks_refused(sb: &Sandbox, job: &Job) {
    let tries = tries(sb);
    assert_eq!(tries.last().map(String::as_str), Some("done"), "{tries:?}");
    for protected in [
        "daemon.lock",
        "daemon.json",
        "ledger.db",
        "ledger-link",
        "control",
        "archive",
        "runs",
        "own-record",
        "own-journal",
        "new-at-root",
    ] {
        assert!(
            tries.contains(&format!("{protected}: refused")),
            "the job could write {protected}: {tries:?}"
        );
    }
    for allowed in ["workdir", "affected", "submit"] {
        assert!(
            tries.contains(&format!("{allowed}: ok")),
            "the job could not {allowed}: {tries:?}\n{}",
            job.log()
        );
    }
    let limits = job
        .events()
        .into_iter()
        .find(|e| e["op"] == "limits")
        .expect("limits event");
    assert_eq!(limits["sandbox"], "namespaces", "{limits}");
}

fn attack_config(sb: &Sandbox, script: &str) -> ConfigToml {
    ConfigToml::new(&["/bin/sh", script])
        .env("JW_ROOT", &sb.root.to_string_lossy())
        .env("JW_BIN", BIN)
}

#[test]
fn a_sandboxed_job_writes_its_workdir_affected_and_the_inbox_and_nothing_else_of_the_root() {
    let sb = Sandbox::new();
    let script = sb.script("attacks", ATTACKS);
    sb.configure(&attack_config(&sb, &script));
    let _d = Daemon::start(&sb);
    let lock_before = fs::metadata(sb.root.join("daemon.lock")).expect("daemon.lock");
    sb.drop_prompt("proj", "attacker", "try everything\n");
    let job = sb.wait_done("proj", "attacker", secs(20));
    assert_eq!(job.state(), "succeeded", "{}", job.log());
    assert_attacks_refused(&sb, &job);
    for mark in [
        "jobmark",
        "archive/jobmark",
        "runs/jobmark",
        "control/jobmark",
        "ledger.db-wal.x",
    ] {
        assert!(
            fs::symlink_metadata(sb.root.join(mark)).is_err(),
            "{mark} was made"
        );
    }
    let lock_after = fs::metadata(sb.root.join("daemon.lock")).expect("daemon.lock");
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&lock_before),
        std::os::unix::fs::MetadataExt::ino(&lock_after)
    );
    let workdir = job.str_field("workdir").expect("workdir");
    assert_eq!(
        fs::read_to_string(Path::new(workdir).join("made-here"))
            .ok()
            .as_deref(),
        Some("made\n")
    );
    let affected = fs::read_to_string(job.dir.join("affected")).expect("affected");
    assert_eq!(affected, "made-here\n");
    let follow = sb.wait_done("proj", "follow", secs(20));
    assert_eq!(
        follow.state(),
        "succeeded",
        "the follow-up a job submitted runs"
    );
    let status = sb.run(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("status json");
    assert_eq!(status["daemon"]["sandbox"], "namespaces", "{status}");
}

/// A job that starts processes every way it can leave its group and
/// session, each writing its pid to `$OUT/pids`, then waits.
const ESCAPES: &str = r#"
setsid sh -c 'echo $$ >> "$OUT/pids"; exec sleep 300' &
setsid sh -c '(exec sh -c "echo \$\$ >> \"\$OUT/pids\"; exec sleep 300") &' &
env -i OUT="$OUT" /bin/sh -c 'echo $$ >> "$OUT/pids"; exec sleep 300' &
perl -e 'if (fork) { exit } setpgrp; open(my $f, ">>", "$ENV{OUT}/pids"); print $f "$$\n"; close $f; exec "sleep", "300"'
echo $$ >> "$OUT/pids"
exec sleep 300
"#;

/// Once the job has written `n` pids: the pids of those processes seen
/// from outside its namespace.
fn job_processes(sb: &Sandbox, n: usize) -> Vec<i32> {
    let inner = wait_until("the job's processes to write their pids", secs(10), || {
        let p = pids(sb);
        (p.len() == n).then_some(p)
    });
    wait_until("the job's processes seen from outside", secs(5), || {
        let o = outer_pids(sb, &inner);
        (o.len() == n).then_some(o)
    })
}

fn pids(sb: &Sandbox) -> Vec<i32> {
    fs::read_to_string(sb.out().join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The pid, seen from the test, of each process whose pid in the job's
/// namespace is in `inner`: found by the sandbox variable every job has
/// and by `NSpid` in `/proc/<pid>/status`.
fn outer_pids(sb: &Sandbox, inner: &[i32]) -> Vec<i32> {
    let mut found = Vec::new();
    for pid in all_pids() {
        let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let nspid: Vec<i32> = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let env = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        // `JW_IT_SANDBOX` (every job's) or `OUT` (the `env -i` one's).
        let ours = String::from_utf8_lossy(&env).contains(&sb.base.to_string_lossy().into_owned());
        if ours && nspid.len() > 1 && nspid.last().is_some_and(|p| inner.contains(p)) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn kill_9_of_a_monitor_leaves_no_process_of_its_job_alive() {
    let sb = Sandbox::new();
    let script = sb.script("escapes", ESCAPES);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "escaper", "escape\n");
    let job = sb.wait_state("proj", "escaper", "running", secs(20));
    let outer = job_processes(&sb, 5);
    let monitor = job.int_field("monitor_pid").expect("monitor pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9 the monitor");
    wait_until("every process of the job dead", secs(5), || {
        outer.iter().all(|&p| !pid_alive(p)).then_some(())
    });
    let ended = sb.wait_id(
        &job.id,
        "the first attempt to end",
        secs(20),
        Job::is_terminal,
    );
    assert_eq!(ended.state(), "interrupted", "{:#}", ended.record);
}

#[test]
fn a_profile_with_sandbox_false_runs_its_job_as_before() {
    let sb = Sandbox::new();
    let script = sb.script(
        "unsandboxed",
        r#"touch "$JW_ROOT/jobmark" && echo wrote-the-root"#,
    );
    sb.configure(&attack_config(&sb, &script).profile("sandbox", "false"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "free", "write\n");
    let job = sb.wait_done("proj", "free", secs(20));
    assert_eq!(job.state(), "succeeded", "{}", job.log());
    assert!(sb.root.join("jobmark").exists(), "{}", job.log());
    let limits = job
        .events()
        .into_iter()
        .find(|e| e["op"] == "limits")
        .expect("limits event");
    assert_eq!(limits["sandbox"], "off", "{limits}");
}

#[test]
fn an_abort_reaches_every_process_of_a_sandboxed_job_through_its_init() {
    let sb = Sandbox::new();
    // Each process says it got SIGTERM, then exits.
    let script = sb.script(
        "terms",
        r#"
setsid sh -c 'trap "echo child-term >> \"$OUT/terms\"; exit 0" TERM; while :; do sleep 0.05; done' &
trap 'echo leader-term >> "$OUT/terms"; wait; exit 3' TERM
echo up >> "$OUT/up"
while :; do sleep 0.05; done
"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "terms", "wait\n");
    let job = sb.wait_state("proj", "terms", "running", secs(20));
    wait_until("the job is up", secs(10), || {
        sb.out().join("up").exists().then_some(())
    });
    // Its init is the small program beside jobwarden, not all of jobwarden.
    let init = job.int_field("pid").expect("the init's pid");
    let exe = fs::read_link(format!("/proc/{init}/exe")).expect("the init's program");
    assert_eq!(
        exe.file_name().and_then(|n| n.to_str()),
        Some("jobwarden-init"),
        "{}",
        exe.display()
    );
    let out = sb.run(&["abort", &job.id]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let ended = sb.wait_done("proj", "terms", secs(20));
    assert_eq!(ended.state(), "aborted");
    let terms = fs::read_to_string(sb.out().join("terms")).unwrap_or_default();
    assert!(terms.contains("leader-term"), "{terms}");
    assert!(terms.contains("child-term"), "{terms}");
    assert_eq!(
        ended.int_field("exit_code"),
        Some(3),
        "its own exit code is kept"
    );
}

#[test]
fn a_workdir_among_the_roots_records_is_a_setup_failure_naming_it() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]).profile("workdir", "\"archive\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "bad-workdir", "x\n");
    let job = sb.wait_done("proj", "bad-workdir", secs(20));
    assert_eq!(job.state(), "setup_failed", "{}", job.log());
    let reason = job.str_field("state_reason").unwrap_or_default();
    assert!(
        reason.contains("archive") && reason.contains("sandbox"),
        "{reason}"
    );
}

/// As a user other than root the sandbox is an unprivileged user
/// namespace; the daemon runs as `nobody` on a root it owns.
#[test]
fn an_unprivileged_daemons_jobs_run_in_an_unprivileged_sandbox() {
    if !nix::unistd::geteuid().is_root() {
        say("SKIPPED: the unprivileged sandbox test starts its daemon as nobody, which needs root");
        return;
    }
    let sb = Sandbox::new();
    let bin = sb.base.join("jobwarden");
    fs::copy(BIN, &bin).expect("copy the binary");
    let script = sb.script("attacks", ATTACKS);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .env("JW_ROOT", &sb.root.to_string_lossy())
            .env("JW_BIN", &bin.to_string_lossy()),
    );
    let nobody = nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .expect("a user named nobody");
    chown_tree(&sb.base, nobody.uid, nobody.gid);
    let mut cmd = std::process::Command::new(&bin);
    cmd.args([
        "--root",
        &sb.root.to_string_lossy(),
        "--config",
        &sb.config.to_string_lossy(),
        "daemon",
    ])
    .uid(nobody.uid.as_raw())
    .gid(nobody.gid.as_raw())
    .env("HOME", &sb.base)
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::from(
        fs::File::create(sb.base.join("daemon.log")).expect("log"),
    ));
    let mut daemon = ChildGuard(cmd.spawn().expect("start the daemon as nobody"));
    wait_until("the daemon is up", secs(10), || {
        sb.root.join("daemon.json").exists().then_some(())
    });
    let project = sb.project_dir("proj");
    fs::create_dir_all(&project).expect("project folder");
    chown_tree(&sb.root.join("inbox"), nobody.uid, nobody.gid);
    sb.drop_prompt("proj", "attacker", "try everything\n");
    let job = sb.wait_done("proj", "attacker", secs(30));
    let log = fs::read_to_string(sb.base.join("daemon.log")).unwrap_or_default();
    assert_eq!(
        job.state(),
        "succeeded",
        "{}\n{}",
        job.log(),
        tail(&log, 30)
    );
    assert_attacks_refused(&sb, &job);
    let _ = daemon.0.kill();
    let _ = daemon.0.wait();
}

/// Kills its daemon if a test panics before it does.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chown_tree(dir: &Path, uid: nix::unistd::Uid, gid: nix::unistd::Gid) {
    let _ = nix::unistd::chown(dir, Some(uid), Some(gid));
    for entry in fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).expect("metadata");
        if meta.is_dir() {
            chown_tree(&path, uid, gid);
        } else {
            let _ = nix::unistd::chown(&path, Some(uid), Some(gid));
        }
    }
}

#[test]
fn an_abort_of_a_sandboxed_tree_that_ignores_sigterm_ends_in_sigkill_with_nothing_left() {
    let sb = Sandbox::new();
    let script = sb.script(
        "stubborn",
        r#"trap '' TERM
setsid sh -c 'trap "" TERM; echo $$ >> "$OUT/pids"; while :; do sleep 0.05; done' &
echo $$ >> "$OUT/pids"
while :; do sleep 0.05; done
"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).global("abort_grace", "\"300ms\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "stubborn", "ignore TERM\n");
    let job = sb.wait_state("proj", "stubborn", "running", secs(20));
    let outer = job_processes(&sb, 2);
    fs::write(job.dir.join("ABORT"), "").expect("write ABORT");
    let done = sb.wait_done("proj", "stubborn", secs(20));
    assert_eq!(done.state(), "aborted", "{:#}", done.record);
    assert_eq!(
        done.str_field("signal"),
        Some("SIGKILL"),
        "{:#}",
        done.record
    );
    wait_until("nothing of the job left", secs(5), || {
        outer.iter().all(|&p| !pid_alive(p)).then_some(())
    });
}

/// Where the machine refuses the namespaces (here: a daemon in a user
/// namespace that allows no mount namespace), jobs run as before, and the
/// `limits` event and `status` say why.
#[test]
fn where_namespaces_are_refused_jobs_run_without_a_sandbox_and_say_why() {
    let sb = Sandbox::new();
    let script = sb.script("free", r#"touch "$JW_ROOT/jobmark" && echo ran"#);
    sb.configure(&attack_config(&sb, &script));
    let refuse = "echo 0 > /proc/sys/user/max_mnt_namespaces && exec \"$0\" \"$@\"";
    let _d = Daemon::spawn_with(&sb, &[], |cmd| {
        let program = cmd.get_program().to_owned();
        let args: Vec<_> = cmd.get_args().map(ToOwned::to_owned).collect();
        let mut wrapped = std::process::Command::new("unshare");
        wrapped
            .args(["--user", "--map-root-user", "sh", "-c", refuse])
            .arg(program)
            .args(args);
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => wrapped.env(k, v),
                None => wrapped.env_remove(k),
            };
        }
        *cmd = wrapped;
    });
    sb.drop_prompt("proj", "free", "run\n");
    let job = sb.wait_done("proj", "free", secs(30));
    assert_eq!(job.state(), "succeeded", "{}", job.log());
    assert!(sb.root.join("jobmark").exists(), "it ran as before");
    let limits = job
        .events()
        .into_iter()
        .find(|e| e["op"] == "limits")
        .expect("limits event");
    assert_eq!(limits["sandbox"], "unavailable", "{limits}");
    let why = limits["no_sandbox"].as_str().unwrap_or_default();
    assert!(why.contains("No space left"), "{limits}");
    let status = sb.run(&["status"]);
    assert!(
        status.stdout.contains("sandbox") && status.stdout.contains("UNAVAILABLE"),
        "{}",
        status.stdout
    );
}
