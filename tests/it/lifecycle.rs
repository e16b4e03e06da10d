//! The happy path and plain outcomes: a dropped prompt is claimed, run,
//! logged and archived; failures, missing programs, live logs, heartbeats,
//! the log cap, placeholders, projects and the claim paths (rename,
//! close-write, new folders).

use std::fs;

use crate::support::*;

#[test]
fn dropped_prompt_succeeds_with_log_archive_and_exact_prompt_copy() {
    let sb = Sandbox::new();
    let script = sb.script(
        "hello",
        r#"echo "hello from $1"; echo "to stderr" >&2; exit 0"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);

    let body = "# Task\n\nDo the thing. ünïcödé ✓\nlast line without newline";
    sb.drop_prompt("proj", "task1", body);
    let job = sb.wait_done("proj", "task1", secs(15));

    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(job.record["exit_code"], 0);
    assert!(job.record["signal"].is_null(), "{:#}", job.record);
    assert_eq!(job.record["job_id"], job.id.as_str());
    assert_eq!(job.record["project"], "proj");
    assert_eq!(job.record["name"], "task1");
    assert_eq!(job.record["attempt"], 1);
    assert!(
        job.pid().is_some(),
        "a job that ran has a pid: {:#}",
        job.record
    );
    assert!(job.int_field("monitor_pid").is_some(), "{:#}", job.record);
    assert!(job.time_ms("started_at") <= job.time_ms("finished_at"));
    assert!(job.record["log_truncated"] == false, "{:#}", job.record);

    let log = job.log();
    assert!(
        log.contains("hello from task1"),
        "stdout in job.log: {log:?}"
    );
    assert!(log.contains("to stderr"), "stderr in job.log: {log:?}");

    let copy = fs::read(job.dir.join("prompt.md")).expect("runs/<id>/prompt.md");
    assert_eq!(
        copy,
        body.as_bytes(),
        "prompt.md is the prompt exactly as claimed"
    );

    let expected_archive = format!("archive/succeeded/proj/task1.{}.md", job.id);
    assert_eq!(
        job.str_field("archive_path"),
        Some(expected_archive.as_str())
    );
    let archived = fs::read(sb.root.join(&expected_archive)).expect("archived prompt");
    assert_eq!(
        archived,
        body.as_bytes(),
        "archive holds the prompt unchanged"
    );

    assert!(
        sb.inbox_files().is_empty(),
        "nothing of the prompt stays in the inbox: {:?}",
        sb.inbox_files()
    );

    wait_until("the archived event", secs(5), || {
        job.ops().iter().any(|o| o == "archived").then_some(())
    });
    let ops = check_events(&job);
    let claimed = op_index(&ops, "claimed").expect("claimed event");
    let started = op_index(&ops, "started").expect("started event");
    let exited = op_index(&ops, "exited").expect("exited event");
    assert!(
        claimed < started && started < exited,
        "event order: {ops:?}"
    );
    assert!(
        ops.iter().any(|o| o == "archived"),
        "archived event: {ops:?}"
    );
}

#[test]
fn prompt_reaches_command_on_stdin_byte_for_byte() {
    let sb = Sandbox::new();
    let script = sb.script("cat", r#"cat > "$OUT/$1.stdin"; echo copied"#);
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_prompt_bytes", "\"1MiB\""),
    );
    let _d = Daemon::start(&sb);

    // Larger than a pipe buffer, so a monitor that writes stdin carelessly
    // (all at once, before reading output) would show it.
    let mut body = String::from("Line one\r\n\ttabbed «quoted» 🚀\n");
    while body.len() < 200 * 1024 {
        body.push_str("filler line so the prompt exceeds the 64 KiB pipe buffer\n");
    }
    body.push_str("the end");
    sb.drop_prompt("p", "stdin-job", &body);

    let job = sb.wait_done("p", "stdin-job", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let got = fs::read(sb.out().join("stdin-job.stdin")).expect("the job saved its stdin");
    assert_eq!(got.len(), body.len(), "stdin length");
    assert!(got == body.as_bytes(), "stdin is the prompt byte for byte");
}

#[test]
fn placeholders_are_substituted_in_the_command() {
    let sb = Sandbox::new();
    let script = sb.script("args", r#"for a in "$@"; do echo "arg=$a"; done"#);
    sb.configure(&ConfigToml::new(&[
        "/bin/sh",
        &script,
        "{job_id}",
        "{project}",
        "{name}",
        "{attempt}",
        "{run_dir}",
        "{root}",
        "{workdir}",
        "{prompt_file}",
        "--out={run_dir}/result-{name}",
    ]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("acme/api", "fix", "fix it\n");

    let job = sb.wait_done("acme/api", "fix", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let args: Vec<String> = job
        .log()
        .lines()
        .filter_map(|l| l.strip_prefix("arg=").map(str::to_string))
        .collect();
    let run_dir = sb.run_dir(&job.id).to_string_lossy().into_owned();
    assert_eq!(args.len(), 9, "nine arguments: {args:?}");
    assert_eq!(args[0], job.id);
    assert_eq!(args[1], "acme/api");
    assert_eq!(args[2], "fix");
    assert_eq!(args[3], "1");
    assert_eq!(args[4], run_dir);
    assert_eq!(args[5], sb.root.to_string_lossy());
    assert_eq!(
        args[6],
        format!("{run_dir}/work"),
        "workdir defaults to the job's own folder in its run dir"
    );
    assert!(
        !args[7].is_empty() && !args[7].contains('{'),
        "prompt_file substituted: {:?}",
        args[7]
    );
    assert_eq!(
        args[8],
        format!("--out={run_dir}/result-fix"),
        "placeholders inside an argument"
    );
    assert!(
        job.record["command"].to_string().contains(&job.id),
        "job.json command is the argv as run: {}",
        job.record["command"]
    );
}

#[test]
fn failing_command_is_failed_with_its_exit_code() {
    let sb = Sandbox::new();
    let script = sb.script("fail", "echo about to fail; exit 3");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "bad", "this will fail\n");

    let job = sb.wait_done("proj", "bad", secs(15));
    assert_eq!(job.state(), "failed", "{:#}", job.record);
    assert_eq!(job.record["exit_code"], 3, "{:#}", job.record);
    assert!(job.record["signal"].is_null(), "{:#}", job.record);
    assert!(job.log().contains("about to fail"));
    let expected = format!("archive/failed/proj/bad.{}.md", job.id);
    assert_eq!(job.str_field("archive_path"), Some(expected.as_str()));
    assert!(sb.root.join(&expected).is_file(), "archived under failed/");
    let ops = check_events(&job);
    assert!(ops.iter().any(|o| o == "exited"), "{ops:?}");
}

#[test]
fn missing_program_ends_setup_failed_with_a_reason_naming_it() {
    let sb = Sandbox::new();
    let program = "jw-it-no-such-program-7f3a";
    sb.configure(&ConfigToml::new(&[program, "--flag"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "ghost", "run a program that does not exist\n");

    let job = sb.wait_done("proj", "ghost", secs(15));
    assert_eq!(job.state(), "setup_failed", "{:#}", job.record);
    let reason = job
        .str_field("state_reason")
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        reason.contains(program),
        "state_reason names the program: {:#}",
        job.record
    );
    assert!(
        reason.contains("not found"),
        "state_reason says not found: {:#}",
        job.record
    );
    let expected = format!("archive/setup_failed/proj/ghost.{}.md", job.id);
    assert_eq!(job.str_field("archive_path"), Some(expected.as_str()));
    assert!(sb.root.join(&expected).is_file());
}

#[test]
fn log_grows_live_and_heartbeat_advances_while_running() {
    let sb = Sandbox::new();
    let script = sb.script(
        "ticker",
        r#"i=0
while [ $i -lt 40 ]; do echo "tick $i"; i=$((i+1)); sleep 0.1; done
echo "ticker done""#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "ticker", "tick for a while\n");

    let job = sb.wait_state("proj", "ticker", "running", secs(15));
    let id = job.id.clone();

    // A non-empty log and state `running` at the same time (the record is
    // read before and after the log).
    let (first_len, first_hb) = wait_until("non-empty job.log while running", secs(5), || {
        let before = sb.job(&id)?;
        let len = before.log_len();
        let after = sb.job(&id)?;
        (before.state() == "running" && after.state() == "running" && len > 0)
            .then(|| (len, after.str_field("heartbeat_at").map(str::to_string)))
    });
    let first_hb = first_hb.expect("a running job has heartbeat_at");

    wait_until("job.log to grow while still running", secs(5), || {
        let len = sb.job(&id)?.log_len();
        let j = sb.job(&id)?;
        (j.state() == "running" && len > first_len).then_some(())
    });
    wait_until("heartbeat_at to advance while running", secs(5), || {
        let j = sb.job(&id)?;
        let hb = j.str_field("heartbeat_at")?;
        (j.state() == "running" && parse_rfc3339_ms(hb) > parse_rfc3339_ms(&first_hb)).then_some(())
    });

    let done = sb.wait_done("proj", "ticker", secs(20));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    let log = done.log();
    assert!(log.contains("tick 0") && log.contains("tick 39") && log.contains("ticker done"));
    assert_eq!(
        done.int_field("log_bytes"),
        Some(log.len() as i64),
        "log_bytes is the log size"
    );
}

#[test]
fn log_over_max_log_bytes_is_capped_with_a_marker() {
    let sb = Sandbox::new();
    let script = sb.script(
        "flood",
        r#"head -c 100000 /dev/zero | tr '\0' 'x'
echo
echo "tail-marker-after-flood""#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).global("max_log_bytes", "\"4KiB\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "flood", "make a lot of output\n");

    let job = sb.wait_done("proj", "flood", secs(15));
    assert_eq!(
        job.state(),
        "succeeded",
        "a capped log does not fail the job (its output keeps being drained): {:#}",
        job.record
    );
    assert_eq!(job.record["log_truncated"], true, "{:#}", job.record);
    let log = fs::read(job.dir.join("job.log")).expect("job.log");
    assert!(
        log.len() <= 4096 + 512,
        "job.log stops growing at the cap (plus one marker line): {} bytes",
        log.len()
    );
    assert!(
        log.starts_with(b"xxxxxxxx"),
        "the log keeps the head of the output"
    );
    let text = String::from_utf8_lossy(&log);
    assert!(
        text.contains("log capped"),
        "marker line: {:?}",
        tail(&text, 2)
    );
    assert!(
        !text.contains("tail-marker-after-flood"),
        "nothing after the cap is written"
    );
    assert!(
        job.ops().iter().any(|o| o == "output_capped"),
        "{:?}",
        job.ops()
    );
}

#[test]
fn plain_write_of_a_prompt_is_claimed_on_close_write() {
    let sb = Sandbox::new();
    let script = sb.script("ok", "echo ok");
    // A long rescan interval: only inotify can claim the prompt in time.
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).global("rescan_interval", "\"60s\""));
    fs::create_dir_all(sb.project_dir("proj")).expect("project dir");
    let _d = Daemon::start(&sb);

    // Once a renamed prompt has been run, the watcher is certainly live.
    sb.drop_prompt("proj", "sentinel", "first\n");
    sb.wait_done("proj", "sentinel", secs(15));

    let body = "written in place, no rename\n";
    sb.write_prompt("proj", "plain", body);
    let job = sb.wait_done("proj", "plain", secs(10));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(
        fs::read(job.dir.join("prompt.md")).expect("prompt copy"),
        body.as_bytes()
    );
}

#[test]
fn prompt_renamed_into_a_new_project_folder_is_claimed_without_a_rescan() {
    let sb = Sandbox::new();
    let script = sb.script("ok", "echo ok");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).global("rescan_interval", "\"60s\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("", "sentinel", "first\n");
    sb.wait_done("", "sentinel", secs(15));

    // The folder is created and the prompt renamed in at once: a watcher that
    // only learns of files after it has added a watch on the new folder must
    // scan the folder when it appears, or the prompt waits for the rescan.
    sb.drop_prompt("fresh/deeper", "quick", "in a brand-new folder\n");
    let job = sb.wait_done("fresh/deeper", "quick", secs(10));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
}

#[test]
fn top_level_and_nested_projects_archive_under_their_folders() {
    let sb = Sandbox::new();
    let script = sb.script("ok", "echo ok");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("", "top", "at the top of the inbox\n");
    sb.drop_prompt("a/b", "deep", "two folders down\n");

    let top = sb.wait_done("", "top", secs(15));
    assert_eq!(top.state(), "succeeded", "{:#}", top.record);
    assert_eq!(top.record["project"], "");
    let expected = format!("archive/succeeded/top.{}.md", top.id);
    assert_eq!(top.str_field("archive_path"), Some(expected.as_str()));
    assert!(sb.root.join(&expected).is_file());

    let deep = sb.wait_done("a/b", "deep", secs(15));
    assert_eq!(deep.state(), "succeeded", "{:#}", deep.record);
    let expected = format!("archive/succeeded/a/b/deep.{}.md", deep.id);
    assert_eq!(deep.str_field("archive_path"), Some(expected.as_str()));
    assert!(sb.root.join(&expected).is_file());
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
}

#[test]
fn same_name_dropped_twice_runs_twice_with_distinct_ids() {
    let sb = Sandbox::new();
    let script = sb.script("count", r#"echo run >> "$OUT/runs.txt""#);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);

    sb.drop_prompt("proj", "again", "first drop\n");
    let first = sb.wait_done("proj", "again", secs(15));
    sb.drop_prompt("proj", "again", "second drop\n");
    let second = sb.wait_done_excluding("proj", "again", std::slice::from_ref(&first.id), secs(15));

    assert_ne!(first.id, second.id);
    assert_eq!(first.state(), "succeeded", "{:#}", first.record);
    assert_eq!(second.state(), "succeeded", "{:#}", second.record);
    assert_eq!(sb.jobs_for("proj", "again").len(), 2);
    let archived = sb.files_under(&sb.root.join("archive/succeeded/proj"));
    assert_eq!(
        archived.len(),
        2,
        "two archive files, none overwritten: {archived:?}"
    );
    let first_copy =
        fs::read_to_string(sb.root.join(first.str_field("archive_path").expect("path")))
            .expect("first archive");
    let second_copy = fs::read_to_string(
        sb.root
            .join(second.str_field("archive_path").expect("path")),
    )
    .expect("second archive");
    assert_eq!(first_copy, "first drop\n");
    assert_eq!(second_copy, "second drop\n");
    let runs = fs::read_to_string(sb.out().join("runs.txt")).expect("runs.txt");
    assert_eq!(runs.lines().count(), 2, "the command ran once per drop");
}

/// Writes `content of <rel>` at `inbox/<rel>`, by rename from a hidden
/// temporary name when `by_rename`.
fn write_ignored(inbox: &std::path::Path, rel: &str, by_rename: bool) {
    let path = inbox.join(rel);
    let dir = path.parent().expect("parent");
    fs::create_dir_all(dir).expect("mkdir");
    let text = format!("content of {rel}\n");
    if by_rename {
        let tmp = dir.join(".jw-it-staging");
        fs::write(&tmp, &text).expect("write staging file");
        fs::rename(&tmp, &path).expect("rename ignored file into place");
    } else {
        fs::write(&path, &text).expect("write ignored file");
    }
}

#[test]
fn hidden_folders_and_non_prompt_names_are_ignored() {
    let sb = Sandbox::new();
    let script = sb.script("record", r#"echo "$1" >> "$OUT/ran.txt""#);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let inbox = sb.inbox();
    // Found by the start-up scan...
    let before = [
        ".hidden/secret.prompt.md",
        "proj/.dotfile.prompt.md",
        "proj/draft.tmp",
        "proj/draft.prompt.md.tmp",
        "proj/partial.prompt.md.partial",
        "proj/notes.md",
        "proj/readme.txt",
    ];
    // ...and reported by inotify (renamed in or written in place).
    let after = [
        (".hidden/late.prompt.md", true),
        (".git/objects/x.prompt.md", false),
        ("proj/.late-dot.prompt.md", true),
        ("proj/late.prompt.md.tmp", false),
        ("proj/late.md", true),
        ("proj/late-draft.tmp", false),
    ];
    for rel in before {
        write_ignored(&inbox, rel, false);
    }
    let _d = Daemon::start(&sb);
    for (rel, by_rename) in after {
        write_ignored(&inbox, rel, by_rename);
    }
    sb.drop_prompt("proj", "sentinel", "the only real prompt\n");
    let job = sb.wait_done("proj", "sentinel", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);

    // Give the daemon more than a rescan interval plus settle to misbehave.
    assert_never("a job for an ignored file", millis(1800), || {
        sb.job_dirs().len() > 1
    });
    let all = before
        .iter()
        .copied()
        .chain(after.iter().map(|(rel, _)| *rel));
    for rel in all {
        let text = fs::read_to_string(inbox.join(rel))
            .unwrap_or_else(|e| panic!("{rel} must stay untouched: {e}"));
        assert_eq!(text, format!("content of {rel}\n"));
    }
    let ran = fs::read_to_string(sb.out().join("ran.txt")).expect("ran.txt");
    assert_eq!(ran, "sentinel\n");
}

#[test]
fn events_can_be_turned_off_globally() {
    let sb = Sandbox::new();
    let script = sb.script("ok", "echo ok");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).global("events", "false"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "quiet", "no events please\n");
    let job = sb.wait_done("proj", "quiet", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let ops = job.ops();
    assert!(
        !ops.is_empty() && ops.iter().all(|op| JOURNAL_OPS.contains(&op.as_str())),
        "only the journal's lines written: {ops:?}"
    );
    assert_eq!(ops.last().map(String::as_str), Some("state"), "{ops:?}");
}

#[test]
fn same_name_dropped_while_running_waits_for_the_first_job() {
    let sb = Sandbox::new();
    let script = sb.script(
        "gate",
        r#"echo start >> "$OUT/order.txt"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done
echo end >> "$OUT/order.txt""#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).global("max_jobs", "4"));
    let _d = Daemon::start(&sb);

    sb.drop_prompt("proj", "twin", "first drop\n");
    let first = sb.wait_state("proj", "twin", "running", secs(15));
    let waiting = sb.drop_prompt("proj", "twin", "second drop\n");
    assert_never(
        "a second job of the same prompt while the first runs",
        millis(800),
        || sb.jobs_for("proj", "twin").len() > 1,
    );
    assert!(
        waiting.exists(),
        "the second drop waits in the inbox, untouched"
    );
    assert_eq!(
        fs::read_to_string(&waiting).expect("waiting prompt"),
        "second drop\n"
    );

    fs::write(sb.out().join("release"), "").expect("release");
    let second = sb.wait_done_excluding("proj", "twin", std::slice::from_ref(&first.id), secs(15));
    let first = sb.job(&first.id).expect("first job");
    assert_eq!(first.state(), "succeeded", "{:#}", first.record);
    assert_eq!(second.state(), "succeeded", "{:#}", second.record);
    assert!(
        second.time_ms("started_at") >= first.time_ms("finished_at"),
        "the second job starts only after the first ended"
    );
    let order = fs::read_to_string(sb.out().join("order.txt")).expect("order");
    assert_eq!(order, "start\nend\nstart\nend\n", "never overlapping");
}
