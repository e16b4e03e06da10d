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
