//! Reloading the config of a running daemon: SIGHUP (what `systemctl
//! reload` sends) and `jobwarden reload`. A valid edit takes effect for jobs
//! not yet started, without a restart; an invalid one is refused with every
//! error while the old config keeps working; running jobs are untouched;
//! systemd hears `RELOADING=1` … `READY=1`; a daemon is found by its lock,
//! never by a pid a file names.

use std::fs;
use std::os::unix::net::UnixDatagram;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::notify::receive_until;
use crate::support::*;

/// A job that runs until `$OUT/release-<name>` exists, after writing
/// `$OUT/started-<name>` and saying which command it is.
const GATE: &str = r#"name="$1"
echo "gate command for $name"
touch "$OUT/started-$name"
while [ ! -e "$OUT/release-$name" ]; do sleep 0.05; done"#;

fn sighup(d: &Daemon) {
    kill(Pid::from_raw(d.pid), Signal::SIGHUP).expect("SIGHUP the daemon");
}

fn release(sb: &Sandbox, name: &str) {
    fs::write(sb.out().join(format!("release-{name}")), "").expect("release");
}

fn daemon_json(sb: &Sandbox) -> Value {
    serde_json::from_slice(&fs::read(sb.root.join("daemon.json")).expect("daemon.json"))
        .expect("daemon.json parses")
}

/// The daemon's last reload, once its number is `generation`.
fn wait_reload(sb: &Sandbox, generation: u64) -> Value {
    wait_until(
        &format!("reload #{generation} in daemon.json"),
        secs(10),
        || {
            let last = daemon_json(sb)["config"]["last_reload"].clone();
            (last["generation"].as_u64() == Some(generation)).then_some(last)
        },
    )
}

fn status_json(sb: &Sandbox) -> Value {
    let out = sb.run(&["status", "--json"]);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("status --json ({e}): {out:?}"))
}

#[test]
fn sighup_applies_a_valid_edit_to_jobs_not_yet_started() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", GATE);
    let review = sb.script("review", r#"echo "review profile ran""#);
    let base = ConfigToml::new(&["/bin/sh", &gate, "{name}"]).global("max_jobs", "1");
    sb.configure(&base);
    let mut d = Daemon::start(&sb);

    sb.drop_prompt("proj", "first", "x\n");
    sb.wait_state("proj", "first", "running", secs(15));
    sb.drop_prompt("proj", "second", "x\n");
    let second = sb.wait_state("proj", "second", "queued", secs(15));
    assert_never(
        "a second job starting beside the first",
        millis(600),
        || sb.out().join("started-second").exists(),
    );

    sb.configure(&base.clone().global("max_jobs", "2").extra(&format!(
        "[profiles.review]\ncommand = {}\n",
        q_argv(&["/bin/sh", &review])
    )));
    sighup(&d);
    let last = wait_reload(&sb, 1);
    assert_eq!(last["result"], "applied", "{last}");
    let changes = last["changes"].to_string();
    assert!(changes.contains("max_jobs: 1 → 2"), "{changes}");
    assert!(changes.contains("profiles.review: added"), "{changes}");

    // The slot the reload opened starts the queued job, same daemon.
    sb.wait_id(&second.id, "the queued job to start", secs(15), |j| {
        j.state() == "running"
    });
    assert!(d.is_running(), "the daemon survived the reload");
    assert_eq!(daemon_json(&sb)["pid"].as_i64(), Some(d.pid as i64));

    // A new profile is usable by a new prompt.
    sb.drop_prompt("proj", "reviewed", "---\nprofile: review\n---\nbody\n");
    release(&sb, "first");
    release(&sb, "second");
    let reviewed = sb.wait_done("proj", "reviewed", secs(15));
    assert_eq!(reviewed.state(), "succeeded", "{:?}", reviewed.record);
    assert!(
        reviewed.log().contains("review profile ran"),
        "{}",
        reviewed.log()
    );
    let stderr = d.stderr();
    assert!(
        stderr.contains("config reloaded: max_jobs: 1 → 2"),
        "{stderr}"
    );
}

#[test]
fn an_invalid_edit_is_refused_with_every_error_and_the_old_config_keeps_working() {
    let sb = Sandbox::new();
    let good = ConfigToml::new(&["sh", "-c", "echo old config ran; cat"]);
    sb.configure(&good);
    let _d = Daemon::start(&sb);

    sb.configure(
        &good
            .clone()
            .global("max_jobs", "0")
            .global("heartbeat_interval", "\"soon\""),
    );
    let out = sb.run(&["reload"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("refused"), "{out:?}");
    for fault in ["max_jobs = 0", "heartbeat_interval = \"soon\""] {
        assert!(out.stderr.contains(fault), "{fault} in {out:?}");
    }
    let json = sb.run(&["reload", "--json"]);
    assert_eq!(json.code(), 2, "{json:?}");
    let answer: Value = serde_json::from_str(&json.stdout).expect("reload --json");
    assert_eq!(answer["result"], "refused");
    assert_eq!(
        answer["errors"].as_array().map(Vec::len),
        Some(2),
        "{answer}"
    );

    // `status` shows the refusal, both errors, in text and JSON.
    let text = sb.run(&["status"]);
    assert_eq!(text.code(), 0, "{text:?}");
    assert!(text.stdout.contains("REFUSED"), "{}", text.stdout);
    for fault in ["max_jobs = 0", "heartbeat_interval = \"soon\""] {
        assert!(text.stdout.contains(fault), "{fault} in {}", text.stdout);
    }
    let status = status_json(&sb);
    let config = &status["config"];
    assert_eq!(config["last_reload"]["result"], "refused", "{config}");
    assert_eq!(
        config["last_reload"]["errors"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(config["changed_on_disk"], true, "{config}");

    // The old config stays in force.
    sb.drop_prompt("proj", "still", "x\n");
    let job = sb.wait_done("proj", "still", secs(15));
    assert_eq!(job.state(), "succeeded");
    assert!(job.log().contains("old config ran"), "{}", job.log());

    // Until a later reload succeeds.
    sb.configure(&good.clone().global("max_jobs", "3"));
    let fixed = sb.run(&["reload"]);
    assert_eq!(fixed.code(), 0, "{fixed:?}");
    assert!(fixed.stdout.contains("max_jobs: 4 → 3"), "{}", fixed.stdout);
    let config = status_json(&sb)["config"].clone();
    assert_eq!(config["last_reload"]["result"], "applied", "{config}");
    assert_eq!(config["changed_on_disk"], false, "{config}");
    assert!(!sb.run(&["status"]).stdout.contains("REFUSED"));
}

#[test]
fn a_running_job_is_untouched_by_a_reload() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", GATE);
    let other = sb.script("other", r#"echo "new command""#);
    let base = ConfigToml::new(&["/bin/sh", &gate, "{name}"])
        .profile("timeout", "\"30s\"")
        .global("max_jobs", "1");
    sb.configure(&base);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "long", "x\n");
    let before = sb.wait_state("proj", "long", "running", secs(15));
    sb.drop_prompt("proj", "waiting", "x\n");
    sb.wait_state("proj", "waiting", "queued", secs(15));

    // The reload changes the very profile the job runs on.
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &other])
            .profile("timeout", "\"1s\"")
            .global("max_jobs", "1")
            .global("abort_grace", "\"100ms\""),
    );
    let out = sb.run(&["reload"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        out.stdout.contains("profiles.default: changed"),
        "{}",
        out.stdout
    );

    // Past the new timeout, the job runs on, on its old command.
    assert_never("the running job changing", secs(2), || {
        let now = sb.read_job(&before.id);
        now["state"] != "running" || now["pid"] != before.record["pid"]
    });
    release(&sb, "long");
    let done = sb.wait_done("proj", "long", secs(15));
    assert_eq!(done.state(), "succeeded", "{:?}", done.record);
    assert_eq!(done.record["monitor_pid"], before.record["monitor_pid"]);
    assert!(
        done.log().contains("gate command for long"),
        "{}",
        done.log()
    );

    // A job queued before the reload starts on the new profile.
    let waiting = sb.wait_done("proj", "waiting", secs(15));
    assert_eq!(waiting.state(), "succeeded", "{:?}", waiting.record);
    assert!(waiting.log().contains("new command"), "{}", waiting.log());
}

#[test]
fn a_queued_job_whose_profile_is_removed_is_named_and_fails_with_the_reason() {
    let sb = Sandbox::new();
    let gate = sb.script("gate", GATE);
    let base = ConfigToml::new(&["/bin/sh", &gate, "{name}"]).global("max_jobs", "1");
    sb.configure(
        &base
            .clone()
            .extra("[profiles.extra]\ncommand = [\"true\"]\n"),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "blocker", "x\n");
    sb.wait_state("proj", "blocker", "running", secs(15));
    sb.drop_prompt("proj", "orphan", "---\nprofile: extra\n---\nx\n");
    sb.wait_state("proj", "orphan", "queued", secs(15));

    sb.configure(&base);
    let out = sb.run(&["reload"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        out.stdout.contains("profiles.extra: removed"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("warning: profile \"extra\" was removed but 1 queued job uses it"),
        "{}",
        out.stdout
    );
    release(&sb, "blocker");
    let orphan = sb.wait_done("proj", "orphan", secs(15));
    assert_eq!(orphan.state(), "setup_failed", "{:?}", orphan.record);
    let reason = orphan.str_field("state_reason").unwrap_or_default();
    assert!(reason.contains("\"extra\""), "{reason}");
}

#[test]
fn reload_with_no_daemon_exits_1_and_signals_no_pid_a_file_names() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let never = sb.run(&["reload"]);
    assert_eq!(never.code(), 1, "{never:?}");
    assert!(never.stderr.contains("no daemon runs"), "{never:?}");

    // A daemon.json left behind names a live process that is not a daemon
    // holding the lock: it must not be signalled.
    let mut bystander = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let mut d = Daemon::start(&sb);
    d.sigterm();
    d.wait_exit(secs(10));
    let mut state = daemon_json(&sb);
    state["pid"] = Value::from(bystander.id());
    fs::write(sb.root.join("daemon.json"), state.to_string()).expect("write daemon.json");
    let out = sb.run(&["reload"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(
        bystander.try_wait().expect("try_wait").is_none(),
        "the process daemon.json named was signalled"
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
}

#[test]
fn sighup_no_longer_kills_the_daemon_and_systemd_hears_reloading_then_ready() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let path = sb.base.join("notify.sock");
    let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
    let socket = path.display().to_string();
    let mut d = Daemon::start_with_env(&sb, &[("NOTIFY_SOCKET", &socket)]);
    receive_until(&sock, "READY=1 at start", |m| m.contains("READY=1"));

    sighup(&d);
    let reloading = receive_until(&sock, "RELOADING=1", |m| m.contains("RELOADING=1"));
    let msg = reloading.last().expect("a message");
    let usec = msg
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .unwrap_or_else(|| panic!("no MONOTONIC_USEC beside RELOADING=1: {msg:?}"));
    assert!(usec.parse::<u64>().is_ok_and(|n| n > 0), "{msg:?}");
    receive_until(&sock, "READY=1 after the reload", |m| m.contains("READY=1"));
    wait_reload(&sb, 1);

    // Signals sent at once may merge into one: each is waited for.
    for generation in 2..=4 {
        sighup(&d);
        wait_reload(&sb, generation);
    }
    assert!(d.is_running(), "SIGHUP stopped the daemon");
    sb.drop_prompt("proj", "after-hup", "x\n");
    assert_eq!(
        sb.wait_done("proj", "after-hup", secs(15)).state(),
        "succeeded"
    );
}

#[test]
fn status_says_when_the_config_changed_on_disk() {
    let sb = Sandbox::new();
    let cfg = ConfigToml::new(&["cat"]);
    sb.configure(&cfg);
    let _d = Daemon::start(&sb);
    let config = status_json(&sb)["config"].clone();
    assert_eq!(config["changed_on_disk"], false, "{config}");
    assert_eq!(config["source"], sb.config.display().to_string());
    assert!(!sb.run(&["status"]).stdout.contains("changed on disk"));

    sb.configure(&cfg.clone().global("settle", "\"300ms\""));
    assert_eq!(status_json(&sb)["config"]["changed_on_disk"], true);
    let text = sb.run(&["status"]).stdout;
    assert!(
        text.contains("config changed on disk since load; run `jobwarden reload`"),
        "{text}"
    );
    let out = sb.run(&["reload"]);
    assert!(
        out.stdout.contains("settle: \"200ms\" → \"300ms\""),
        "{out:?}"
    );
    assert_eq!(status_json(&sb)["config"]["changed_on_disk"], false);
}

#[test]
fn a_change_that_needs_a_restart_is_named_and_the_rest_applied() {
    let sb = Sandbox::new();
    let cfg = ConfigToml::new(&["cat"]);
    sb.configure(&cfg);
    let _d = Daemon::start(&sb);
    sb.configure(
        &cfg.clone()
            .global("watch", "\"rescan\"")
            .global("max_jobs", "2"),
    );
    let out = sb.run(&["reload", "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let answer: Value = serde_json::from_str(&out.stdout).expect("reload --json");
    assert_eq!(answer["result"], "applied");
    assert!(
        answer["changes"].to_string().contains("max_jobs: 4 → 2"),
        "{answer}"
    );
    let restart = answer["restart_needed"].to_string();
    assert!(restart.contains("watch: inotify → rescan"), "{answer}");
    // Still watching with inotify until restarted.
    assert_eq!(daemon_json(&sb)["watch"], "inotify");
    let text = sb.run(&["status"]).stdout;
    assert!(text.contains("restart needed for watch"), "{text}");
}

/// `systemctl reload` waits for the daemon's answer and fails on a
/// refusal (proven under a real systemd in `under_systemd/reload.rs`).
#[test]
fn the_units_reload_through_jobwarden_reload() {
    for (unit, bin) in [
        ("systemd/jobwarden.service", "/usr/local/bin/jobwarden"),
        ("systemd/jobwarden-user.service", "%h/.local/bin/jobwarden"),
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(unit);
        let text = fs::read_to_string(&path).expect("read unit");
        let want = format!("ExecReload={bin} reload");
        assert!(text.lines().any(|l| l == want), "{unit} has no `{want}`");
    }
}

/// With the config file broken mid-edit, the daemon runs on the one it
/// loaded, and the operator still sees and stops its jobs: the commands
/// that read the root or pull a lever say what is wrong with the file and
/// go on; the ones that need the config's meaning refuse.
#[test]
fn a_broken_config_file_leaves_the_operator_able_to_see_and_stop_jobs() {
    let sb = Sandbox::new();
    let good = ConfigToml::new(&["sh", "-c", "echo started; sleep 600"]);
    sb.configure(&good);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "long", "x\n");
    let job = sb.wait_state("proj", "long", "running", secs(15));
    sb.configure(&good.clone().global("max_jobs", "0"));

    for args in [
        vec!["jobs"],
        vec!["show", job.id.as_str()],
        vec!["logs", job.id.as_str()],
        vec!["events", job.id.as_str()],
        vec!["pause"],
        vec!["resume"],
        // Its profiles are not known while the file is broken: taken as asked.
        vec!["pause", "--profile", "review"],
        vec!["resume", "--profile", "review"],
    ] {
        let out = sb.run(&args);
        assert_eq!(out.code(), 0, "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("warning") && out.stderr.contains("max_jobs = 0"),
            "{args:?} names the fault: {out:?}"
        );
    }
    let submit = sb.run_with_stdin(&["submit", "-", "--project", "proj"], b"y\n");
    assert_eq!(submit.code(), 2, "{submit:?}");
    assert!(submit.stderr.contains("max_jobs = 0"), "{submit:?}");

    let out = sb.run(&["abort", job.id.as_str(), "--wait"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let job = sb.wait_id(&job.id, "the job to be aborted", secs(15), |j| {
        j.is_terminal()
    });
    assert_eq!(job.state(), "aborted", "{:#}", job.record);
}

/// Routes are told apart by their pattern and hooks by their name: a route
/// inserted first is one route added (not every route after it changed),
/// and a `[[notify]]` hook added or removed is a change, not "no change".
#[test]
fn a_reload_names_a_route_inserted_first_and_each_notify_hook_added_or_removed() {
    let sb = Sandbox::new();
    let route = |m: &str| format!("[[route]]\nmatch = \"{m}\"\nprofile = \"default\"\n");
    let hook = "[[notify]]\nname = \"ops\"\non = [\"failed\"]\ncommand = [\"true\"]\n";
    let base = ConfigToml::new(&["cat"]);
    sb.configure(
        &base
            .clone()
            .extra(&format!("{}{}", route("a/**"), route("b/**"))),
    );
    let _d = Daemon::start(&sb);
    let changes = |sb: &Sandbox| -> Vec<String> {
        let out = sb.run(&["reload", "--json"]);
        assert_eq!(out.code(), 0, "{out:?}");
        let answer: Value = serde_json::from_str(&out.stdout).expect("reload --json");
        assert_eq!(answer["result"], "applied", "{answer}");
        serde_json::from_value(answer["changes"].clone()).expect("changes")
    };

    sb.configure(&base.clone().extra(&format!(
        "{}{}{}{hook}",
        route("new/**"),
        route("a/**"),
        route("b/**")
    )));
    assert_eq!(
        changes(&sb),
        ["route #1: added (match = \"new/**\")", "notify.ops: added"]
    );
    sb.configure(&base.clone().extra(&format!(
        "{}{}{}",
        route("new/**"),
        route("a/**"),
        route("b/**")
    )));
    let out = sb.run(&["reload"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("notify.ops: removed"), "{out:?}");
    assert!(!out.stdout.contains("no change"), "{out:?}");
}
