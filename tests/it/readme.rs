//! The README's Quickstart, run as written: its shell blocks are read from
//! `README.md` and each line runs in `bash` from the checkout, exactly as a
//! newcomer pastes it. Only the demo root (`/tmp/jobwarden-demo`) is
//! replaced, by the sandbox's. What a line's comment says it prints is
//! checked; a commented line this test does not know fails it, so the README
//! cannot drift from the binary without this test saying so.
//!
//! The first block (`cargo run --release … daemon`) runs in the background
//! for the whole test. The second is the test command itself: it is not run
//! again here, but it must be the one `.ci/run` runs. `cargo run --release`
//! builds the release binary if it is not there yet (`.ci/run` builds it
//! before the suite), so the deadlines below allow for a build.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::support::*;

/// The root the README's commands use.
const DEMO_ROOT: &str = "/tmp/jobwarden-demo";

/// Long enough for `cargo run --release` to build the binary from scratch.
const BUILD_DEADLINE: Duration = Duration::from_secs(20 * 60);

fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The ```sh blocks of the README's `## Quickstart` section, line by line.
fn quickstart_blocks() -> Vec<Vec<String>> {
    section_blocks("Quickstart")
}

/// The ```sh blocks of the README's section `## <heading>` (up to the
/// next `## `), line by line, blank lines left out.
fn section_blocks(heading: &str) -> Vec<Vec<String>> {
    let readme = fs::read_to_string(checkout().join("README.md")).expect("read README.md");
    let start = readme
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("README has a section {heading:?}"));
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```sh" {
            let block: Vec<String> = lines
                .by_ref()
                .take_while(|l| l.trim() != "```")
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect();
            blocks.push(block);
        }
    }
    blocks
}

/// A line's command and the comment after it (`cmd   # says`), if any.
fn split_comment(line: &str) -> (&str, Option<&str>) {
    match line.find("   #") {
        Some(i) => (line[..i].trim_end(), Some(line[i + 4..].trim())),
        None => (line.trim_end(), None),
    }
}

/// One line in bash, from the checkout, with the demo root replaced.
fn bash(line: &str, root: &Path, sb: &Sandbox) -> Command {
    let line = line.replace(DEMO_ROOT, &root.display().to_string());
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(line).current_dir(checkout());
    // The newcomer has no config file and no jobwarden variables set.
    cmd.env_remove("JOBWARDEN_HOME")
        .env_remove("JOBWARDEN_CONFIG")
        .env("XDG_CONFIG_HOME", sb.out().join("xdg-config"));
    cmd
}

/// Run `line` to its end within `deadline`; its output.
fn run_line(line: &str, root: &Path, sb: &Sandbox, deadline: Duration) -> Output {
    let mut child = bash(line, root, sb)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn bash");
    let started = Instant::now();
    while child.try_wait().expect("wait bash").is_none() {
        if started.elapsed() > deadline {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let out = child.wait_with_output().expect("collect bash");
            panic!(
                "README line did not finish within {deadline:?}: {line}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(millis(20));
    }
    child.wait_with_output().expect("collect bash")
}

/// The daemon of the first block, stopped with Ctrl-C (SIGINT to its
/// process group) when dropped.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGINT);
        let _ = self.0.wait();
    }
}

fn start_daemon(line: &str, root: &Path, sb: &Sandbox) -> Background {
    let log = fs::File::create(sb.out().join("readme-daemon.log")).expect("daemon log");
    let child = bash(line, root, sb)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("spawn the README's daemon line");
    Background(child)
}

/// Wait until the README's daemon says it is ready; fail with its output
/// if it exits instead.
fn wait_ready(daemon: &mut Background, sb: &Sandbox) {
    let log = sb.out().join("readme-daemon.log");
    wait_until("the README's daemon to be ready", BUILD_DEADLINE, || {
        let text = fs::read_to_string(&log).unwrap_or_default();
        if let Some(status) = daemon.0.try_wait().expect("wait daemon") {
            panic!("the README's daemon line exited ({status}) before it was ready:\n{text}");
        }
        text.contains("daemon ready").then_some(())
    });
}

/// What the README says a line prints, checked against what it printed.
fn check_says(says: &str, stdout: &str, job_id: &str, prompt_text: &str) {
    let ok = match says {
        r#""state": "succeeded""# => stdout.contains(says),
        "the demo's output: your prompt" => stdout.contains(prompt_text),
        "hello.<job_id>.md" => stdout.trim() == format!("hello.{job_id}.md"),
        "its ledger record: success" => stdout.contains("demo/hello") && stdout.contains("success"),
        "record, files, log, ledger row" => [job_id, "succeeded", "files", "ledger", prompt_text]
            .iter()
            .all(|s| stdout.contains(s)),
        "all_done, 1 succeeded" => stdout.contains("all_done") && stdout.contains("1 succeeded"),
        other => panic!(
            "the README's Quickstart says a line prints {other:?}, which this test does not \
             check yet: add the check to tests/it/readme.rs"
        ),
    };
    assert!(ok, "README says {says:?}, but the line printed:\n{stdout}");
}

#[test]
fn readme_quickstart_runs_as_written() {
    let sb = Sandbox::new();
    let root = sb.out().join("jobwarden-demo");
    let blocks = quickstart_blocks();
    assert_eq!(
        blocks.len(),
        3,
        "the Quickstart has three blocks: {blocks:?}"
    );

    // Block 2 is the test command: the very one CI runs.
    let ci = fs::read_to_string(checkout().join(".ci/run")).expect("read .ci/run");
    for line in &blocks[1] {
        assert!(
            ci.lines().any(|l| l.trim() == line.trim()),
            "the README's test command {line:?} is not what .ci/run runs"
        );
    }

    // Block 1: the daemon, in the background.
    assert_eq!(blocks[0].len(), 1, "block 1 is the daemon alone");
    let mut daemon = start_daemon(&blocks[0][0], &root, &sb);
    wait_ready(&mut daemon, &sb);

    // Block 3, line by line.
    let (first, _) = split_comment(&blocks[2][0]);
    let prompt_text = first
        .split('"')
        .nth(1)
        .expect("the first line echoes the prompt's text in double quotes")
        .to_owned();
    let mut job_id = String::new();
    for line in &blocks[2] {
        let (cmd, says) = split_comment(line);
        let out = run_line(cmd, &root, &sb, BUILD_DEADLINE);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "README line failed ({}): {cmd}\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "{cmd}: {stderr}");
        if cmd.contains(" submit ") {
            job_id = stdout.lines().next().unwrap_or_default().trim().to_owned();
            assert_eq!(job_id.len(), 36, "submit prints the job id: {stdout}");
        }
        if let Some(says) = says {
            check_says(says, &stdout, &job_id, &prompt_text);
        }
    }
    assert!(!job_id.is_empty(), "the Quickstart submits a prompt");
    drop(daemon);
}

/// The recipe of "Dropping prompts", run as written (`$ROOT` set, no
/// daemon, so that the prompt waits): a second drop of the same name
/// replaces nothing and says so, its text kept beside.
#[test]
fn readme_drop_recipe_never_replaces_a_waiting_prompt() {
    let sb = Sandbox::new();
    let blocks = section_blocks("Dropping prompts");
    let recipe = blocks.first().expect("a shell block").join("\n");
    assert!(
        recipe.contains("$ROOT/inbox/acme/fix.prompt.md"),
        "{recipe}"
    );
    let run = || {
        let out = bash(&recipe, &sb.root, &sb)
            .env("ROOT", &sb.root)
            .output()
            .expect("run the recipe");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let prompt = sb.root.join("inbox/acme/fix.prompt.md");
    let kept = sb.root.join("inbox/acme/.fix.tmp");
    assert_eq!(run(), "");
    assert_eq!(
        fs::read_to_string(&prompt).ok().as_deref(),
        Some("Fix the flaky test.\n")
    );
    assert!(!kept.exists());
    // The waiting prompt is edited by its owner; the same drop again.
    fs::write(&prompt, "the waiting one\n").expect("edit the waiting prompt");
    let said = run();
    assert!(said.contains("acme/fix is still waiting"), "{said}");
    assert_eq!(
        fs::read_to_string(&prompt).ok().as_deref(),
        Some("the waiting one\n")
    );
    assert_eq!(
        fs::read_to_string(&kept).ok().as_deref(),
        Some("Fix the flaky test.\n")
    );
}
