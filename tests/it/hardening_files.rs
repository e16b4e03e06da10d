//! Files under the root that a job (running as the daemon's user) turned
//! into something else: a symlinked or FIFO ledger, a symlinked `control/`
//! or inbox, a prompt the job removed; a config file that is a FIFO; and
//! what jobs print reaching a terminal, or the web page's redirects. Each
//! must end with a clear refusal naming the path: nothing followed,
//! nothing hung, no record claiming what is not on disk.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use nix::sys::stat::Mode;
use serde_json::Value;

use crate::support::*;

/// The config of a test whose job attacks the root: the default profile
/// runs `script` (a `/bin/sh` script written with [`Sandbox::script`]).
/// The job attacks the root itself: without its sandbox, which would
/// refuse every such write, so that the check under attack is the one
/// that holds on its own.
fn attack_config(script: &str) -> ConfigToml {
    ConfigToml::new(&["/bin/sh", script]).unsandboxed()
}

fn status_json(sb: &Sandbox) -> Value {
    let out = sb.run(&["status", "--json"]);
    assert_eq!(out.code(), 0, "status answers: {out:?}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("status --json: {e}: {out:?}"))
}

/// Waits until `status --json` reports the ledger as not ok; its condition.
fn wait_ledger_refused(sb: &Sandbox) -> Value {
    wait_until("status to report the ledger refused", secs(20), || {
        let s = status_json(sb);
        (s["ledger"]["ok"] == Value::Bool(false)).then(|| s["ledger"].clone())
    })
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, Mode::S_IRUSR | Mode::S_IWUSR).expect("mkfifo");
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Files of the root whose name starts with `prefix`.
fn root_files(sb: &Sandbox, prefix: &str) -> Vec<String> {
    names_in(&sb.root)
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect()
}

#[test]
fn ledger_swapped_for_a_symlink_by_a_job_is_never_written_through() {
    let sb = Sandbox::new();
    let outside = sb.base.join("outside");
    fs::create_dir_all(&outside).expect("outside");
    let script = sb.script(
        "swap_ledger",
        &format!(
            "R={root}\nO={outside}\n\
             if [ ! -e \"$O/copy.db\" ]; then\n\
               cp \"$R/ledger.db\" \"$O/copy.db\" && cp \"$O/copy.db\" \"$O/original.db\"\n\
               ln -s \"$O/copy.db\" \"$R/ledger.db.link\" && mv -T \"$R/ledger.db.link\" \"$R/ledger.db\"\n\
             fi\n\
             echo swapped",
            root = q(&sb.root.to_string_lossy()),
            outside = q(&outside.to_string_lossy()),
        ),
    );
    sb.configure(&attack_config(&script));
    let d = Daemon::start(&sb);
    sb.drop_prompt("p", "first", "x\n");
    sb.wait_done("p", "first", secs(20));
    sb.drop_prompt("p", "attack", "x\n");
    let attack = sb.wait_done("p", "attack", secs(20));
    assert_eq!(attack.state(), "succeeded", "{:#}", attack.record);
    sb.drop_prompt("p", "after", "x\n");
    let after = sb.wait_done("p", "after", secs(20));
    assert_eq!(after.state(), "succeeded", "jobs go on: {:#}", after.record);

    let condition = wait_ledger_refused(&sb);
    let error = condition["error"].as_str().unwrap_or_default();
    let ledger = sb.root.join("ledger.db");
    assert!(
        error.contains(&ledger.display().to_string()) && error.contains("symlink"),
        "the refusal names the file and what was found: {condition:#}"
    );
    assert!(
        condition["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("history repair"),
        "{condition:#}"
    );
    for cmd in [&["jobs"][..], &["history", "list"], &["metrics"]] {
        sb.run(cmd);
    }
    assert_eq!(
        names_in(&outside),
        vec!["copy.db".to_owned(), "original.db".to_owned()],
        "no -wal or -shm was made outside the root"
    );
    assert_eq!(
        fs::read(outside.join("copy.db")).expect("copy"),
        fs::read(outside.join("original.db")).expect("original"),
        "the database outside the root was not written"
    );
    drop(d);
}

#[test]
fn ledger_that_is_a_dangling_symlink_is_refused_and_nothing_is_made_outside() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    let outside = sb.base.join("outside");
    fs::create_dir_all(&outside).expect("outside");
    symlink(outside.join("made.db"), sb.root.join("ledger.db")).expect("link");
    let d = Daemon::start(&sb);
    sb.drop_prompt("p", "one", "x\n");
    let one = sb.wait_done("p", "one", secs(20));
    assert_eq!(one.state(), "succeeded", "{:#}", one.record);
    let condition = wait_ledger_refused(&sb);
    assert!(
        condition["error"]
            .as_str()
            .unwrap_or_default()
            .contains("symlink"),
        "{condition:#}"
    );
    let human = sb.run(&["status"]);
    assert!(
        human.stdout.contains("ledger.db") && human.stdout.contains("history repair"),
        "status names the file and the fix: {human:?}"
    );
    sb.run(&["history", "list"]);
    assert!(
        names_in(&outside).is_empty(),
        "nothing was created outside the root: {:?}",
        names_in(&outside)
    );
    drop(d);
}

#[test]
fn ledger_swapped_for_a_fifo_by_a_job_hangs_nothing_and_repair_moves_it_aside() {
    let sb = Sandbox::new();
    let script = sb.script(
        "fifo_ledger",
        &format!(
            "R={root}\n\
             if [ ! -p \"$R/ledger.db\" ]; then\n\
               mkfifo \"$R/ledger.db.fifo\" && mv -T \"$R/ledger.db.fifo\" \"$R/ledger.db\"\n\
             fi\n\
             echo swapped",
            root = q(&sb.root.to_string_lossy()),
        ),
    );
    sb.configure(&attack_config(&script));
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("p", "attack", "x\n");
    let attack = sb.wait_done("p", "attack", secs(20));
    sb.drop_prompt("p", "after", "x\n");
    let after = sb.wait_done("p", "after", secs(20));
    assert_eq!(after.state(), "succeeded", "jobs go on: {:#}", after.record);

    let condition = wait_ledger_refused(&sb);
    let error = condition["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("ledger.db") && error.contains("FIFO"),
        "{condition:#}"
    );
    for cmd in [
        &["jobs"][..],
        &["show", &attack.id],
        &["metrics"],
        &["history", "list"],
    ] {
        let out = sb.run(cmd);
        let said = format!("{}{}", out.stdout, out.stderr);
        assert!(
            out.code() == 0 || said.contains("FIFO"),
            "{cmd:?} answers, naming the problem: {out:?}"
        );
    }

    // A daemon started with the FIFO there starts and runs jobs.
    d.sigterm();
    d.wait_exit(secs(20));
    let d = Daemon::start(&sb);
    sb.drop_prompt("p", "restarted", "x\n");
    let restarted = sb.wait_done("p", "restarted", secs(20));
    assert_eq!(restarted.state(), "succeeded", "{:#}", restarted.record);

    let repair = sb.run(&["history", "repair"]);
    assert_eq!(repair.code(), 0, "history repair: {repair:?}");
    let aside: Vec<String> = root_files(&sb, "ledger.db.")
        .into_iter()
        .filter(|n| !n.ends_with("-wal") && !n.ends_with("-shm"))
        .collect();
    assert_eq!(aside.len(), 1, "the FIFO was moved aside: {aside:?}");
    let moved = fs::symlink_metadata(sb.root.join(&aside[0])).expect("moved aside");
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(&moved.file_type()),
        "the impostor itself is kept"
    );
    assert!(
        fs::symlink_metadata(sb.root.join("ledger.db"))
            .expect("rebuilt")
            .is_file()
    );
    wait_until("status to say the ledger is ok again", secs(20), || {
        (status_json(&sb)["ledger"]["ok"] == Value::Bool(true)).then_some(())
    });
    let ids = sb.run(&["history", "list", "--json"]);
    assert!(
        ids.stdout.contains(&attack.id),
        "rows rebuilt from the run folders: {ids:?}"
    );
    drop(d);
}

#[test]
fn a_folder_ledger_or_a_symlinked_wal_never_stops_the_daemon() {
    for case in ["folder", "wal-link"] {
        let sb = Sandbox::new();
        sb.configure(&ConfigToml::new(&["true"]));
        let outside = sb.base.join("outside");
        fs::create_dir_all(&outside).expect("outside");
        let named = match case {
            "folder" => {
                fs::create_dir_all(sb.root.join("ledger.db")).expect("folder");
                "ledger.db"
            }
            _ => {
                symlink(outside.join("wal"), sb.root.join("ledger.db-wal")).expect("link");
                "ledger.db-wal"
            }
        };
        let d = Daemon::start(&sb);
        sb.drop_prompt("p", "one", "x\n");
        let one = sb.wait_done("p", "one", secs(20));
        assert_eq!(one.state(), "succeeded", "{case}: {:#}", one.record);
        let condition = wait_ledger_refused(&sb);
        let error = condition["error"].as_str().unwrap_or_default();
        assert!(error.contains(named), "{case}: {condition:#}");
        assert!(
            !error.ends_with("unable to open database file"),
            "{case}: the message says more than SQLite: {condition:#}"
        );
        assert!(
            d.stderr().contains(named),
            "{case}: the log names the path:\n{}",
            d.stderr()
        );
        assert!(names_in(&outside).is_empty(), "{case}: nothing outside");
        drop(d);
    }
}

#[test]
fn control_symlinked_by_a_job_is_never_followed_to_a_pause() {
    let sb = Sandbox::new();
    let outside = sb.base.join("outside");
    fs::create_dir_all(&outside).expect("outside");
    fs::write(outside.join("pause"), "planted\n").expect("planted pause");
    let script = sb.script(
        "link_control",
        &format!(
            "R={root}\nO={outside}\n\
             if [ ! -L \"$R/control\" ]; then\n\
               mv \"$R/control\" \"$R/control.moved\" 2>/dev/null\n\
               ln -s \"$O\" \"$R/control\"\n\
             fi\n\
             echo linked",
            root = q(&sb.root.to_string_lossy()),
            outside = q(&outside.to_string_lossy()),
        ),
    );
    sb.configure(&attack_config(&script));
    let d = Daemon::start(&sb);
    sb.drop_prompt("p", "attack", "x\n");
    sb.wait_done("p", "attack", secs(20));
    let status = status_json(&sb);
    assert!(
        status["paused"]["daemon"].is_null(),
        "a pause behind a symlinked control/ holds nothing: {:#}",
        status["paused"]
    );
    sb.drop_prompt("p", "after", "x\n");
    let after = sb.wait_done("p", "after", secs(20));
    assert_eq!(after.state(), "succeeded", "{:#}", after.record);
    drop(d);
}

#[test]
fn a_symlinked_inbox_or_control_never_stops_the_daemon_from_starting() {
    for folder in ["control", "inbox"] {
        let sb = Sandbox::new();
        sb.configure(&ConfigToml::new(&["true"]));
        let outside = sb.base.join("outside");
        fs::create_dir_all(&outside).expect("outside");
        fs::write(outside.join("pause"), "planted\n").expect("planted");
        symlink(&outside, sb.root.join(folder)).expect("link");
        let mut d = Daemon::spawn(&sb, &[]);
        d.wait_ready(&sb, secs(20));
        assert!(d.is_running(), "{folder}: the daemon runs");
        let link = sb.root.join(folder).display().to_string();
        wait_until(
            &format!("{folder}: the log to name {link}"),
            secs(20),
            || d.stderr().contains(&link).then_some(()),
        );
        if folder == "control" {
            sb.drop_prompt("p", "one", "x\n");
            let one = sb.wait_done("p", "one", secs(20));
            assert_eq!(one.state(), "succeeded", "{:#}", one.record);
        }
        assert_eq!(
            names_in(&outside),
            vec!["pause".to_owned()],
            "{folder}: nothing made through the link"
        );
    }
}

#[test]
fn a_prompt_the_job_removed_is_recorded_missing_not_archived() {
    let sb = Sandbox::new();
    let running = sb.project_dir("p").join("gone.running.md");
    let script = sb.script(
        "remove_prompt",
        &format!("rm -f {}\necho removed", q(&running.to_string_lossy())),
    );
    sb.configure(&attack_config(&script));
    let d = Daemon::start(&sb);
    sb.drop_prompt("p", "gone", "x\n");
    let job = sb.wait_job_where(
        "the job to end",
        "p",
        "gone",
        &[],
        secs(20),
        Job::is_terminal,
    );
    let what = "an event saying where the prompt went (archived, or archive_failed)";
    let job = wait_until(what, secs(20), || {
        let said = sb
            .job(&job.id)?
            .ops()
            .iter()
            .any(|o| o == "archived" || o == "archive_failed");
        // The record is saved before its event is appended: read after
        // the event is seen, it says what the event says.
        said.then(|| sb.job(&job.id)).flatten()
    });
    let archive_path = job.str_field("archive_path");
    if let Some(path) = archive_path {
        assert!(
            fs::symlink_metadata(sb.root.join(path)).is_ok(),
            "the record names an archive path that does not exist: {:#}",
            job.record
        );
    }
    assert_ne!(
        job.str_field("disposition"),
        Some("archived"),
        "{:#}",
        job.record
    );
    assert!(
        job.ops().iter().any(|o| o == "archive_failed"),
        "an event says the prompt was missing: {:?}",
        job.ops()
    );
    let said = job.record["archive_error"].as_str().unwrap_or_default();
    assert!(
        said.contains("missing") || said.contains("gone"),
        "{:#}",
        job.record
    );
    wait_until("a warning naming the missing prompt", secs(20), || {
        d.stderr()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("prompt not moved") && l.contains("missing"))
            .then_some(())
    });
    let show = sb.run(&["show", &job.id]);
    assert_eq!(show.code(), 0, "{show:?}");
}

#[test]
fn a_config_file_replaced_by_a_fifo_is_refused_without_blocking() {
    let sb = Sandbox::new();
    mkfifo(&sb.config);
    for cmd in [&["status"][..], &["config", "check"]] {
        let out = sb.run(cmd);
        assert_ne!(out.code(), 0, "{out:?}");
        let said = format!("{}{}", out.stdout, out.stderr);
        assert!(
            said.contains(&sb.config.display().to_string())
                && said.contains("is a FIFO, not a regular file")
                && !said.contains("not found"),
            "{cmd:?} names the file and what it is: {out:?}"
        );
    }
}

#[test]
fn web_redirects_only_to_local_paths() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    let _d = Daemon::start(&sb);
    let web = crate::web::WebProcess::start(&sb);
    let token = web.token.clone();
    for (path, want) in [
        (format!("//evil.example?token={token}"), "/"),
        (format!("/\\evil.example?token={token}"), "/"),
        (format!("/jobs?token={token}"), "/jobs"),
    ] {
        let (status, head, _) = web.request("GET", &path, &[], "");
        assert!((300..400).contains(&status), "{path}: {head}");
        assert_eq!(location(&head), want, "{path}: {head}");
    }
    let csrf = web.csrf();
    let cookie = web.cookie();
    // Where a form comes back to is its own `back` field, on this site
    // only; the answer says what was done.
    for (back, want) in [
        ("/\\evil.example/", "/?done=paused"),
        ("//evil.example/", "/?done=paused"),
        ("https://evil.example/", "/?done=paused"),
        ("/jobs?state=failed", "/jobs?state=failed&done=paused"),
    ] {
        let form = format!("csrf={csrf}&back={}", urlencode(back));
        let (status, head, _) = web.request("POST", "/pause", &[("Cookie", &cookie)], &form);
        assert_eq!(status, 303, "{back}: {head}");
        assert_eq!(location(&head), want, "{back}: {head}");
        sb.run(&["resume"]);
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn location(head: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("location")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default()
}

#[test]
fn terminal_escapes_in_job_output_are_neutralised_by_show_and_history_show() {
    let sb = Sandbox::new();
    let script = sb.script(
        "escapes",
        "printf 'before \\033]0;pwned\\007 \\033[2J after\\n'",
    );
    sb.configure(&attack_config(&script));
    let d = Daemon::start(&sb);
    sb.drop_prompt("p", "esc", "x\n");
    let job = sb.wait_done("p", "esc", secs(20));
    wait_row(&sb, &job.id);
    for cmd in [&["show", &job.id][..], &["history", "show", &job.id]] {
        let out = sb.run(cmd);
        assert_eq!(out.code(), 0, "{out:?}");
        assert!(out.stdout.contains("before"), "{cmd:?}: {out:?}");
        assert!(
            !out.stdout.contains('\u{1b}') && !out.stdout.contains('\u{7}'),
            "{cmd:?} prints no raw control character: {:?}",
            out.stdout
        );
        assert!(
            out.stdout.contains("^[]0;pwned^G"),
            "{cmd:?} shows them visibly: {:?}",
            out.stdout
        );
    }
    // On a pipe `logs` is the log, byte for byte (its documented contract).
    let logs = sb.run(&["logs", &job.id]);
    assert!(
        logs.stdout.contains("\u{1b}]0;pwned\u{7}"),
        "{:?}",
        logs.stdout
    );
    // On a terminal (`script` gives it one) the escapes are shown.
    let argv = [
        BIN,
        "--root",
        &sb.root.to_string_lossy(),
        "--config",
        &sb.config.to_string_lossy(),
        "logs",
        &job.id,
    ]
    .map(|a| format!("'{a}'"))
    .join(" ");
    let on_tty = std::process::Command::new("timeout")
        .args(["20", "script", "-q", "-e", "-c", &argv, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output();
    match on_tty {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("before"), "{text:?}");
            assert!(
                text.contains("^[]0;pwned^G") && !text.contains("\u{1b}]0;pwned"),
                "logs on a terminal shows the escapes: {text:?}"
            );
        }
        other => say(&format!(
            "NOT CHECKED logs on a terminal: `script` could not run it ({other:?})"
        )),
    }
    drop(d);
}
