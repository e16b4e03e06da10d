//! The journal: `journalctl -u jobwarden` has one line per job transition
//! (claimed and queued, running, ended), each naming the job as
//! `job=<id>`, without colour codes, with the level as the entry's
//! priority; and restarting journald while prompts are being claimed
//! loses nothing and runs nothing twice.

use serde_json::Value;

use super::{JW, Service, state_of};
use crate::support::*;

/// The unit's journal entries as journald keeps them (`-o json`).
fn entries(svc: &Service) -> Vec<Value> {
    let out = svc
        .sys
        .ok("journalctl -u jobwarden -o json --no-pager --output-fields=MESSAGE,PRIORITY,_PID");
    out.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn message(entry: &Value) -> String {
    match &entry["MESSAGE"] {
        Value::String(s) => s.clone(),
        // journald gives a message with control characters as its bytes.
        Value::Array(bytes) => String::from_utf8_lossy(
            &bytes
                .iter()
                .filter_map(|b| b.as_u64().map(|b| b as u8))
                .collect::<Vec<u8>>(),
        )
        .into_owned(),
        _ => String::new(),
    }
}

#[test]
fn one_plain_line_per_transition_naming_the_job_and_journald_restarts_lose_nothing() {
    let Some(svc) = Service::up("") else { return };
    svc.release("l1");
    let id = svc.submit("lg", "l1");
    svc.wait_state(&id, "succeeded", secs(20));
    let field = format!("job={id}");
    let lines = wait_until("the job's end in the journal", secs(10), || {
        let lines: Vec<(String, String)> = entries(&svc)
            .iter()
            .map(|e| (message(e), e["PRIORITY"].as_str().unwrap_or("").to_string()))
            .filter(|(m, _)| m.contains(&id))
            .collect();
        lines
            .iter()
            .any(|(m, _)| m.contains("job ended"))
            .then_some(lines)
    });
    for (needle, count) in [("claimed", 1), ("job running", 1), ("job ended", 1)] {
        let found = lines.iter().filter(|(m, _)| m.contains(needle)).count();
        assert_eq!(found, count, "{needle}: {lines:#?}");
    }
    for (m, priority) in &lines {
        assert!(m.contains(&field), "names the job as a field: {m}");
        assert!(!m.contains('\u{1b}'), "no colour codes: {m:?}");
        assert_eq!(priority, "6", "info: {m}");
    }

    // An error is an error to journald.
    svc.configure("max_jobs = 0");
    assert!(!svc.sys.sh("systemctl reload jobwarden").status.success());
    svc.wait_journal("-p err", "config reload refused");
    svc.configure("");
    svc.sys.ok("systemctl reload jobwarden");

    // journald restarted while a burst is claimed and run.
    let daemon = svc.main_pid();
    let names: Vec<String> = (0..30).map(|i| format!("b{i}")).collect();
    svc.sys.ok(&format!(
        "cd {JW} && touch {}",
        names
            .iter()
            .map(|n| format!("release-{n}"))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let mut ids = Vec::new();
    for (i, name) in names.iter().enumerate() {
        ids.push(svc.submit("burst", name));
        if i == 10 {
            svc.sys.ok("systemctl restart systemd-journald");
        }
    }
    for id in &ids {
        svc.wait_state(id, "succeeded", secs(30));
    }
    assert_eq!(svc.main_pid(), daemon, "the daemon lived through it");
    for name in &names {
        assert_eq!(svc.runs(name), 1, "{name} ran once");
    }
    assert_eq!(svc.recorded(30, |r| r["project"] == "burst").len(), 30);
    // And the daemon's lines reach the new journald.
    let last = ids.last().map(String::as_str).unwrap_or_default();
    svc.sys.wait_for(
        "the last job's end in the journal",
        secs(10),
        &format!("journalctl -u jobwarden -o cat | grep 'job ended' | grep -q {last}"),
    );
    assert_eq!(state_of(&svc.show(last)), "succeeded");
}
