//! The operator's commands on a job: `logs` (whole, `--tail`, `-f`),
//! `events` (filters, summaries, unreadable lines), `abort` (by prefix,
//! short id or prompt name, ambiguity, `--all --wait`) and `retry` (attempts,
//! cooldown, `--now`), and how every `<job>` argument refuses path tricks.

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

/// A job script that prints `<name> first`, waits for `$OUT/release-<name>`,
/// prints `<name> second` and exits with `$EXIT` (0 by default).
const STEPPED: &str = r#"echo "$1 first"
while [ ! -e "$OUT/release-$1" ]; do sleep 0.05; done
echo "$1 second"
exit "${EXIT:-0}""#;

/// A daemon whose jobs run [`STEPPED`] with their prompt's name.
fn stepped(sb: &Sandbox, cfg: impl FnOnce(ConfigToml) -> ConfigToml) -> Daemon {
    let script = sb.script("stepped", STEPPED);
    sb.configure(&cfg(ConfigToml::new(&["/bin/sh", &script, "{name}"])));
    Daemon::start(sb)
}

fn release(sb: &Sandbox, name: &str) {
    fs::write(sb.out().join(format!("release-{name}")), "").expect("release");
}

/// Runs a CLI command with a deadline, keeping stdout as bytes.
fn run_bytes(sb: &Sandbox, args: &[&str]) -> (i32, Vec<u8>, String) {
    static SERIAL: AtomicUsize = AtomicUsize::new(0);
    let n = SERIAL.fetch_add(1, Ordering::SeqCst);
    let out_path = sb.base.join(format!("bytes-{n}.stdout"));
    let err_path = out_path.with_extension("stderr");
    let mut child = sb
        .command(args)
        .stdout(fs::File::create(&out_path).expect("stdout file"))
        .stderr(fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn jobwarden");
    let status = wait_exit(&mut child, secs(20), &format!("jobwarden {args:?}"));
    let code = status.code().expect("exited, not killed");
    let stdout = fs::read(&out_path).expect("read stdout");
    let stderr = fs::read_to_string(&err_path).unwrap_or_default();
    (code, stdout, stderr)
}

fn wait_exit(child: &mut Child, deadline: Duration, what: &str) -> ExitStatus {
    wait_until(&format!("{what} to exit"), deadline, || {
        child.try_wait().expect("try_wait")
    })
}

/// Parses a command's stdout as JSON.
fn json(out: &CliOutput) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out:?}"))
}

/// Every ABORT marker under the sandbox.
fn abort_markers(sb: &Sandbox) -> Vec<std::path::PathBuf> {
    sb.files_under(&sb.base)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "ABORT"))
        .collect()
}

// -- logs ----------------------------------------------------------------------

#[test]
fn logs_prints_the_whole_log_its_tail_and_stops_quietly_at_a_closed_pipe() {
    let sb = Sandbox::new();
    let script = sb.script(
        "chatty",
        r#"i=1
while [ $i -le 5 ]; do echo "line $i"; i=$((i+1)); done
printf 'raw \377\376 bytes\n'
seq 1 30000"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "chatty", "talk\n");
    let job = sb.wait_done("proj", "chatty", secs(20));
    let log = fs::read(job.dir.join("job.log")).expect("job.log");
    assert!(
        log.windows(2).any(|w| w == b"\xff\xfe"),
        "the job wrote invalid UTF-8"
    );

    let (code, stdout, stderr) = run_bytes(&sb, &["logs", &job.id]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, log, "the log is copied byte for byte");

    let (code, stdout, stderr) = run_bytes(&sb, &["logs", "proj/chatty", "--tail", "3"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, b"29998\n29999\n30000\n");

    let (code, stdout, _) = run_bytes(&sb, &["logs", &job.id, "--tail", "30001"]);
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with(b"raw \xff\xfe bytes\n1\n"),
        "the tail keeps invalid bytes: {:?}",
        String::from_utf8_lossy(&stdout[..20])
    );

    // `| head`: the reader goes away after a few bytes.
    let mut child = sb
        .command(&["logs", &job.id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn logs");
    let mut first = [0u8; 16];
    child
        .stdout
        .take()
        .expect("stdout pipe")
        .read_exact(&mut first)
        .expect("read the start");
    assert_eq!(&first[..7], b"line 1\n");
    let status = wait_exit(&mut child, secs(10), "logs into a closed pipe");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr pipe")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert_eq!(
        status.code(),
        Some(0),
        "a closed pipe ends quietly: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A `logs -f` child whose stdout is collected by a thread.
struct Follower {
    child: Child,
    chunks: Receiver<Vec<u8>>,
    seen: Vec<u8>,
    stderr_path: std::path::PathBuf,
}

impl Follower {
    fn start(sb: &Sandbox, job: &str) -> Follower {
        let stderr_path = sb.base.join(format!("follow-{job}.stderr"));
        let mut child = sb
            .command(&["logs", job, "-f"])
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&stderr_path).expect("stderr file"))
            .spawn()
            .expect("spawn logs -f");
        let mut stdout = child.stdout.take().expect("stdout pipe");
        let (tx, chunks) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Follower {
            child,
            chunks,
            seen: Vec::new(),
            stderr_path,
        }
    }

    fn text(&mut self) -> String {
        while let Ok(chunk) = self.chunks.try_recv() {
            self.seen.extend(chunk);
        }
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    fn wait_for(&mut self, needle: &str, deadline: Duration) {
        let what = format!("{needle:?} on the follower's stdout");
        wait_until(&what, deadline, || {
            self.text().contains(needle).then_some(())
        });
    }

    fn exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn logs_follow_waits_for_a_queued_job_prints_lines_as_they_come_and_ends_with_the_job() {
    let sb = Sandbox::new();
    let _d = stepped(&sb, |c| c.global("max_jobs", "1").env("EXIT", "3"));
    sb.drop_prompt("proj", "holder", "takes the only slot\n");
    sb.wait_state("proj", "holder", "running", secs(15));
    sb.drop_prompt("proj", "slow", "prints slowly\n");
    let queued = sb.wait_state("proj", "slow", "queued", secs(10));
    assert!(!queued.dir.join("job.log").exists(), "no log while queued");

    let mut follower = Follower::start(&sb, &queued.id);
    assert_never("logs -f to end on a queued job", millis(500), || {
        follower.exited()
    });

    release(&sb, "holder");
    follower.wait_for("slow first\n", secs(15));
    let job = sb.job(&queued.id).expect("record");
    assert_eq!(job.state(), "running", "a line is seen before the job ends");
    assert!(!follower.exited(), "still following a running job");

    release(&sb, "slow");
    let t0 = Instant::now();
    let status = wait_exit(&mut follower.child, secs(15), "logs -f");
    // The script exits 3 ($EXIT): the job failed, and so does `logs -f`.
    assert_eq!(status.code(), Some(4), "{}", follower.stderr());
    let done = sb.job(&queued.id).expect("record");
    assert!(
        done.is_terminal(),
        "it ended with the job: {:#}",
        done.record
    );
    assert!(t0.elapsed() < secs(5), "it ended by itself");
    // The reader thread drains what is left once the pipe closes.
    wait_until("the whole log on stdout", secs(5), || {
        (follower.text().as_bytes() == done.log().as_bytes()).then_some(())
    });
    let stderr = follower.stderr();
    assert!(
        stderr.contains(&format!("job {} failed (exit 3)", queued.id)),
        "final state on stderr: {stderr:?}"
    );
    assert!(
        !follower.text().contains("failed"),
        "stdout is the log only"
    );
}

#[test]
fn logs_follow_on_a_finished_job_prints_it_and_its_end() {
    let sb = Sandbox::new();
    let script = sb.script("ok", "echo done and dusted");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("", "quick", "go\n");
    let job = sb.wait_done("", "quick", secs(15));

    let out = sb.run(&["logs", "quick", "-f"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "done and dusted\n");
    assert!(
        out.stderr.contains(&format!("job {} succeeded", job.id)),
        "{out:?}"
    );
}

// -- events --------------------------------------------------------------------

/// A finished job with a known, stable event stream.
fn finished_job(sb: &Sandbox) -> Job {
    let script = sb.script("ok", "echo ok");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let mut d = Daemon::start(sb);
    sb.drop_prompt("proj", "evented", "go\n");
    let job = sb.wait_done("proj", "evented", secs(15));
    wait_archived_event(sb, &job.id);
    // Nobody appends to its events any more.
    d.sigterm();
    d.wait_exit(secs(10));
    sb.job(&job.id).expect("record")
}

fn seqs(v: &Value) -> Vec<u64> {
    v["events"]
        .as_array()
        .expect("events array")
        .iter()
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect()
}

#[test]
fn events_filters_combine_and_summaries_count_what_they_keep() {
    let sb = Sandbox::new();
    let job = finished_job(&sb);
    let all = job.events();
    let total = all.len() as u64;
    let states: Vec<&Value> = all.iter().filter(|e| e["op"] == "state").collect();
    assert!(states.len() >= 2, "{:?}", job.ops());

    let everything = json(&sb.run(&["events", &job.id, "--json"]));
    assert_eq!(everything["job_id"], job.id.as_str());
    assert_eq!(everything["total"], total);
    assert_eq!(everything["shown"], total);
    assert_eq!(everything["unreadable"], 0);

    let out = sb.run(&["events", &job.id, "--op", "state", "--last", "1", "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let last_state = json(&out);
    assert_eq!(last_state["total"], total);
    assert_eq!(last_state["shown"], 1);
    assert_eq!(last_state["events"][0]["to"], "succeeded");

    let out = sb.run(&["events", &job.id, "--op", "started,claimed", "--json"]);
    let ops: Vec<String> = json(&out)["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["op"].as_str().expect("op").to_owned())
        .collect();
    assert_eq!(ops, vec!["claimed", "started"]);

    let from3 = json(&sb.run(&["events", &job.id, "--from-seq", "3", "--json"]));
    assert_eq!(seqs(&from3), (3..=total).collect::<Vec<_>>());
    let combined = sb.run(&[
        "events",
        &job.id,
        "--from-seq",
        "3",
        "--op",
        "claimed",
        "--json",
    ]);
    assert_eq!(combined.code(), 1, "claimed is seq 1: nothing matches");
    assert_eq!(json(&combined)["shown"], 0);
    assert_eq!(json(&combined)["events"], Value::Array(Vec::new()));

    let human = sb.run(&["events", &job.id]);
    assert_eq!(human.code(), 0, "{human:?}");
    let lines: Vec<&str> = human.stdout.lines().collect();
    assert_eq!(lines.len() as u64, total, "{}", human.stdout);
    assert!(
        lines.iter().all(|l| l.chars().count() <= 80),
        "{}",
        human.stdout
    );
    assert!(lines[0].contains("claimed"), "{}", human.stdout);
    assert!(
        lines[0].contains(" ago ") || lines[0].contains("just now"),
        "relative times: {}",
        human.stdout
    );
    assert!(
        human.stderr.contains(&format!("{total} of {total} events")),
        "{human:?}"
    );

    let summary = sb.run(&["events", &job.id, "--summary", "--json"]);
    assert_eq!(summary.code(), 0, "{summary:?}");
    let summary = json(&summary);
    assert_eq!(summary["total"], total);
    assert_eq!(summary["ops"]["state"]["count"], states.len());
    assert_eq!(summary["ops"]["claimed"]["count"], 1);
    assert_eq!(summary["first"], all[0]["ts"]);
    assert_eq!(summary["last"], all[all.len() - 1]["ts"]);
    assert_eq!(summary["ops"]["state"]["first"], states[0]["ts"]);
    assert_eq!(
        summary["ops"]["state"]["last"],
        states[states.len() - 1]["ts"]
    );

    let only_states = json(&sb.run(&["events", &job.id, "--summary", "--op", "state", "--json"]));
    assert_eq!(only_states["shown"], states.len());
    let keys: Vec<&String> = only_states["ops"]
        .as_object()
        .expect("ops")
        .keys()
        .collect();
    assert_eq!(keys, vec!["state"], "filters apply before summarising");

    let table = sb.run(&["events", &job.id, "--summary"]);
    assert_eq!(table.code(), 0, "{table:?}");
    let total_row = table.stdout.lines().last().expect("a total row");
    assert!(
        total_row.starts_with("total") && total_row.contains(&total.to_string()),
        "{}",
        table.stdout
    );

    for bad in ["0", "-1"] {
        let out = sb.run(&["events", &job.id, "--last", bad]);
        assert_eq!(out.code(), 2, "--last {bad} is a usage error: {out:?}");
    }
    let none = sb.run(&["events", &job.id, "--op", "publish_started"]);
    assert_eq!(none.code(), 1, "nothing matched: {none:?}");
    assert_eq!(none.stdout, "");
    assert!(
        none.stderr.contains(&format!("0 of {total} events")),
        "{none:?}"
    );
}

#[test]
fn events_count_a_torn_last_line_as_unreadable() {
    let sb = Sandbox::new();
    let job = finished_job(&sb);
    let total = job.events().len() as u64;
    let path = job.dir.join("events.jsonl");
    let mut text = fs::read(&path).expect("events");
    text.extend_from_slice(br#"{"seq": 99, "op": "tor"#);
    fs::write(&path, text).expect("tear the last line");

    let out = sb.run(&["events", &job.id, "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let v = json(&out);
    assert_eq!(v["total"], total, "the torn line is not an event");
    assert_eq!(v["unreadable"], 1);
    let human = sb.run(&["events", &job.id]);
    assert!(
        human.stderr.contains("1 unreadable line"),
        "the footer says so: {human:?}"
    );
    let summary = json(&sb.run(&["events", &job.id, "--summary", "--json"]));
    assert_eq!(summary["unreadable"], 1);
}

// -- abort ---------------------------------------------------------------------

/// The shortest prefix of `id` that no id in `others` starts with.
fn unique_prefix(id: &str, others: &[&str]) -> String {
    (4..=id.len())
        .map(|n| &id[..n])
        .find(|p| others.iter().all(|o| !o.starts_with(p)))
        .expect("ids differ")
        .to_owned()
}

#[test]
fn abort_resolves_prefixes_short_ids_and_prompt_names_and_refuses_ambiguity() {
    let sb = Sandbox::new();
    let _d = stepped(&sb, |c| c);
    for name in ["a", "b", "c"] {
        sb.drop_prompt("proj", name, "block\n");
    }
    let [a, b, c] = ["a", "b", "c"].map(|n| sb.wait_state("proj", n, "running", secs(15)));

    let common: String =
        a.id.chars()
            .zip(b.id.chars())
            .take_while(|(x, y)| x == y)
            .map(|(x, _)| x)
            .collect();
    assert!(
        common.len() >= 4,
        "ids of one minute share a prefix: {} {}",
        a.id,
        b.id
    );
    let out = sb.run(&["abort", "proj/c", &common]);
    assert_eq!(out.code(), 2, "ambiguous: {out:?}");
    assert!(
        out.stderr.contains(&a.id) && out.stderr.contains(&b.id),
        "the candidates are listed: {}",
        out.stderr
    );
    assert!(
        abort_markers(&sb).is_empty(),
        "one bad argument writes nothing"
    );

    let prefix = unique_prefix(&a.id, &[&b.id, &c.id]);
    let out = sb.run(&["abort", &prefix, "--reason", "by prefix"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(a.dir.join("ABORT").exists());

    let short = &b.id[b.id.len() - 8..];
    assert!(!a.id.ends_with(short) && !c.id.ends_with(short));
    let out = sb.run(&["abort", &short[..6]]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(b.dir.join("ABORT").exists());
    assert!(!c.dir.join("ABORT").exists(), "only the jobs named");

    let out = sb.run(&["abort", "proj/c"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains(&c.id), "{out:?}");
    for job in [&a, &b, &c] {
        let done = sb.wait_id(&job.id, "job to be aborted", secs(10), Job::is_terminal);
        assert_eq!(done.state(), "aborted", "{:#}", done.record);
    }
    let reason = sb
        .job(&a.id)
        .expect("a")
        .str_field("state_reason")
        .map(str::to_owned);
    assert!(reason.is_some_and(|r| r.contains("by prefix")));

    let out = sb.run(&["abort", "proj/c"]);
    assert_eq!(out.code(), 1, "already ended: {out:?}");
    assert!(out.stdout.contains("already ended (aborted)"), "{out:?}");
}

#[test]
fn abort_all_wait_returns_only_when_every_job_has_ended() {
    let sb = Sandbox::new();
    let _d = stepped(&sb, |c| c.global("max_jobs", "2"));
    sb.drop_prompt("proj", "done", "ends at once\n");
    release(&sb, "done");
    let finished = sb.wait_done("proj", "done", secs(15));
    for name in ["r1", "r2", "q"] {
        sb.drop_prompt("proj", name, "block\n");
    }
    let running: Vec<Job> = ["r1", "r2"]
        .iter()
        .map(|n| sb.wait_state("proj", n, "running", secs(15)))
        .collect();
    let queued = sb.wait_state("proj", "q", "queued", secs(10));

    let out = sb.run(&["abort", "--all", "--wait", "--reason", "clean up"]);
    assert_eq!(out.code(), 0, "{out:?}");
    // The queued job never started: it is cancelled, the others aborted.
    let ended = running.iter().map(|j| (j, "aborted"));
    for (job, state) in ended.chain([(&queued, "cancelled")]) {
        let now = sb.job(&job.id).expect("record");
        assert_eq!(now.state(), state, "terminal on return: {:#}", now.record);
        assert!(
            out.stdout.contains(&format!("{}: {state}", job.id)),
            "its final state is printed: {}",
            out.stdout
        );
    }
    assert!(!out.stdout.contains(&finished.id), "{}", out.stdout);
    assert!(
        !finished.dir.join("ABORT").exists(),
        "an ended job is not marked"
    );
    assert!(
        sb.job(&queued.id).expect("q").record["pid"].is_null(),
        "the queued job never started"
    );

    let again = sb.run(&["abort", "--all"]);
    assert_eq!(again.code(), 1, "nothing left to abort: {again:?}");
}

// -- every <job> argument ------------------------------------------------------

#[test]
fn path_tricks_are_refused_by_every_job_command_and_touch_nothing() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    fs::create_dir_all(sb.runs()).expect("runs");
    fs::create_dir_all(sb.inbox()).expect("inbox");
    let before = sb.files_under(&sb.base);
    for cmd in ["logs", "events", "abort", "retry"] {
        for bad in [
            "../x",
            "/etc/passwd",
            "a/../b",
            "..",
            "proj/..",
            "../../escape",
        ] {
            let out = sb.run(&[cmd, bad]);
            assert_eq!(out.code(), 2, "{cmd} {bad:?}: {out:?}");
            assert!(out.stdout.is_empty(), "{cmd} {bad:?}: {out:?}");
        }
        let out = sb.run(&[cmd, "01900000-0000-7000-8000-000000000000"]);
        assert_eq!(
            out.code(),
            1,
            "{cmd} of an unknown job is a clean no: {out:?}"
        );
    }
    let after: Vec<_> = sb
        .files_under(&sb.base)
        .into_iter()
        .filter(|p| !is_cli_capture(p))
        .collect();
    assert_eq!(after, before, "nothing was written");
    assert!(!Path::new("/etc/ABORT").exists());
}

/// The files `Sandbox::run` captures output in.
fn is_cli_capture(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("cli-"))
}

// -- retry ---------------------------------------------------------------------

#[test]
fn retry_is_a_new_attempt_that_waits_for_the_cooldown_unless_now() {
    let sb = Sandbox::new();
    let script = sb.script("fail", "echo failing; exit 3");
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .profile("max_attempts", "1")
            .profile("cooldown", "\"1h\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "later", "wait your turn\n");
    sb.drop_prompt("proj", "now", "go again at once\n");
    let later = sb.wait_done("proj", "later", secs(15));
    let now = sb.wait_done("proj", "now", secs(15));
    assert_eq!(later.state(), "failed");
    assert_eq!(now.state(), "failed");

    let out = sb.run(&["retry", &later.id]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        out.stdout.contains("proj/later put back for attempt 2"),
        "{out:?}"
    );
    let waiting = sb.project_dir("proj").join("later.prompt.md");
    assert_eq!(
        fs::read_to_string(&waiting).expect("put back"),
        "wait your turn\n"
    );
    let archived = sb
        .root
        .join(later.str_field("archive_path").expect("archived"));
    assert!(archived.is_file(), "the archive keeps its copy");
    assert_never("the retry to start within its cooldown", secs(2), || {
        sb.jobs_for("proj", "later").len() > 1
    });
    assert!(waiting.is_file(), "deferred: it waits in the inbox");
    let twice = sb.run(&["retry", &later.id]);
    assert_eq!(twice.code(), 1, "already put back: {twice:?}");
    assert!(
        twice.stderr.contains("already put back by another retry"),
        "{twice:?}"
    );

    let out = sb.run(&["retry", "proj/now", "--now"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let retried = sb.wait_done_excluding("proj", "now", std::slice::from_ref(&now.id), secs(15));
    assert_eq!(
        retried.int_field("attempt"),
        Some(2),
        "{:#}",
        retried.record
    );
    assert_eq!(retried.str_field("retry_of"), Some(now.id.as_str()));
    assert_eq!(retried.log(), "failing\n", "it ran");
    let claimed = retried
        .events()
        .into_iter()
        .find(|e| e["op"] == "claimed")
        .expect("claimed event");
    assert_eq!(claimed["attempt"], 2);
    let left: Vec<_> = sb
        .inbox_files()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("now"))
        .collect();
    assert!(
        left.is_empty(),
        "nothing of the retry is left in the inbox: {left:?}"
    );
}

#[test]
fn retry_of_a_job_that_has_not_ended_is_refused() {
    let sb = Sandbox::new();
    let _d = stepped(&sb, |c| c);
    sb.drop_prompt("proj", "busy", "block\n");
    let job = sb.wait_state("proj", "busy", "running", secs(15));

    let out = sb.run(&["retry", &job.id]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("still running"), "{out:?}");
    assert!(out.stderr.contains("abort it first"), "{out:?}");
    assert!(
        !sb.project_dir("proj").join("busy.prompt.md").exists(),
        "nothing put back"
    );
    release(&sb, "busy");
    sb.wait_done("proj", "busy", secs(10));
}
