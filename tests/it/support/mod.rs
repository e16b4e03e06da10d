//! Test support for the integration suite: a throwaway root per test
//! ([`Sandbox`]), a handle on a real `jobwarden daemon` process ([`Daemon`]),
//! condition waits with deadlines ([`wait_until`], [`assert_never`]), a config
//! builder with fast timings ([`ConfigToml`]) and tiny job scripts.
//!
//! Every test owns its `Sandbox`; nothing here is shared between tests, so the
//! suite runs on cargo's test threads in parallel. The binary under test is the
//! real one (`CARGO_BIN_EXE_jobwarden`); nothing calls into the library.
//!
//! Cleanup: dropping a `Daemon` SIGKILLs it if it still runs; dropping the
//! `Sandbox` kills every process whose command line or environment mentions the
//! sandbox directory (detached monitors, jobs, grandchildren), so a failing test
//! leaks nothing. When a test panics, both dump what they know (daemon stderr,
//! job records, events, log tails) to the test's output. Set `JW_IT_KEEP=1` to
//! keep the sandbox directory of a failing test.

#![allow(dead_code)] // not every test module uses every helper

pub mod cgroup;
pub mod slurm;
pub mod system;

use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_jobwarden");

/// States a job never leaves (DESIGN §3): the tail of [`STATES`].
pub const TERMINAL: &[&str] = STATES.split_at(4).1;

/// Every state a job.json may show (DESIGN §3), the terminal ones last.
pub const STATES: &[&str] = &[
    "queued",
    "preparing",
    "running",
    "publishing",
    "succeeded",
    "failed",
    "timed_out",
    "aborted",
    "interrupted",
    "rejected",
    "cancelled",
    "setup_failed",
    "merged",
];

/// Poll interval of [`wait_until`].
const POLL: Duration = Duration::from_millis(10);

/// Shorthand for a whole number of seconds.
/// A record a signal ended: its `exit_code` is 128 + the signal's number,
/// as shells report it, beside the signal's name.
pub fn assert_exit_by_signal(record: &Value) {
    let name = record["signal"]
        .as_str()
        .unwrap_or_else(|| panic!("no signal: {record:#}"));
    let signal: nix::sys::signal::Signal = name
        .parse()
        .unwrap_or_else(|e| panic!("signal {name}: {e}"));
    assert_eq!(
        record["exit_code"].as_i64(),
        Some(128 + signal as i64),
        "{record:#}"
    );
}

/// A line for whoever runs the tests, shown even when the test passes
/// (`SKIPPED: …`, `NOT CHECKED: …`): libtest captures only the printing
/// macros, not writes to the stderr handle.
pub fn say(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{text}");
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Shorthand for milliseconds.
pub fn millis(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Polls `cond` about every 10 ms until it returns `Some`, and returns the value.
/// Panics naming `what` when `deadline` passes first.
pub fn wait_until<T>(what: &str, deadline: Duration, cond: impl FnMut() -> Option<T>) -> T {
    wait_until_every(what, deadline, POLL, cond)
}

/// [`wait_until`] with a chosen poll interval (for conditions that are costly
/// to evaluate, such as reading hundreds of job records).
pub fn wait_until_every<T>(
    what: &str,
    deadline: Duration,
    every: Duration,
    cond: impl FnMut() -> Option<T>,
) -> T {
    poll_until(deadline, every, cond)
        .unwrap_or_else(|| panic!("timed out after {deadline:?} waiting for {what}"))
}

/// Polls `cond` every `every` until it returns `Some`; `None` once
/// `deadline` has passed (for callers that report rather than panic).
pub fn poll_until<T>(
    deadline: Duration,
    every: Duration,
    mut cond: impl FnMut() -> Option<T>,
) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(value) = cond() {
            return Some(value);
        }
        if start.elapsed() >= deadline {
            return None;
        }
        sleep(every);
    }
}

/// Asserts that `cond` stays false during the whole `window` (polled every
/// 10 ms). For negative promises ("this is never claimed"), where the window is
/// the time the daemon is given to do the wrong thing.
pub fn assert_never(what: &str, window: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < window {
        assert!(!cond(), "{what} happened (within {window:?})");
        sleep(POLL);
    }
}

/// Quotes a string as a TOML basic string (JSON string escapes are valid TOML).
pub fn q(s: &str) -> String {
    serde_json::to_string(s).expect("quote string")
}

/// Quotes an argv as a TOML array of strings.
pub fn q_argv(argv: &[&str]) -> String {
    let items: Vec<String> = argv.iter().map(|a| q(a)).collect();
    format!("[{}]", items.join(", "))
}

/// Builds a config file for tests: fast global timings, one `default` profile.
/// Values are raw TOML (`"\"1s\""`, `"4"`), so a test can write any value,
/// valid or not.
#[derive(Debug, Clone)]
pub struct ConfigToml {
    globals: Vec<(String, String)>,
    command: Vec<String>,
    profile: Vec<(String, String)>,
    env: Vec<(String, String)>,
    extra: String,
}

impl ConfigToml {
    /// A config whose default profile runs `command` (placeholders allowed).
    pub fn new(command: &[&str]) -> Self {
        let globals = [
            ("max_jobs", "4"),
            ("heartbeat_interval", "\"200ms\""),
            ("rescan_interval", "\"1s\""),
            ("settle", "\"200ms\""),
            ("abort_grace", "\"500ms\""),
        ];
        ConfigToml {
            globals: globals
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            command: command.iter().map(|s| s.to_string()).collect(),
            profile: Vec::new(),
            env: Vec::new(),
            extra: String::new(),
        }
    }

    /// Appends raw TOML after the default profile: other profiles
    /// (which inherit the default's keys, its `env` included, unless they
    /// set them) and `[[route]]` tables.
    pub fn extra(mut self, toml: &str) -> Self {
        self.extra.push_str(toml);
        self.extra.push('\n');
        self
    }

    /// Sets (or replaces) a global key; `raw` is a TOML value.
    pub fn global(mut self, key: &str, raw: &str) -> Self {
        set(&mut self.globals, key, raw);
        self
    }

    /// Sets (or replaces) a key of `[profiles.default]`; `raw` is a TOML value.
    pub fn profile(mut self, key: &str, raw: &str) -> Self {
        set(&mut self.profile, key, raw);
        self
    }

    /// The default profile without its sandbox (`sandbox = false`): for a
    /// test that reads pids its job wrote (in a sandbox they are the job's
    /// own pid namespace's) or that has its job attack the root. Such a
    /// test guards the unsandboxed path; `job_sandbox.rs` guards the
    /// sandbox's.
    pub fn unsandboxed(self) -> Self {
        self.profile("sandbox", "false")
    }

    /// Adds a variable to the default profile's `env` table.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        set(&mut self.env, key, &q(value));
        self
    }

    /// The TOML text. Every job also gets `JW_IT_SANDBOX=<sandbox>` in its
    /// environment so that cleanup can find its processes.
    pub fn render(&self, sandbox: &Path) -> String {
        let mut out = String::new();
        for (k, v) in &self.globals {
            out.push_str(&format!("{k} = {v}\n"));
        }
        out.push_str("\n[profiles.default]\n");
        let argv: Vec<&str> = self.command.iter().map(String::as_str).collect();
        out.push_str(&format!("command = {}\n", q_argv(&argv)));
        for (k, v) in &self.profile {
            out.push_str(&format!("{k} = {v}\n"));
        }
        out.push_str("\n[profiles.default.env]\n");
        out.push_str(&format!(
            "JW_IT_SANDBOX = {}\n",
            q(&sandbox.to_string_lossy())
        ));
        for (k, v) in &self.env {
            out.push_str(&format!("{k} = {v}\n"));
        }
        out.push('\n');
        out.push_str(&self.extra);
        out
    }
}

fn set(list: &mut Vec<(String, String)>, key: &str, raw: &str) {
    match list.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = raw.to_string(),
        None => list.push((key.to_string(), raw.to_string())),
    }
}

/// One job as seen on disk: its id, run directory and a snapshot of job.json.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: String,
    pub dir: PathBuf,
    pub record: Value,
}

impl Job {
    /// The `state` field ("" when missing, which no valid record has).
    pub fn state(&self) -> &str {
        self.record["state"].as_str().unwrap_or("")
    }

    /// A string field, `None` when null or absent.
    pub fn str_field(&self, key: &str) -> Option<&str> {
        self.record[key].as_str()
    }

    /// An integer field, `None` when null or absent.
    pub fn int_field(&self, key: &str) -> Option<i64> {
        self.record[key].as_i64()
    }

    /// True when the state is terminal.
    pub fn is_terminal(&self) -> bool {
        TERMINAL.contains(&self.state())
    }

    /// True when the state is terminal, `archive_path` is set and the
    /// archived file is in place (the record may name the archive a moment
    /// before the rename happens).
    pub fn is_done(&self) -> bool {
        let Some(rel) = self.str_field("archive_path") else {
            return false;
        };
        self.is_terminal() && fs::symlink_metadata(self.root().join(rel)).is_ok()
    }

    /// The root this job lives under (`<root>/runs/<id>`).
    pub fn root(&self) -> PathBuf {
        self.dir
            .parent()
            .and_then(Path::parent)
            .expect("run dir is <root>/runs/<id>")
            .to_path_buf()
    }

    /// The job's `pid`, if it has one.
    pub fn pid(&self) -> Option<i32> {
        self.int_field("pid").map(|p| p as i32)
    }

    /// job.log as text (lossy); "" when it does not exist yet.
    pub fn log(&self) -> String {
        fs::read(self.dir.join("job.log"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Size of job.log in bytes (0 when missing).
    pub fn log_len(&self) -> u64 {
        fs::metadata(self.dir.join("job.log"))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// The complete lines of events.jsonl, parsed. A line that is not a JSON
    /// object fails the test: the daemon is the only writer.
    pub fn events(&self) -> Vec<Value> {
        let text = fs::read_to_string(self.dir.join("events.jsonl")).unwrap_or_default();
        let complete = match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        };
        complete
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: Value = serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("malformed event line in {}: {e}: {l}", self.id));
                assert!(v.is_object(), "event is not an object: {l}");
                v
            })
            .collect()
    }

    /// The `op` of every event, in file order.
    pub fn ops(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| e["op"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// Milliseconds since the epoch of an RFC 3339 field.
    pub fn time_ms(&self, key: &str) -> i64 {
        let s = self
            .str_field(key)
            .unwrap_or_else(|| panic!("job {} has no {key}: {:#}", self.id, self.record));
        parse_rfc3339_ms(s)
    }
}

/// A throwaway directory holding the root, the config, job scripts and the
/// files job scripts write (`out/`). Kills its strays on drop.
pub struct Sandbox {
    dir: Option<tempfile::TempDir>,
    /// The sandbox directory itself (canonical).
    pub base: PathBuf,
    /// The jobwarden root (`--root`).
    pub root: PathBuf,
    /// The config file (`--config`).
    pub config: PathBuf,
}

static SERIAL: AtomicUsize = AtomicUsize::new(0);

impl Sandbox {
    /// A fresh sandbox with an empty root and no config file yet.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("jw-it-")
            .tempdir()
            .expect("create sandbox tempdir");
        let base = dir.path().canonicalize().expect("canonicalize sandbox");
        let root = base.join("root");
        for d in [&root, &base.join("bin"), &base.join("out")] {
            fs::create_dir_all(d).expect("create sandbox dirs");
        }
        let config = base.join("config.toml");
        Sandbox {
            dir: Some(dir),
            base,
            root,
            config,
        }
    }

    /// Writes the config file.
    pub fn write_config(&self, toml: &str) {
        fs::write(&self.config, toml).expect("write config");
    }

    /// Renders and writes a [`ConfigToml`].
    pub fn configure(&self, cfg: &ConfigToml) {
        self.write_config(&cfg.render(&self.base));
    }

    /// SIGKILLs every process of this sandbox: its daemons, monitors, jobs
    /// and their children (as a power cut would stop them).
    pub fn kill_everything(&self) {
        kill_strays(&self.base);
    }

    /// `out/`: where job scripts leave evidence for the test.
    pub fn out(&self) -> PathBuf {
        self.base.join("out")
    }

    /// The lines job scripts appended to `out/ran`, one per start (none
    /// before the first).
    pub fn ran_lines(&self) -> Vec<String> {
        fs::read_to_string(self.out().join("ran"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `<root>/inbox`.
    pub fn inbox(&self) -> PathBuf {
        self.root.join("inbox")
    }

    /// `<root>/runs`.
    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// `<root>/runs/<id>`.
    pub fn run_dir(&self, id: &str) -> PathBuf {
        self.runs().join(id)
    }

    /// The inbox folder of `project` ("" is the top of the inbox).
    pub fn project_dir(&self, project: &str) -> PathBuf {
        if project.is_empty() {
            self.inbox()
        } else {
            self.inbox().join(project)
        }
    }

    /// Writes an executable `/bin/sh` script into `bin/` and returns its path.
    /// Commands run it as `["/bin/sh", path, ...]`, which sidesteps ETXTBSY
    /// races between writing an executable and executing it.
    pub fn script(&self, name: &str, body: &str) -> String {
        let path = self.base.join("bin").join(format!("{name}.sh"));
        let text = format!(
            "#!/bin/sh\nOUT={}\nexport OUT\n{body}\n",
            q(&self.out().to_string_lossy())
        );
        fs::write(&path, text).expect("write job script");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod script");
        path.to_string_lossy().into_owned()
    }

    /// Drops a prompt the way tools should: write `<name>.tmp`, rename it to
    /// `<name>.prompt.md` (creating the project folder first).
    pub fn drop_prompt(&self, project: &str, name: &str, body: impl AsRef<[u8]>) -> PathBuf {
        let dir = self.project_dir(project);
        fs::create_dir_all(&dir).expect("create project dir");
        let tmp = dir.join(format!("{name}.tmp"));
        let dest = dir.join(format!("{name}.prompt.md"));
        fs::write(&tmp, body.as_ref()).expect("write tmp prompt");
        fs::rename(&tmp, &dest).expect("rename prompt into inbox");
        dest
    }

    /// Drops a prompt with a plain `fs::write` of the final name (complete on
    /// close-write).
    pub fn write_prompt(&self, project: &str, name: &str, body: impl AsRef<[u8]>) -> PathBuf {
        let dir = self.project_dir(project);
        fs::create_dir_all(&dir).expect("create project dir");
        let dest = dir.join(format!("{name}.prompt.md"));
        fs::write(&dest, body.as_ref()).expect("write prompt");
        dest
    }

    /// Every `runs/<id>` directory, sorted.
    pub fn job_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = match fs::read_dir(self.runs()) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect(),
            Err(_) => Vec::new(),
        };
        dirs.sort();
        dirs
    }

    /// job.json of `id` as it is on disk, if it exists. A file that exists
    /// but does not parse fails the test: job.json is written atomically,
    /// readers never see a partial file.
    pub fn try_read_view(&self, id: &str) -> Option<Value> {
        let path = self.run_dir(id).join("job.json");
        let bytes = fs::read(&path).ok()?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "job.json of {id} does not parse ({e}); atomic writes promise it always does: {:?}",
                String::from_utf8_lossy(&bytes)
            )
        });
        Some(value)
    }

    /// The record of job `id` as every reader in the project takes it
    /// (docs/on-disk.md, "The journal"): job.json, unless the journal's
    /// last line carrying the record is newer (its `seq` past the view's
    /// `journal_seq`) or job.json is missing, as it is while a young
    /// job's view is owed.
    pub fn try_read_job(&self, id: &str) -> Option<Value> {
        let view = self.try_read_view(id);
        let seen = view
            .as_ref()
            .and_then(|v| v["journal_seq"].as_u64())
            .unwrap_or(0);
        // A job may have put a FIFO there: only a regular file is read.
        let path = self.run_dir(id).join("events.jsonl");
        let regular = fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
        let raw = if regular {
            fs::read_to_string(&path).unwrap_or_default()
        } else {
            String::new()
        };
        let journal = raw
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e.get("record").is_some_and(Value::is_object));
        match journal {
            Some(line) if view.is_none() || line["seq"].as_u64().unwrap_or(0) > seen => {
                let mut record = line["record"].clone();
                record["journal_seq"] = line["seq"].clone();
                Some(record)
            }
            _ => view,
        }
    }

    /// Does job `id`'s `job.json` itself say it ended? (Its journal may
    /// hold the end first: a line fits the room reserved for it on a
    /// full disk, a new view does not.)
    pub fn view_is_terminal(&self, id: &str) -> bool {
        self.try_read_view(id)
            .is_some_and(|v| TERMINAL.contains(&v["state"].as_str().unwrap_or("")))
    }

    /// The record of job `id` ([`Sandbox::try_read_job`]); panics when
    /// there is none.
    pub fn read_job(&self, id: &str) -> Value {
        self.try_read_job(id)
            .unwrap_or_else(|| panic!("no record for job {id}"))
    }

    /// The job `id` as a [`Job`], if its record exists.
    pub fn job(&self, id: &str) -> Option<Job> {
        let record = self.try_read_job(id)?;
        Some(Job {
            id: id.to_string(),
            dir: self.run_dir(id),
            record,
        })
    }

    /// Every job that has a record, sorted by id (UUIDv7: creation order).
    pub fn jobs(&self) -> Vec<Job> {
        self.job_dirs()
            .iter()
            .filter_map(|d| d.file_name().and_then(|n| n.to_str()).map(str::to_string))
            .filter_map(|id| self.job(&id))
            .collect()
    }

    /// The jobs of prompt `name` in `project`, oldest first.
    pub fn jobs_for(&self, project: &str, name: &str) -> Vec<Job> {
        self.jobs()
            .into_iter()
            .filter(|j| j.record["project"] == project && j.record["name"] == name)
            .collect()
    }

    /// Waits for a job of `project`/`name` (not in `exclude`) whose record
    /// satisfies `pred`.
    pub fn wait_job_where(
        &self,
        what: &str,
        project: &str,
        name: &str,
        exclude: &[String],
        deadline: Duration,
        pred: impl Fn(&Job) -> bool,
    ) -> Job {
        wait_until(what, deadline, || {
            self.jobs_for(project, name)
                .into_iter()
                .filter(|j| !exclude.contains(&j.id))
                .find(|j| pred(j))
        })
    }

    /// Waits until a job exists for `project`/`name` and returns it.
    pub fn wait_job(&self, project: &str, name: &str, deadline: Duration) -> Job {
        let what = format!("a job record for prompt {project:?}/{name:?}");
        self.wait_job_where(&what, project, name, &[], deadline, |_| true)
    }

    /// Waits until the job of `project`/`name` is in `state`.
    pub fn wait_state(&self, project: &str, name: &str, state: &str, deadline: Duration) -> Job {
        let what = format!("job of {project:?}/{name:?} to be {state}");
        self.wait_job_where(&what, project, name, &[], deadline, |j| j.state() == state)
    }

    /// Waits until the job of `project`/`name` is terminal with its prompt
    /// archived (`archive_path` set and the file there).
    pub fn wait_done(&self, project: &str, name: &str, deadline: Duration) -> Job {
        self.wait_done_excluding(project, name, &[], deadline)
    }

    /// [`Sandbox::wait_done`] ignoring the jobs in `exclude`.
    pub fn wait_done_excluding(
        &self,
        project: &str,
        name: &str,
        exclude: &[String],
        deadline: Duration,
    ) -> Job {
        let what = format!(
            "job of {project:?}/{name:?} to reach a terminal state with its prompt archived"
        );
        self.wait_job_where(&what, project, name, exclude, deadline, Job::is_done)
    }

    /// Waits until job `id` satisfies `pred`.
    pub fn wait_id(
        &self,
        id: &str,
        what: &str,
        deadline: Duration,
        pred: impl Fn(&Job) -> bool,
    ) -> Job {
        wait_until(what, deadline, || self.job(id).filter(|j| pred(j)))
    }

    /// Every file (not directory) below `dir`, recursively, sorted.
    pub fn files_under(&self, dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        collect_files(dir, &mut out);
        out.sort();
        out
    }

    /// Every file below `inbox/`.
    pub fn inbox_files(&self) -> Vec<PathBuf> {
        self.files_under(&self.inbox())
    }

    /// A `jobwarden --root R --config F <args>` command with an isolated
    /// environment.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_of(Path::new(BIN), args)
    }

    /// [`Sandbox::command`] running another copy of the binary (an upgrade).
    pub fn command_of(&self, bin: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin);
        cmd.arg("--root")
            .arg(&self.root)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("JOBWARDEN_HOME")
            .env_remove("JOBWARDEN_CONFIG")
            .env_remove("RUST_LOG")
            .env("XDG_CONFIG_HOME", self.base.join("xdg-config"))
            .env("XDG_DATA_HOME", self.base.join("xdg-data"))
            .stdin(Stdio::null());
        cmd
    }

    /// Runs a (short) CLI command to completion, with a 20 s deadline.
    pub fn run(&self, args: &[&str]) -> CliOutput {
        let mut cmd = self.command(args);
        run_with_deadline(
            &mut cmd,
            &self.base,
            secs(20),
            &format!("jobwarden {args:?}"),
        )
    }

    /// [`Sandbox::run`] with `env` added to the command's environment.
    pub fn run_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> CliOutput {
        let mut cmd = self.command(args);
        cmd.envs(env.iter().copied());
        run_with_deadline(
            &mut cmd,
            &self.base,
            secs(20),
            &format!("jobwarden {args:?} with {env:?}"),
        )
    }

    /// [`Sandbox::run`] with `input` on the command's stdin.
    pub fn run_with_stdin(&self, args: &[&str], input: &[u8]) -> CliOutput {
        let n = SERIAL.fetch_add(1, Ordering::SeqCst);
        let path = self.base.join(format!("cli-{n}.stdin"));
        fs::write(&path, input).expect("write stdin file");
        let mut cmd = self.command(args);
        cmd.stdin(fs::File::open(&path).expect("open stdin file"));
        run_with_deadline(
            &mut cmd,
            &self.base,
            secs(20),
            &format!("jobwarden {args:?} < {}", path.display()),
        )
    }

    /// Prints job records, events and log tails (failing tests only).
    fn dump(&self) {
        // Never panic here (this runs while a test is failing): records a
        // test corrupted on purpose are shown as raw text.
        for dir in self.job_dirs() {
            let raw = fs::read(dir.join("job.json")).unwrap_or_default();
            if serde_json::from_slice::<Value>(&raw).is_err() {
                eprintln!(
                    "== {} job.json (does not parse): {:?}",
                    dir.display(),
                    String::from_utf8_lossy(&raw)
                );
            }
        }
        let mut jobs: Vec<Job> = self
            .job_dirs()
            .iter()
            .filter_map(|d| {
                let id = d.file_name()?.to_str()?.to_string();
                let record = serde_json::from_slice(&fs::read(d.join("job.json")).ok()?).ok()?;
                Some(Job {
                    id,
                    dir: d.clone(),
                    record,
                })
            })
            .collect();
        // Interesting ones first: anything that did not succeed.
        jobs.sort_by_key(|j| j.state() == "succeeded");
        eprintln!(
            "---- sandbox {} : {} job(s) ----",
            self.base.display(),
            jobs.len()
        );
        for job in jobs.iter().take(8) {
            eprintln!("== job {} job.json:\n{:#}", job.id, job.record);
            let events = fs::read_to_string(job.dir.join("events.jsonl")).unwrap_or_default();
            eprintln!(
                "== job {} events.jsonl (tail):\n{}",
                job.id,
                tail(&events, 25)
            );
            eprintln!(
                "== job {} job.log (tail):\n{}",
                job.id,
                tail(&job.log(), 15)
            );
        }
        eprintln!("== inbox files: {:?}", self.inbox_files());
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking {
            self.dump();
        }
        kill_strays(&self.base);
        let keep = panicking && std::env::var_os("JW_IT_KEEP").is_some();
        if let Some(dir) = self.dir.take().filter(|_| keep) {
            let kept = dir.keep();
            eprintln!("kept sandbox at {}", kept.display());
        }
    }
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => collect_files(&path, out),
            Ok(_) => out.push(path),
            Err(_) => {}
        }
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// SIGKILLs every process (other than this one) whose command line or
/// environment mentions `base`: daemons, monitors, jobs and their children.
fn kill_strays(base: &Path) {
    let needle = base.as_os_str().as_bytes();
    let me = std::process::id() as i32;
    for _ in 0..5 {
        let mut found = false;
        for pid in all_pids() {
            if pid == me {
                continue;
            }
            let mentions = ["cmdline", "environ"].iter().any(|f| {
                fs::read(format!("/proc/{pid}/{f}"))
                    .map(|b| contains(&b, needle))
                    .unwrap_or(false)
            });
            if mentions && pid_alive(pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                found = true;
            }
        }
        if !found {
            break;
        }
        sleep(millis(50));
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Every pid in `/proc`.
pub fn all_pids() -> Vec<i32> {
    fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// `(state, pgrp)` from `/proc/<pid>/stat`, `None` when the process is gone.
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// The session id of `pid` (field 6 of `/proc/<pid>/stat`).
pub fn session_id(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// True when `pid` exists and is not a zombie (a zombie has already died; in a
/// container nobody may reap orphans promptly).
pub fn pid_alive(pid: i32) -> bool {
    matches!(proc_stat(pid), Some((state, _)) if state != 'Z' && state != 'X')
}

/// Live (non-zombie) members of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&pid| matches!(proc_stat(pid), Some((s, g)) if g == pgid && s != 'Z' && s != 'X'))
        .collect()
}

/// Reads a pid a job script wrote to a file (waiting until it is complete).
pub fn wait_pid_file(path: &Path, deadline: Duration) -> i32 {
    wait_until(&format!("pid file {}", path.display()), deadline, || {
        let text = fs::read_to_string(path).ok()?;
        if !text.ends_with('\n') {
            return None;
        }
        text.trim().parse().ok()
    })
}

/// What a finished CLI run printed.
#[derive(Debug)]
pub struct CliOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    /// The exit code; panics when the process died of a signal.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {self:?}"))
    }
}

fn run_with_deadline(
    cmd: &mut Command,
    scratch: &Path,
    deadline: Duration,
    what: &str,
) -> CliOutput {
    let n = SERIAL.fetch_add(1, Ordering::SeqCst);
    let out_path = scratch.join(format!("cli-{n}.stdout"));
    let err_path = scratch.join(format!("cli-{n}.stderr"));
    let out = fs::File::create(&out_path).expect("create stdout file");
    let err = fs::File::create(&err_path).expect("create stderr file");
    let mut child = cmd
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not exit within {deadline:?}; stderr:\n{}",
                fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        sleep(POLL);
    };
    CliOutput {
        status,
        stdout: fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// A running `jobwarden daemon`. SIGKILLed on drop if still running; its
/// stderr (RUST_LOG=debug) goes to a file that is printed when a test fails.
pub struct Daemon {
    child: Child,
    status: Option<ExitStatus>,
    /// The daemon's pid.
    pub pid: i32,
    /// Where its stderr goes.
    pub stderr_path: PathBuf,
}

impl Daemon {
    /// Starts a daemon on the sandbox and waits until it has written
    /// `daemon.json` with its pid (panics with its stderr if it dies first).
    pub fn start(sb: &Sandbox) -> Daemon {
        Self::start_with_env(sb, &[])
    }

    /// [`Daemon::start`] with extra environment variables for the daemon.
    pub fn start_with_env(sb: &Sandbox, env: &[(&str, &str)]) -> Daemon {
        let mut daemon = Self::spawn(sb, env);
        daemon.wait_ready(sb, secs(10));
        daemon
    }

    /// Spawns a daemon without waiting for anything.
    pub fn spawn(sb: &Sandbox, env: &[(&str, &str)]) -> Daemon {
        Self::spawn_of(sb, Path::new(BIN), env)
    }

    /// Starts a daemon from another copy of the binary (an upgrade).
    pub fn start_of(sb: &Sandbox, bin: &Path) -> Daemon {
        let mut daemon = Self::spawn_of(sb, bin, &[]);
        daemon.wait_ready(sb, secs(10));
        daemon
    }

    fn spawn_of(sb: &Sandbox, bin: &Path, env: &[(&str, &str)]) -> Daemon {
        Self::spawn_cmd(sb, bin, env, |_| {})
    }

    /// Spawns a daemon whose command `adjust` may change first (e.g. to
    /// start it in a cgroup).
    pub fn spawn_with(
        sb: &Sandbox,
        env: &[(&str, &str)],
        adjust: impl FnOnce(&mut Command),
    ) -> Daemon {
        Self::spawn_cmd(sb, Path::new(BIN), env, adjust)
    }

    fn spawn_cmd(
        sb: &Sandbox,
        bin: &Path,
        env: &[(&str, &str)],
        adjust: impl FnOnce(&mut Command),
    ) -> Daemon {
        let n = SERIAL.fetch_add(1, Ordering::SeqCst);
        let stderr_path = sb.base.join(format!("daemon-{n}.stderr.log"));
        let err = fs::File::create(&stderr_path).expect("create daemon stderr file");
        Self::spawn_to(sb, bin, env, err.into(), stderr_path, adjust)
    }

    /// Spawns a daemon (RUST_LOG=debug) whose stderr is `stderr` (a pipe
    /// the test holds, say), without waiting for anything. Its
    /// [`Daemon::stderr`] is then empty: the test reads the pipe itself.
    pub fn spawn_with_stderr(sb: &Sandbox, env: &[(&str, &str)], stderr: Stdio) -> Daemon {
        let nowhere = sb.base.join("daemon-stderr-is-a-pipe");
        Self::spawn_to(sb, Path::new(BIN), env, stderr, nowhere, |_| {})
    }

    fn spawn_to(
        sb: &Sandbox,
        bin: &Path,
        env: &[(&str, &str)],
        stderr: Stdio,
        stderr_path: PathBuf,
        adjust: impl FnOnce(&mut Command),
    ) -> Daemon {
        let mut cmd = sb.command_of(bin, &["daemon"]);
        cmd.env("RUST_LOG", "debug")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr);
        adjust(&mut cmd);
        let child = cmd.spawn().expect("spawn jobwarden daemon");
        let pid = child.id() as i32;
        Daemon {
            child,
            status: None,
            pid,
            stderr_path,
        }
    }

    /// Waits until daemon.json names this daemon's pid.
    pub fn wait_ready(&mut self, sb: &Sandbox, deadline: Duration) {
        let path = sb.root.join("daemon.json");
        let pid = self.pid;
        let start = Instant::now();
        loop {
            if let Some(status) = self.try_status() {
                panic!(
                    "daemon exited early with {status}; stderr:\n{}",
                    tail(&self.stderr(), 60)
                );
            }
            let ready = fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .is_some_and(|v| v["pid"].as_i64() == Some(pid as i64) && v["phase"] == "running");
            if ready {
                return;
            }
            assert!(
                start.elapsed() < deadline,
                "daemon (pid {pid}) wrote no daemon.json with its pid and phase \"running\" within {deadline:?}"
            );
            sleep(POLL);
        }
    }

    /// The exit status if the daemon has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait daemon");
        }
        self.status
    }

    /// True while the daemon process runs.
    pub fn is_running(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        kill(Pid::from_raw(self.pid), Signal::SIGTERM).expect("SIGTERM daemon");
    }

    /// Waits for the daemon to exit; panics when it still runs at the deadline.
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let pid = self.pid;
        wait_until(&format!("daemon {pid} to exit"), deadline, || {
            self.try_status()
        })
    }

    /// The daemon's stderr so far.
    pub fn stderr(&self) -> String {
        fs::read(&self.stderr_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "---- daemon {} stderr ({}), tail ----\n{}",
                self.pid,
                self.stderr_path.display(),
                tail(&self.stderr(), 200)
            );
        }
    }
}

/// Milliseconds since the Unix epoch of an RFC 3339 timestamp
/// (`2025-01-02T03:04:05.678Z` or with a `±HH:MM` offset).
pub fn parse_rfc3339_ms(s: &str) -> i64 {
    let bad = || not_rfc3339(s);
    if s.len() < 20 || !s.is_ascii() {
        bad();
    }
    let num = |r: std::ops::Range<usize>| -> i64 { s[r].parse().unwrap_or_else(|_| bad()) };
    let (year, month, day) = (num(0..4), num(5..7), num(8..10));
    let (hour, min, sec) = (num(11..13), num(14..16), num(17..19));
    if &s[4..5] != "-" || &s[7..8] != "-" || !matches!(&s[10..11], "T" | "t" | " ") {
        bad();
    }
    let mut rest = &s[19..];
    let mut ms = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            bad();
        }
        let padded = format!("{:0<3}", &frac[..digits.min(3)]);
        ms = padded.parse().unwrap_or_else(|_| bad());
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            let h: i64 = rest[1..3].parse().unwrap_or_else(|_| bad());
            let m: i64 = rest[4..6].parse().unwrap_or_else(|_| bad());
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (h * 60 + m)
        }
        _ => bad(),
    };
    let days = days_from_civil(year, month, day);
    let secs_total = days * 86_400 + hour * 3600 + min * 60 + sec - offset_min * 60;
    secs_total * 1000 + ms
}

fn not_rfc3339(s: &str) -> ! {
    panic!("not an RFC 3339 timestamp: {s:?}")
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Asserts the events of `job` have `seq` strictly increasing from 1, an `op`
/// and an RFC 3339 `ts` each; returns the ops.
pub fn check_events(job: &Job) -> Vec<String> {
    let events = job.events();
    assert!(!events.is_empty(), "job {} has no events", job.id);
    let mut last = 0;
    for (i, e) in events.iter().enumerate() {
        let seq = e["seq"]
            .as_i64()
            .unwrap_or_else(|| panic!("event without integer seq: {e}"));
        if i == 0 {
            assert_eq!(seq, 1, "first event seq must be 1: {e}");
        } else {
            assert!(
                seq > last,
                "seq not increasing ({last} then {seq}) in job {}",
                job.id
            );
        }
        last = seq;
        assert!(e["op"].is_string(), "event without op: {e}");
        parse_rfc3339_ms(
            e["ts"]
                .as_str()
                .unwrap_or_else(|| panic!("event without ts: {e}")),
        );
    }
    job.ops()
}

/// The ops of the job's journal lines: all `events.jsonl` holds when
/// events are off (docs/on-disk.md, "The journal").
pub const JOURNAL_OPS: &[&str] = &["queued", "monitor_started", "slurm_submitted", "state"];

/// Index of the first event whose op is `op`.
pub fn op_index(ops: &[String], op: &str) -> Option<usize> {
    ops.iter().position(|o| o == op)
}

/// A daemon whose processes (it, or its monitors) stop at a fault-injection
/// pause point (`crates/jobwarden-sys/src/fault.rs`) until released.
pub struct Paused {
    pub daemon: Daemon,
    until: PathBuf,
}

impl Paused {
    /// Start a daemon whose processes wait at `point` until
    /// [`Paused::release`]; `name` names the release file.
    pub fn start(sb: &Sandbox, point: &str, name: &str) -> Paused {
        let until = sb.out().join(name);
        let until_env = until.to_string_lossy().into_owned();
        let daemon = Daemon::start_with_env(
            sb,
            &[
                ("JOBWARDEN_TEST_PAUSE", point),
                ("JOBWARDEN_TEST_PAUSE_UNTIL", &until_env),
            ],
        );
        Paused { daemon, until }
    }

    /// Waits until a process is held at the point.
    pub fn wait_reached(&self, what: &str, deadline: Duration) {
        let mut reached = self.until.clone().into_os_string();
        reached.push(".reached");
        let reached = PathBuf::from(reached);
        wait_until(what, deadline, || reached.exists().then_some(()));
    }

    /// Let every process held at the point, and any that reaches it later, go on.
    pub fn release(&self) {
        fs::write(&self.until, "").expect("release the pause point");
    }
}

/// `daemon.json`'s `startup_check`.
pub fn startup_check(sb: &Sandbox) -> Option<String> {
    let v: serde_json::Value =
        serde_json::from_slice(&fs::read(sb.root.join("daemon.json")).ok()?).ok()?;
    v["startup_check"].as_str().map(str::to_owned)
}

/// Waits until the daemon's start-up check is done (after it, nothing but
/// the loop and the monitors writes the job index).
pub fn wait_check_done(sb: &Sandbox) {
    wait_until("the start-up check to be done", secs(15), || {
        (startup_check(sb).as_deref() == Some("done")).then_some(())
    });
}

/// Waits until job `id`'s events say its prompt was archived. The prompt
/// is moved, and its record says where, before that event is appended, so
/// [`Sandbox::wait_done`] may return first: a test that reads the job's
/// whole history waits for this.
pub fn wait_archived_event(sb: &Sandbox, id: &str) {
    wait_until(&format!("job {id}'s archived event"), secs(10), || {
        sb.job(id)?
            .events()
            .iter()
            .any(|e| e["op"] == "archived")
            .then_some(())
    });
}

/// Waits until no process holds job `id`'s monitor lock (on its run
/// folder): its monitor is done with it (exited, or idle and waiting for
/// another job).
pub fn wait_monitor_released(sb: &Sandbox, id: &str, deadline: Duration) {
    let lock = sb.root.join("runs").join(id);
    wait_until(
        &format!("job {id}'s monitor to let go of it"),
        deadline,
        || {
            jobwarden_sys::procfs::flock_holders(&lock)
                .ok()
                .filter(Vec::is_empty)
                .map(drop)
        },
    );
}

/// The ledger row of job `id` (`history show --json`), waited for: it is
/// written as the job ends.
pub fn wait_row(sb: &Sandbox, id: &str) -> serde_json::Value {
    wait_until(&format!("a ledger row for job {id}"), secs(10), || {
        let out = sb.run(&["history", "show", id, "--json"]);
        (out.code() == 0).then(|| serde_json::from_str(&out.stdout).expect("show --json parses"))
    })
}

/// The text of the artifact of kind `kind` in ledger row `row`.
pub fn artifact_text<'a>(row: &'a serde_json::Value, kind: &str) -> Option<&'a str> {
    row["artifacts"]
        .as_array()?
        .iter()
        .find(|a| a["kind"] == kind)?["content"]["text"]
        .as_str()
}

/// Writes an executable file at `path` (a temporary name renamed in, so
/// that no writer holds it open when it runs: no ETXTBSY).
pub fn install_program(path: &Path, body: &str) {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, body).expect("write program");
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::rename(&tmp, path).expect("install program");
}

/// Runs git in `dir` as the tests' operator would, reading neither the
/// machine's nor the user's config and with an identity of its own;
/// asserts it succeeded and returns its trimmed stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Operator",
            "-c",
            "user.email=op@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_parser_handles_fractions_and_offsets() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), 0);
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), 1500);
        assert_eq!(parse_rfc3339_ms("1970-01-01T01:00:00.000+01:00"), 0);
        assert_eq!(parse_rfc3339_ms("2000-03-01T00:00:00Z"), 951_868_800_000);
        assert_eq!(parse_rfc3339_ms("2024-02-29T12:00:00.123456Z") % 1000, 123);
    }
}
