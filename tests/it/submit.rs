//! `jobwarden submit` and prompt front matter: the atomic drop and what it
//! refuses, the job id known in advance (front matter, `--job-id`, or
//! generated and written into the copy), `--wait` and its exit statuses
//! (retries followed under their `-rN` ids), and the daemon honouring
//! front matter in prompts dropped by other tools.

use std::fs;
use std::path::PathBuf;

use serde_json::Value;

use crate::support::*;

/// A job script that records what it was given as its prompt, however it
/// came (`$1` is the profile's `prompt_via`), and `$JOBWARDEN_PROMPT_FILE`.
const RECORDER: &str = r#"case "$1" in
  stdin) cat > "$OUT/got" ;;
  file) cp "$2" "$OUT/got" ;;
  arg) printf '%s' "$2" > "$OUT/got" ;;
esac
cp "$JOBWARDEN_PROMPT_FILE" "$OUT/env-file"
echo recorded"#;

/// Writes a prompt file outside the root, for `submit` to read.
fn prompt_file(sb: &Sandbox, file_name: &str, text: &str) -> PathBuf {
    let path = sb.base.join(file_name);
    fs::write(&path, text).expect("write prompt file");
    path
}

fn arg(path: &std::path::Path) -> &str {
    path.to_str().expect("UTF-8 sandbox path")
}

/// The terminal job `id`, its prompt archived.
fn wait_done_id(sb: &Sandbox, id: &str) -> Job {
    sb.wait_id(id, &format!("job {id} to end"), secs(15), Job::is_done)
}

fn json(out: &CliOutput) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is one JSON object ({e}): {out:?}"))
}

#[test]
fn submit_wait_succeeds_and_prints_the_id_the_job_runs_under() {
    let sb = Sandbox::new();
    let script = sb.script("record", RECORDER);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "stdin"]));
    let _d = Daemon::start(&sb);
    let body = "Fix the flaky test.\n";
    let file = prompt_file(&sb, "fix-it.prompt.md", body);

    let out = sb.run(&["submit", arg(&file), "--project", "acme/api", "--wait"]);

    assert_eq!(out.code(), 0, "{out:?}");
    let id = out.stdout.trim();
    assert_eq!(out.stdout, format!("{id}\n"), "just the id on stdout");
    let job = wait_done_id(&sb, id);
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(job.str_field("project"), Some("acme/api"));
    assert_eq!(
        job.str_field("name"),
        Some("fix-it"),
        "named after the file"
    );
    let ends: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("succeeded"))
        .collect();
    assert_eq!(ends.len(), 1, "the end, once: {out:?}");
    assert!(
        ends[0].starts_with(&format!("job {id} (acme/api/fix-it): ")),
        "{out:?}"
    );
    let copy = fs::read_to_string(job.dir.join("prompt.md")).expect("prompt.md");
    assert_eq!(
        copy,
        format!("---\njob_id: {id}\n---\n{body}"),
        "the submitted copy carries its id in front matter"
    );
    let got = fs::read_to_string(sb.out().join("got")).expect("the job's stdin");
    assert_eq!(got, body, "the command gets the body without front matter");
    assert_eq!(
        fs::read_to_string(file).expect("original"),
        body,
        "the submitted file itself is untouched"
    );
}

#[test]
fn wait_exits_4_when_the_job_failed() {
    let sb = Sandbox::new();
    let script = sb.script("three", "echo failing; exit 3");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    let file = prompt_file(&sb, "fails.md", "fail please\n");

    let out = sb.run(&["submit", arg(&file), "--wait"]);

    assert_eq!(
        out.code(),
        4,
        "failed, whatever the command's code: {out:?}"
    );
    let job = wait_done_id(&sb, out.stdout.trim());
    assert_eq!(job.state(), "failed");
    assert_eq!(job.str_field("name"), Some("fails"), "`.md` is dropped too");
    assert!(out.stderr.contains("failed (exit 3)"), "{out:?}");
}

#[test]
fn wait_exits_124_when_the_job_times_out() {
    let sb = Sandbox::new();
    let script = sb.script("slow", "sleep 30");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).profile("timeout", "\"1s\""));
    let _d = Daemon::start(&sb);
    let file = prompt_file(&sb, "slow.prompt.md", "take forever\n");

    let out = sb.run(&["submit", arg(&file), "--wait"]);

    assert_eq!(out.code(), 124, "{out:?}");
    let job = wait_done_id(&sb, out.stdout.trim());
    assert_eq!(job.state(), "timed_out");
}

#[test]
fn wait_exits_130_when_the_job_is_aborted() {
    let sb = Sandbox::new();
    let script = sb.script("block", "echo ready; while :; do sleep 0.05; done");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    let file = prompt_file(&sb, "stuck.prompt.md", "never ends\n");

    let out = std::thread::scope(|s| {
        let waiter = s.spawn(|| sb.run(&["submit", arg(&file), "--job-id", "abort-me", "--wait"]));
        sb.wait_id("abort-me", "job abort-me to run", secs(15), |j| {
            j.state() == "running" && j.log().contains("ready")
        });
        fs::write(sb.run_dir("abort-me").join("ABORT"), "enough\n").expect("write ABORT");
        waiter.join().expect("submit --wait thread")
    });

    assert_eq!(out.code(), 130, "{out:?}");
    assert_eq!(out.stdout, "abort-me\n");
    assert_eq!(sb.read_job("abort-me")["state"], "aborted");
}

#[test]
fn wait_follows_a_retry_to_its_success_under_the_r2_id() {
    let sb = Sandbox::new();
    let script = sb.script(
        "second-time-lucky",
        r#"echo "$JOBWARDEN_JOB_ID" >> "$OUT/runs.txt"
[ "$JOBWARDEN_ATTEMPT" = 1 ] && exit 3
exit 0"#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .profile("max_attempts", "2")
            .profile("cooldown", "\"50ms\""),
    );
    let _d = Daemon::start(&sb);
    let file = prompt_file(
        &sb,
        "nightly.prompt.md",
        "---\njob_id: nightly\n---\nBuild it.\n",
    );

    let out = sb.run(&["submit", arg(&file), "--wait", "--json"]);

    assert_eq!(out.code(), 0, "{out:?}");
    let v = json(&out);
    assert_eq!(v["job_id"], "nightly", "{v:#}");
    assert_eq!(v["final_job_id"], "nightly-r2", "{v:#}");
    assert_eq!(v["attempt"], 2, "{v:#}");
    assert_eq!(v["state"], "succeeded", "{v:#}");
    assert!(
        out.stderr.contains("now following job nightly-r2"),
        "{out:?}"
    );
    let first = sb.job("nightly").expect("the first attempt");
    assert_eq!(first.state(), "failed");
    assert_eq!(first.str_field("disposition"), Some("requeued"));
    let second = wait_done_id(&sb, "nightly-r2");
    assert_eq!(second.str_field("retry_of"), Some("nightly"));
    assert_eq!(second.int_field("attempt"), Some(2));
    let runs = fs::read_to_string(sb.out().join("runs.txt")).expect("runs");
    assert_eq!(runs, "nightly\nnightly-r2\n");
}

#[test]
fn front_matter_job_id_is_honoured_and_the_command_gets_only_the_body() {
    for mode in ["stdin", "file", "arg"] {
        let sb = Sandbox::new();
        let script = sb.script("record", RECORDER);
        let command: &[&str] = match mode {
            "file" => &["/bin/sh", &script, "file", "{prompt_file}"],
            _ => &["/bin/sh", &script, mode],
        };
        let quoted = format!("\"{mode}\"");
        sb.configure(&ConfigToml::new(command).profile("prompt_via", &quoted));
        let _d = Daemon::start(&sb);
        let body = "Do the thing.\n---\nA later fence is body.\n";
        let text = format!("---\r\n# set by the tool\r\njob_id: fm-{mode}\r\n---\r\n{body}");
        sb.drop_prompt("proj", "fm", &text);

        let job = wait_done_id(&sb, &format!("fm-{mode}"));
        assert_eq!(job.state(), "succeeded", "{mode}: {:#}", job.record);
        let copy = fs::read(job.dir.join("prompt.md")).expect("prompt.md");
        assert_eq!(copy, text.as_bytes(), "{mode}: prompt.md is byte-exact");
        let body_copy = fs::read(job.dir.join("body.md")).expect("body.md");
        assert_eq!(body_copy, body.as_bytes(), "{mode}: body.md");
        let got = fs::read_to_string(sb.out().join("got")).expect("what the command got");
        assert_eq!(got, body, "{mode}: the command gets the body alone");
        let env_file = fs::read_to_string(sb.out().join("env-file")).expect("prompt file");
        assert_eq!(env_file, body, "{mode}: JOBWARDEN_PROMPT_FILE is the body");
    }
}

#[test]
fn duplicate_front_matter_job_id_is_rejected_with_the_reason() {
    let sb = Sandbox::new();
    let script = sb.script("ok", "echo ran >> \"$OUT/ran\"");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "first", "---\njob_id: dup-1\n---\none\n");
    let first = wait_done_id(&sb, "dup-1");
    assert_eq!(first.state(), "succeeded");

    sb.drop_prompt("proj", "second", "---\njob_id: dup-1\n---\ntwo\n");
    let second = sb.wait_done("proj", "second", secs(15));

    assert_eq!(second.state(), "rejected", "{:#}", second.record);
    assert_ne!(second.id, "dup-1", "a rejection gets a generated id");
    let reason = second.str_field("state_reason").unwrap_or_default();
    assert!(reason.contains("duplicate job id"), "{reason}");
    assert!(reason.contains("\"dup-1\""), "{reason}");
    let archive = second.str_field("archive_path").expect("archived");
    assert!(
        archive.starts_with("archive/rejected/proj/second."),
        "{archive}"
    );
    assert_eq!(
        sb.read_job("dup-1")["name"],
        "first",
        "the first job keeps its id"
    );
    let ran = fs::read_to_string(sb.out().join("ran")).expect("ran");
    assert_eq!(ran, "ran\n", "the duplicate never ran");
}

#[test]
fn unknown_front_matter_key_is_rejected_by_the_daemon_and_refused_by_submit() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let text = "---\nprofle: fast\n---\nbody\n";
    let file = prompt_file(&sb, "typo.prompt.md", text);

    let out = sb.run(&["submit", arg(&file)]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("\"profle\""), "names the key: {out:?}");
    assert!(
        out.stderr.contains("job_id"),
        "lists the known keys: {out:?}"
    );
    assert!(
        out.stderr.contains("typo.prompt.md"),
        "names the file: {out:?}"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());

    let _d = Daemon::start(&sb);
    sb.drop_prompt("", "typo", text);
    let job = sb.wait_done("", "typo", secs(15));
    assert_eq!(job.state(), "rejected", "{:#}", job.record);
    let reason = job.str_field("state_reason").unwrap_or_default();
    assert!(reason.contains("front matter"), "{reason}");
    assert!(reason.contains("\"profle\""), "{reason}");
    let archived = fs::read_to_string(
        sb.root
            .join(job.str_field("archive_path").expect("archived")),
    )
    .expect("the rejected prompt is kept");
    assert_eq!(archived, text);
}

#[test]
fn submit_never_replaces_a_prompt_waiting_under_the_same_name() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let waiting = sb.write_prompt("proj", "same", "the original\n");
    let file = prompt_file(&sb, "same.prompt.md", "an impostor\n");

    let out = sb.run(&["submit", arg(&file), "--project", "proj"]);

    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("already waits"), "{out:?}");
    assert!(out.stderr.contains("same.prompt.md"), "{out:?}");
    assert!(
        out.stdout.is_empty(),
        "no id for a prompt not dropped: {out:?}"
    );
    assert_eq!(
        fs::read_to_string(&waiting).expect("original"),
        "the original\n"
    );
    assert_eq!(
        sb.inbox_files(),
        vec![waiting],
        "the temporary file is gone"
    );
}

#[test]
fn submit_refuses_unsafe_names_and_projects_and_a_nameless_stdin() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let file = prompt_file(&sb, "ok.prompt.md", "fine\n");
    let cases: &[(&[&str], &str)] = &[
        (&["--name", "../x"], "../x"),
        (&["--name", "a/b"], "a/b"),
        (&["--name", "two\nlines"], "two\\nlines"),
        (&["--project", "/abs"], "/abs"),
        (&["--project", "../up"], "../up"),
        (&["--project", "a/.hidden"], ".hidden"),
        (&["--job-id", "../etc"], "../etc"),
    ];
    for (extra, named) in cases {
        let mut args = vec!["submit", arg(&file)];
        args.extend_from_slice(extra);
        let out = sb.run(&args);
        assert_eq!(out.code(), 2, "{extra:?}: {out:?}");
        assert!(
            out.stderr.contains(named),
            "{extra:?} names {named:?}: {out:?}"
        );
    }
    let out = sb.run_with_stdin(&["submit", "-"], b"from stdin\n");
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("--name"), "{out:?}");
    assert!(
        sb.inbox_files().is_empty(),
        "nothing dropped: {:?}",
        sb.inbox_files()
    );
}

#[test]
fn submit_refuses_oversized_non_utf8_and_used_ids() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]).global("max_prompt_bytes", "\"64B\""));
    let big = prompt_file(&sb, "big.prompt.md", &"x".repeat(65));
    let out = sb.run(&["submit", arg(&big)]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("max_prompt_bytes"), "{out:?}");
    assert!(out.stderr.contains("big.prompt.md"), "{out:?}");

    let latin1 = sb.base.join("latin1.prompt.md");
    fs::write(&latin1, b"caf\xe9\n").expect("write");
    let out = sb.run(&["submit", arg(&latin1)]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("UTF-8"), "{out:?}");

    fs::create_dir_all(sb.run_dir("taken")).expect("a used id");
    let ok = prompt_file(&sb, "ok.prompt.md", "fine\n");
    let out = sb.run(&["submit", arg(&ok), "--job-id", "taken"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("\"taken\" is already used"), "{out:?}");

    let both = prompt_file(&sb, "both.prompt.md", "---\njob_id: mine\n---\nx\n");
    let out = sb.run(&["submit", arg(&both), "--job-id", "other"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("--job-id"), "{out:?}");
    assert!(
        sb.inbox_files().is_empty(),
        "nothing dropped: {:?}",
        sb.inbox_files()
    );
}

#[test]
fn stdin_submit_drops_the_prompt_under_its_name_and_json_says_where() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));

    let out = sb.run_with_stdin(
        &[
            "submit",
            "-",
            "--name",
            "piped",
            "--project",
            "a/b",
            "--job-id",
            "piped-1",
            "--json",
        ],
        b"from a pipe\n",
    );

    assert_eq!(out.code(), 0, "{out:?}");
    let v = json(&out);
    let dest = sb.inbox().join("a/b/piped.prompt.md");
    assert_eq!(v["job_id"], "piped-1", "{v:#}");
    assert_eq!(v["project"], "a/b", "{v:#}");
    assert_eq!(v["name"], "piped", "{v:#}");
    assert_eq!(v["prompt_path"], dest.to_str().expect("UTF-8"), "{v:#}");
    let keys: Vec<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 4, "no end without --wait: {keys:?}");
    assert_eq!(
        fs::read_to_string(&dest).expect("dropped"),
        "---\njob_id: piped-1\n---\nfrom a pipe\n"
    );
    assert!(out.stderr.contains("no daemon is running"), "{out:?}");

    let _d = Daemon::start(&sb);
    let job = wait_done_id(&sb, "piped-1");
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(job.log(), "from a pipe\n", "the command got the body");
}

#[test]
fn wait_without_a_daemon_says_so_once_and_still_waits() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let file = prompt_file(&sb, "later.prompt.md", "whenever\n");

    let out = std::thread::scope(|s| {
        let waiter = s.spawn(|| sb.run(&["submit", arg(&file), "--wait", "--json"]));
        wait_until("the prompt in the inbox", secs(10), || {
            sb.inbox().join("later.prompt.md").exists().then_some(())
        });
        let _d = Daemon::start(&sb);
        waiter.join().expect("submit --wait thread")
    });

    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(
        out.stderr.matches("no daemon is running").count(),
        1,
        "{out:?}"
    );
    let v = json(&out);
    assert_eq!(v["state"], "succeeded", "{v:#}");
    assert_eq!(v["exit_code"], 0, "{v:#}");
    assert!(v["state_reason"].is_null(), "{v:#}");
    assert_eq!(v["final_job_id"], v["job_id"], "{v:#}");
}

#[test]
fn a_claim_cut_short_does_not_make_its_front_matter_id_a_duplicate() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    // What a crash after the claim's run folder and copies leaves: the
    // prompt claimed, a folder without job.json.
    let text = "---\njob_id: cut-short\n---\nagain\n";
    let dir = sb.project_dir("proj");
    fs::create_dir_all(&dir).expect("project dir");
    fs::write(dir.join("p.running.md"), text).expect("claimed prompt");
    let run = sb.run_dir("cut-short");
    fs::create_dir_all(&run).expect("run folder");
    fs::write(run.join("prompt.md"), text).expect("copy");
    fs::write(run.join("body.md"), "again\n").expect("body");

    let _d = Daemon::start(&sb);
    let job = wait_done_id(&sb, "cut-short");

    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(job.log(), "again\n");
    assert_eq!(sb.jobs().len(), 1, "one job, under the prompt's own id");
}

#[test]
fn wait_reports_its_own_rejection_when_its_id_was_taken_after_the_drop() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let file = prompt_file(&sb, "late.prompt.md", "mine\n");

    let out = std::thread::scope(|s| {
        let waiter =
            s.spawn(|| sb.run(&["submit", arg(&file), "--job-id", "taken-late", "--wait"]));
        wait_until("the prompt in the inbox", secs(10), || {
            sb.inbox().join("late.prompt.md").exists().then_some(())
        });
        // Between the drop and the claim, something else takes the id.
        fs::create_dir_all(sb.run_dir("taken-late")).expect("run folder");
        fs::write(sb.run_dir("taken-late").join("ABORT"), "not a leftover\n").expect("marker");
        let _d = Daemon::start(&sb);
        waiter.join().expect("submit --wait thread")
    });

    assert_eq!(out.code(), 65, "{out:?}");
    assert!(out.stderr.contains("rejected"), "{out:?}");
    assert!(out.stderr.contains("duplicate job id"), "{out:?}");
    let rejected = sb.jobs_for("", "late");
    assert_eq!(rejected.len(), 1, "one job for the prompt");
    assert_eq!(rejected[0].state(), "rejected");
    assert!(
        out.stderr
            .contains(&format!("job {} (late): ", rejected[0].id)),
        "reports the job that holds its prompt: {out:?}"
    );
}
