//! A damaged `ledger.db` (garbage, a truncated database, another program's
//! database) with the daemon running: jobs still run, `status` and the
//! history commands name the file and the fix, and `history repair` moves
//! the file aside untouched and rebuilds the ledger from the run folders,
//! which the daemon then records in.

use std::fs;

use serde_json::Value;

use crate::support::*;

/// 64 KiB of deterministic noise.
fn garbage(sb: &Sandbox) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..64 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    fs::write(sb.root.join("ledger.db"), bytes).expect("write garbage");
}

/// A real ledger with history in it, cut short after 40,000 bytes.
fn truncated(sb: &Sandbox) {
    for i in 0..40 {
        let name = format!("external-{i}");
        let out = sb.run(&["history", "record", "proj", &name, "success"]);
        assert_eq!(out.code(), 0, "{}", out.stderr);
    }
    let db = sb.root.join("ledger.db");
    let bytes = fs::read(&db).expect("read ledger");
    assert!(bytes.len() > 40_000, "a ledger of {} bytes", bytes.len());
    fs::write(&db, &bytes[..40_000]).expect("truncate");
}

/// A valid SQLite file that is some other program's database.
fn foreign_schema(sb: &Sandbox) {
    let conn = rusqlite::Connection::open(sb.root.join("ledger.db")).expect("open");
    conn.execute_batch(
        "CREATE TABLE executions (note TEXT); INSERT INTO executions VALUES ('not ours');",
    )
    .expect("create");
}

fn status_json(sb: &Sandbox) -> Value {
    let out = sb.run(&["status", "--json"]);
    assert_eq!(out.code(), 0, "status answers: {}", out.stderr);
    serde_json::from_str(&out.stdout).expect("status --json")
}

/// Execution ids `history list --json` shows, if it works.
fn history_ids(sb: &Sandbox) -> Option<Vec<String>> {
    let out = sb.run(&["history", "list", "--json", "--limit", "1000"]);
    (out.code() == 0).then_some(())?;
    let rows: Value = serde_json::from_str(&out.stdout).ok()?;
    Some(
        rows.as_array()?
            .iter()
            .filter_map(|r| r["id"].as_str().map(str::to_owned))
            .collect(),
    )
}

fn moved_aside(sb: &Sandbox) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = fs::read_dir(&sb.root)
        .expect("read root")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("ledger.db.corrupt-")
                && !name.ends_with("-wal")
                && !name.ends_with("-shm")
        })
        .collect();
    found.sort();
    found
}

fn damaged_ledger_never_stops_jobs_and_repair_rebuilds_it(damage: fn(&Sandbox)) {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    fs::create_dir_all(&sb.root).expect("root");
    damage(&sb);
    let ledger = sb.root.join("ledger.db");
    let original = fs::read(&ledger).expect("read damaged ledger");

    let d = Daemon::start(&sb);
    sb.drop_prompt("proj", "one", "first\n");
    let one = sb.wait_done("proj", "one", secs(20));
    assert_eq!(one.state(), "succeeded", "{:#}", one.record);

    let condition = wait_until("status to report the damage", secs(20), || {
        let s = status_json(&sb);
        (s["ledger"]["ok"] == Value::Bool(false)).then(|| s["ledger"].clone())
    });
    let error = condition["error"].as_str().expect("error");
    assert!(error.contains(&ledger.display().to_string()), "{error}");
    let fix = condition["fix"].as_str().expect("fix");
    assert!(fix.contains("jobwarden history repair"), "{fix}");
    sb.drop_prompt("proj", "more", "again\n");
    sb.wait_done("proj", "more", secs(20));
    let log = d.stderr();
    // Monitors mention it only at debug level (which this log shows).
    let reported = log
        .lines()
        .filter(|l| l.contains("is damaged") && !l.contains("DEBUG"))
        .count();
    assert_eq!(
        reported, 1,
        "the damage is logged once, naming the file and the fix:\n{log}"
    );
    assert!(log.contains("jobwarden history repair"), "{log}");
    let human = sb.run(&["status"]);
    assert!(
        human.stdout.contains("DAMAGED") && human.stdout.contains("history repair"),
        "{}",
        human.stdout
    );
    let list = sb.run(&["history", "list"]);
    assert_eq!(list.code(), 2, "{list:?}");
    assert!(
        list.stderr.contains(&ledger.display().to_string())
            && list.stderr.contains("jobwarden history repair"),
        "{}",
        list.stderr
    );

    let repair = sb.run(&["history", "repair"]);
    assert_eq!(repair.code(), 0, "{repair:?}");
    assert!(repair.stdout.contains("moved aside"), "{}", repair.stdout);
    let aside = moved_aside(&sb);
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        fs::read(&aside[0]).expect("read moved-aside file") == original,
        "the damaged file is kept exactly as it was"
    );
    let ids = history_ids(&sb).expect("history list works after the repair");
    for job in sb.jobs() {
        assert!(ids.contains(&job.id), "{} missing from {ids:?}", job.id);
    }

    sb.drop_prompt("proj", "two", "second\n");
    let two = sb.wait_done("proj", "two", secs(20));
    assert_eq!(two.state(), "succeeded", "{:#}", two.record);
    wait_until("the next job's row in the new ledger", secs(20), || {
        history_ids(&sb)
            .filter(|ids| ids.contains(&two.id))
            .map(drop)
    });
    wait_until("status to report the ledger ok", secs(20), || {
        (status_json(&sb)["ledger"]["ok"] == Value::Bool(true)).then_some(())
    });
}

#[test]
fn garbage_ledger_never_stops_jobs_and_repair_rebuilds_it() {
    damaged_ledger_never_stops_jobs_and_repair_rebuilds_it(garbage);
}

#[test]
fn truncated_ledger_never_stops_jobs_and_repair_rebuilds_it() {
    damaged_ledger_never_stops_jobs_and_repair_rebuilds_it(truncated);
}

#[test]
fn foreign_database_as_ledger_never_stops_jobs_and_repair_rebuilds_it() {
    damaged_ledger_never_stops_jobs_and_repair_rebuilds_it(foreign_schema);
}

#[test]
fn ledger_damaged_while_the_daemon_runs_is_noticed_and_repaired() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "before", "x\n");
    let before = sb.wait_done("proj", "before", secs(20));
    // Replaced under the daemon (a new file, as an editor or a bad copy does).
    let ledger = sb.root.join("ledger.db");
    fs::write(sb.root.join("garbage.tmp"), vec![7u8; 8192]).expect("write");
    fs::rename(sb.root.join("garbage.tmp"), &ledger).expect("replace");
    for sidecar in ["ledger.db-wal", "ledger.db-shm"] {
        drop(fs::remove_file(sb.root.join(sidecar)));
    }
    sb.drop_prompt("proj", "during", "x\n");
    let during = sb.wait_done("proj", "during", secs(20));
    assert_eq!(during.state(), "succeeded", "{:#}", during.record);
    wait_until("status to report the damage", secs(20), || {
        (status_json(&sb)["ledger"]["ok"] == Value::Bool(false)).then_some(())
    });
    let repair = sb.run(&["history", "repair"]);
    assert_eq!(repair.code(), 0, "{repair:?}");
    let ids = history_ids(&sb).expect("history list after the repair");
    assert!(
        ids.contains(&before.id) && ids.contains(&during.id),
        "{ids:?}"
    );
}

#[test]
fn ledger_with_a_corrupt_index_page_is_found_by_the_daemon_check_and_repaired() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    fs::create_dir_all(&sb.root).expect("root");
    for i in 0..3 {
        let out = sb.run(&["history", "record", "proj", &format!("ext-{i}"), "success"]);
        assert_eq!(out.code(), 0, "{}", out.stderr);
    }
    // One index page overwritten: the file opens, only a full read sees it.
    let db = sb.root.join("ledger.db");
    let root: i64 = rusqlite::Connection::open(&db)
        .expect("open")
        .query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'executions_by_finished'",
            [],
            |r| r.get(0),
        )
        .expect("root page");
    let mut bytes = fs::read(&db).expect("read");
    let at = (root as usize - 1) * 4096;
    bytes[at..at + 4096].fill(0xa5);
    fs::write(&db, &bytes).expect("corrupt a page");

    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "one", "x\n");
    let one = sb.wait_done("proj", "one", secs(20));
    assert_eq!(one.state(), "succeeded", "{:#}", one.record);
    let condition = wait_until("status to report the damage", secs(20), || {
        let s = status_json(&sb);
        (s["ledger"]["ok"] == Value::Bool(false)).then(|| s["ledger"].clone())
    });
    assert!(
        condition["fix"]
            .as_str()
            .is_some_and(|f| f.contains("jobwarden history repair")),
        "{condition}"
    );
    let repair = sb.run(&["history", "repair"]);
    assert_eq!(repair.code(), 0, "{repair:?}");
    assert_eq!(moved_aside(&sb).len(), 1);
    let ids = history_ids(&sb).expect("history list after the repair");
    assert!(ids.contains(&one.id), "{ids:?}");
    wait_until("status to report the ledger ok", secs(20), || {
        (status_json(&sb)["ledger"]["ok"] == Value::Bool(true)).then_some(())
    });
}
