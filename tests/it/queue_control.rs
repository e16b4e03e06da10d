//! Changing the queue while it runs, as pueue users expect: `jobwarden
//! priority` reorders a queued job at once (with a daemon) or in its
//! record (without one), recorded as an event; a job not queued is a
//! clean "no". Real daemon, real jobs.

use std::fs;

use crate::support::*;

/// Writes its name to `$OUT/ran`, then waits for `$OUT/release-<name>`.
const GATED: &str = r#"cat >/dev/null
echo "$JOBWARDEN_NAME" >> "$OUT/ran"
while [ ! -e "$OUT/release-$JOBWARDEN_NAME" ]; do sleep 0.05; done"#;

fn release(sb: &Sandbox, name: &str) {
    fs::write(sb.out().join(format!("release-{name}")), "").expect("release");
}

#[test]
fn a_queued_jobs_priority_changed_by_hand_moves_it_ahead_at_once() {
    let sb = Sandbox::new();
    let job = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).global("max_jobs", "1"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "busy", "x\n");
    sb.wait_state("p", "busy", "running", secs(20));
    sb.drop_prompt("p", "early", "x\n");
    sb.wait_state("p", "early", "queued", secs(20));
    sb.drop_prompt("p", "urgent", "x\n");
    let urgent = sb.wait_state("p", "urgent", "queued", secs(20));

    let out = sb.run(&["priority", "p/urgent", "10"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("0 → 10"), "{}", out.stdout);
    let rec = sb.job(&urgent.id).expect("record");
    assert_eq!(rec.record["priority"], 10);
    let ev = rec.ops();
    assert!(ev.iter().any(|o| o == "priority"), "{ev:?}");
    assert!(!sb.run_dir(&urgent.id).join("PRIORITY").exists(), "taken");

    for name in ["busy", "urgent", "early"] {
        release(&sb, name);
    }
    sb.wait_done("p", "early", secs(20));
    assert_eq!(
        sb.ran_lines(),
        vec!["busy", "urgent", "early"],
        "urgent first"
    );

    // Not queued any more: a clean no.
    let out = sb.run(&["priority", &urgent.id, "5"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(out.stderr.contains("only a queued job"), "{}", out.stderr);
    let out = sb.run(&["priority", &urgent.id, "5000"]);
    assert_ne!(out.code(), 0, "{out:?}");
}

#[test]
fn without_a_daemon_the_priority_is_changed_in_the_record_and_kept() {
    let sb = Sandbox::new();
    let job = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).global("max_jobs", "1"));
    let mut d = Daemon::start(&sb);
    assert_eq!(sb.run(&["pause"]).code(), 0);
    sb.drop_prompt("p", "a", "x\n");
    sb.wait_state("p", "a", "queued", secs(20));
    sb.drop_prompt("p", "b", "x\n");
    let b = sb.wait_state("p", "b", "queued", secs(20));
    d.sigterm();
    d.wait_exit(secs(10));
    let out = sb.run(&["priority", &b.id, "3"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(sb.job(&b.id).expect("b").record["priority"], 3);
    let _d = Daemon::start(&sb);
    assert_eq!(sb.run(&["resume"]).code(), 0);
    for name in ["a", "b"] {
        release(&sb, name);
    }
    sb.wait_done("p", "a", secs(20));
    assert_eq!(
        sb.ran_lines(),
        vec!["b", "a"],
        "b first, as its record says"
    );
}

#[test]
fn a_limit_set_by_hand_holds_starts_at_once_outlives_a_restart_and_clears() {
    let sb = Sandbox::new();
    let job = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]).global("max_jobs", "4"));
    let mut d = Daemon::start(&sb);
    let out = sb.run(&["limit", "1"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("at most 1 at once"), "{}", out.stdout);
    sb.drop_prompt("p", "one", "x\n");
    sb.wait_state("p", "one", "running", secs(20));
    sb.drop_prompt("p", "two", "x\n");
    sb.drop_prompt("p", "three", "x\n");
    let two = sb.wait_state("p", "two", "queued", secs(20));
    sb.wait_state("p", "three", "queued", secs(20));
    wait_until("status to say the limit", secs(10), || {
        let s = sb.run(&["status"]).stdout;
        (s.contains("1 running of 1 (limit set by hand)")
            && s.contains("limit 1 reached (set by hand)"))
        .then_some(())
    });
    assert_never("a second job starting under the limit", millis(800), || {
        sb.ran_lines().len() > 1
    });
    // It outlives a restart.
    d.sigterm();
    d.wait_exit(secs(10));
    let _d = Daemon::start(&sb);
    assert_never(
        "a second job starting after the restart",
        millis(800),
        || sb.ran_lines().len() > 1,
    );
    assert_eq!(sb.job(&two.id).expect("two").state(), "queued");
    // A project limit and a profile limit are listed; clearing gives the
    // config's 4 back: the others start at once.
    assert_eq!(sb.run(&["limit", "--project", "p", "2"]).code(), 0);
    assert_eq!(sb.run(&["limit", "--profile", "default", "3"]).code(), 0);
    let listed = sb.run(&["limit"]).stdout;
    assert!(listed.contains("project p: at most 2"), "{listed}");
    assert!(listed.contains("profile default: at most 3"), "{listed}");
    assert!(
        sb.run(&["limit", "--profile", "nope", "3"]).code() != 0,
        "no such profile"
    );
    assert_eq!(sb.run(&["limit", "--clear"]).code(), 0);
    // The project's limit of 2 now holds the third back.
    wait_until("two running under the project's limit", secs(20), || {
        (sb.ran_lines().len() == 2).then_some(())
    });
    assert_never("a third beyond the project's limit", millis(800), || {
        sb.ran_lines().len() > 2
    });
    assert_eq!(sb.run(&["limit", "--project", "p", "--clear"]).code(), 0);
    wait_until("the third running", secs(20), || {
        (sb.ran_lines().len() == 3).then_some(())
    });
    assert_eq!(
        sb.run(&["limit", "--project", "p", "--clear"]).code(),
        1,
        "nothing to clear"
    );
    for name in ["one", "two", "three"] {
        release(&sb, name);
    }
    sb.wait_done("p", "three", secs(20));
}

#[test]
fn watch_draws_again_on_a_terminal_ends_on_ctrl_c_and_is_refused_on_a_pipe() {
    let sb = Sandbox::new();
    let job = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &job]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "shown", "x\n");
    sb.wait_state("p", "shown", "running", secs(20));
    for cmd in ["jobs", "status"] {
        let piped = sb.run(&[cmd, "--watch"]);
        assert_eq!(piped.code(), 2, "{piped:?}");
        assert!(piped.stderr.contains("not one"), "{}", piped.stderr);
        // On a terminal (`script` gives it one), Ctrl-C after a while.
        let line = format!(
            "timeout --preserve-status -s INT 2.5 {BIN} --root {} --config {} {cmd} --watch",
            sb.root.display(),
            sb.config.display()
        );
        let typescript = sb.out().join(format!("typescript-{cmd}"));
        let status = std::process::Command::new("script")
            .args(["-qefc", &line])
            .arg(&typescript)
            .env("TERM", "xterm")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .status()
            .expect("script");
        let seen = fs::read_to_string(&typescript).unwrap_or_default();
        assert_eq!(status.code(), Some(0), "Ctrl-C ends it with 0: {seen}");
        let draws = seen.matches(&format!("jobwarden {cmd}, every 1s")).count();
        assert!(draws >= 2, "drawn again in place ({draws} draws): {seen}");
        assert!(seen.contains("\u{1b}[H\u{1b}[2J"), "in place");
        assert!(
            seen.contains("shown") || seen.contains("1 running"),
            "{seen}"
        );
    }
    release(&sb, "shown");
}
