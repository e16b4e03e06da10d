//! What each job costs the machine in system calls: the running daemon
//! and its monitors traced with `strace -f` while 300 trivial jobs run, 8
//! at once. The job's processes are taken off and counted apart: the
//! process a job's record names (the sandbox's init; unsandboxed, the
//! program's) from the clone that made it, and every process it starts.
//! What they do before the job's program runs (the sandbox's mounts, the
//! init, a child's set-up before `execve`) is the job's set-up; what the
//! program does is its own. Per job, for the daemon and its monitors:
//! system calls, fsync-family calls, files created (distinct paths an
//! `O_CREAT` open made: a temporary file renamed into place counts),
//! names linked (a hard link: a second name for a file that exists, no
//! file made), folders created, and files freed (unlinked, removed, or
//! replaced by a rename). The daemon is stopped within the trace, so that
//! what it defers to its tick is counted. With `JOBWARDEN_BENCH_TRACE`
//! set to a path, the trace is kept there to study (its first line: the
//! daemon's pid, then the monitors' that were traced from the start).

#![allow(clippy::disallowed_methods)] // scratch files of the harness

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use super::{config, must_hold, which};
use crate::report::Figure;
use crate::rig::{Rig, wait_for};

const S: &str = "syscalls";
/// Trivial jobs traced, and how many run at once.
const JOBS: usize = 300;
const PARALLEL: usize = 8;

/// The system calls that make data durable.
const FSYNC_FAMILY: &[&str] = &["fsync", "fdatasync", "syncfs", "sync_file_range", "sync"];

pub fn syscalls() -> anyhow::Result<Vec<Figure>> {
    let Some(strace) = which("strace") else {
        eprintln!(
            "jobwarden-bench: syscalls skipped: `strace` is not on PATH \
             (`apt-get install strace` installs it)"
        );
        return Ok(vec![Figure::info(
            S,
            "skipped: strace not on PATH",
            0.0,
            "skipped",
        )]);
    };
    let truth = which("true").context("true is not on PATH")?;
    let mut rig = Rig::new(&config(PARALLEL, &format!("[{truth:?}]"), ""))?;
    let daemon = rig.start()?;
    // The daemon and the spare monitors it started; monitors started
    // later are its children, followed by `-f`.
    let traced = family(daemon);
    std::fs::write(
        "/tmp/tp/bench-pids",
        traced
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(" "),
    )?;
    let out = rig.base.join("strace.out");
    let mut cmd = Command::new(&strace);
    cmd.args(["-f", "-qq", "-y", "-o"]).arg(&out);
    for pid in &traced {
        cmd.arg("-p").arg(pid.to_string());
    }
    let mut tracer = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting strace")?;
    wait_for(Duration::from_secs(30), "strace to attach", || {
        traced.iter().all(|&p| traced_by_someone(p)).then_some(())
    })?;
    let names: Vec<String> = (0..JOBS).map(|i| format!("sc{i:05}")).collect();
    let staged = names
        .iter()
        .map(|name| rig.stage("sc", name, "x\n"))
        .collect::<Result<Vec<_>, _>>()?;
    for (s, name) in staged.iter().zip(&names) {
        rig.drop_staged(s, "sc", name)?;
    }
    rig.wait_all_settled("sc", &names, Duration::from_secs(900))?;
    // The last ends' ledger rows, which the daemon may write after the
    // prompts are archived, are part of what a job costs.
    let ledger = rusqlite::Connection::open(rig.layout.ledger())?;
    wait_for(Duration::from_secs(60), "every job's ledger row", || {
        let rows: i64 = ledger
            .query_row("SELECT COUNT(*) FROM executions", [], |r| r.get(0))
            .ok()?;
        (rows >= JOBS as i64).then_some(())
    })?;
    // The daemon is told to stop before the trace ends, so that what it
    // owes then (the folder syncs of the last prompts' moves, deferred to
    // its tick) is counted too: the trace ends once `daemon.json` says it
    // stopped, while it and its monitors still live (a tracee that exits
    // while traced is a zombie no one here may reap, and the tracer would
    // wait for it for good).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon as i32),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    let json = rig.layout.daemon_json();
    wait_for(Duration::from_secs(60), "the daemon to stop", || {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).ok()?).ok()?;
        (v["phase"] == "stopped").then_some(())
    })?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(tracer.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )?;
    // A daemon that exits before the tracer has let go of it is a zombie
    // the tracer waits for, and only its parent, this process, may reap
    // it: so it is reaped here, if it exits, while the tracer is waited for.
    wait_for(Duration::from_secs(60), "strace to stop", || {
        rig.reap_if_exited();
        tracer.try_wait().ok().flatten().map(drop)
    })?;
    rig.stop()?;
    let text = std::fs::read_to_string(&out).context("reading strace's output")?;
    if let Some(keep) = std::env::var_os(KEEP_TRACE) {
        keep_trace(&out, Path::new(&keep), &traced)?;
    }
    let count = count(&text, &truth.to_string_lossy());
    let per_job = |n: usize| n as f64 / JOBS as f64;
    Ok(vec![
        Figure::info(S, "jobs traced (8 at once)", JOBS as f64, "count"),
        Figure::at_most(
            S,
            "system calls per job, daemon and monitors",
            per_job(count.calls),
            "calls",
            250.0,
        ),
        Figure::info(
            S,
            "the job's set-up per job (sandbox, init)",
            per_job(count.setup),
            "calls",
        ),
        Figure::at_most(
            S,
            "fsync-family calls per job",
            per_job(count.fsyncs),
            "calls",
            3.0,
        ),
        Figure::at_most(
            S,
            "files created per job",
            per_job(count.created),
            "files",
            5.0,
        ),
        Figure::info(
            S,
            "names linked per job (no file made)",
            per_job(count.linked),
            "names",
        ),
        Figure::info(
            S,
            "folders created per job",
            per_job(count.folders),
            "folders",
        ),
        Figure::info(S, "files freed per job", per_job(count.freed), "files"),
        Figure::info(
            S,
            "the job's program's own calls per job",
            per_job(count.jobs_own),
            "calls",
        ),
        must_hold(S, "every job's program was seen", count.jobs == JOBS),
    ])
}

/// Where the trace is kept, if set.
const KEEP_TRACE: &str = "JOBWARDEN_BENCH_TRACE";

/// Copy the trace `out` to `keep`, after a line of the `traced` pids.
fn keep_trace(out: &Path, keep: &Path, traced: &[u32]) -> anyhow::Result<()> {
    let pids: Vec<String> = traced.iter().map(u32::to_string).collect();
    let mut text = format!("{}\n", pids.join(" ")).into_bytes();
    text.extend(std::fs::read(out)?);
    std::fs::write(keep, text).with_context(|| format!("keeping the trace at {}", keep.display()))
}

/// `pid` and every live process below it.
fn family(pid: u32) -> Vec<u32> {
    let below = jobwarden_sys::procfs::descendants(pid as i32);
    std::iter::once(pid)
        .chain(below.into_iter().map(|p| p as u32))
        .collect()
}

/// Is `pid` being traced (by the strace started for it)?
fn traced_by_someone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .is_some_and(|v| v.trim() != "0")
    })
}

/// What a trace says, the job's own processes taken off.
#[derive(Debug, Default, PartialEq)]
struct Count {
    calls: usize,
    fsyncs: usize,
    created: usize,
    linked: usize,
    folders: usize,
    freed: usize,
    /// Processes that executed the job's program.
    jobs: usize,
    jobs_own: usize,
    /// The job's processes' calls before its program: the sandbox's
    /// set-up and init, a child's set-up before `exec`.
    setup: usize,
}

/// A file call waiting for its result (`<unfinished ...>`).
struct Pending {
    name: String,
    args: String,
}

/// What a process of the trace is: a job's, by what it executes.
#[derive(Clone, Copy, PartialEq)]
enum JobSide {
    /// It executes the job's program: the job's own from that call on,
    /// its set-up before.
    Program,
    /// It executes the sandbox's init: the job's set-up, all of it.
    Init,
}

/// The processes of the trace that are a job's: those that execute its
/// `program` or the sandbox's init (a job's pid is its init's).
fn job_sides<'a>(text: &'a str, program: &str) -> HashMap<&'a str, JobSide> {
    let exec = format!("execve(\"{program}\"");
    let mut sides = HashMap::new();
    for line in text.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let side = if rest.starts_with(&exec) {
            JobSide::Program
        } else if rest.starts_with("execve") && rest.contains(INIT_ARG) {
            JobSide::Init
        } else {
            continue;
        };
        sides.entry(pid).or_insert(side);
    }
    sides
}

/// The argument that makes a program the sandbox's init.
const INIT_ARG: &str = "\"__sandbox-init\"";

/// Count `strace -f -y` output. The job's processes are taken off: the
/// process a job's record names (the sandbox's init, or the program
/// itself unsandboxed) from the clone that made it, and what it starts.
/// A process that executes `program` is the job's own from that call on,
/// its set-up before it; the init and what it does are the set-up.
fn count(text: &str, program: &str) -> Count {
    let mut c = Count::default();
    let sides = job_sides(text, program);
    let mut executed: HashSet<&str> = HashSet::new();
    let mut pending: HashMap<&str, Pending> = HashMap::new();
    let mut files = Files::default();
    let exec = format!("execve(\"{program}\"");
    for line in text.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        if let Some(resumed) = rest.strip_prefix("<... ") {
            // `<... name resumed>args) = result`: the call was counted when
            // it began; a file call is judged now.
            if let Some(p) = pending.remove(pid) {
                let tail = resumed.split_once("resumed>").map_or("", |(_, t)| t);
                files.judge(&p.name, &format!("{}{tail}", p.args));
            }
            continue;
        }
        let Some(open) = rest.find('(') else { continue };
        let name = &rest[..open];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            continue; // `+++ exited`, `--- SIGCHLD`
        }
        match sides.get(pid) {
            Some(JobSide::Program) => {
                if rest.starts_with(&exec) && executed.insert(pid) {
                    c.jobs += 1;
                }
                match executed.contains(pid) {
                    true => c.jobs_own += 1,
                    false => c.setup += 1,
                }
                continue;
            }
            Some(JobSide::Init) => {
                c.setup += 1;
                continue;
            }
            None => {}
        }
        c.calls += 1;
        if FSYNC_FAMILY.contains(&name) {
            c.fsyncs += 1;
        }
        if Files::tracks(name) {
            match rest.strip_suffix("<unfinished ...>") {
                Some(args) => {
                    pending.insert(
                        pid,
                        Pending {
                            name: name.to_owned(),
                            args: args[open + 1..].to_owned(),
                        },
                    );
                }
                None => files.judge(name, &rest[open + 1..]),
            }
        }
    }
    c.created = files.created.len();
    c.linked = files.linked.len();
    c.folders = files.folders.len();
    c.freed = files.freed;
    c
}

/// Files made and freed, as the calls that name them say.
#[derive(Default)]
struct Files {
    /// Distinct paths an `O_CREAT` open made.
    created: HashSet<String>,
    /// Distinct paths a hard link made.
    linked: HashSet<String>,
    /// Distinct paths a `mkdir` made.
    folders: HashSet<String>,
    /// Paths known to hold a file now (made, or renamed to).
    present: HashSet<String>,
    freed: usize,
}

impl Files {
    fn tracks(name: &str) -> bool {
        matches!(
            name,
            "open"
                | "openat"
                | "openat2"
                | "creat"
                | "link"
                | "linkat"
                | "mkdir"
                | "mkdirat"
                | "unlink"
                | "unlinkat"
                | "rmdir"
                | "rename"
                | "renameat"
                | "renameat2"
        )
    }

    /// One call: `args` is what follows its `(`, through its result.
    fn judge(&mut self, name: &str, args: &str) {
        // `…) = 0`, or `…)     = 0` when resumed.
        let Some((call, result)) = args.rsplit_once(" = ") else {
            return;
        };
        let Some(call) = call.trim_end().strip_suffix(')') else {
            return;
        };
        if result.starts_with('-') || result.starts_with('?') {
            return; // failed, or never returned
        }
        let paths = paths(call);
        match name {
            "open" | "openat" | "openat2" | "creat" => {
                let makes = name == "creat" || call.contains("O_CREAT");
                if let Some(p) = paths.first().filter(|_| makes) {
                    self.created.insert(p.clone());
                    self.present.insert(p.clone());
                }
            }
            "link" | "linkat" => {
                if let [_, to, ..] = paths.as_slice() {
                    self.linked.insert(to.clone());
                    self.present.insert(to.clone());
                }
            }
            "mkdir" | "mkdirat" => {
                if let Some(p) = paths.first() {
                    self.folders.insert(p.clone());
                }
            }
            "unlink" | "unlinkat" | "rmdir" => {
                if let Some(p) = paths.first() {
                    self.present.remove(p);
                }
                self.freed += 1;
            }
            _ => {
                if let [from, to, ..] = paths.as_slice() {
                    self.present.remove(from);
                    if !self.present.insert(to.clone()) {
                        self.freed += 1; // the file it replaced
                    }
                }
            }
        }
    }
}

/// The paths a call names: each quoted string, joined to the folder of
/// the descriptor before it (`5</root/runs>, "x"`) when it is relative.
fn paths(call: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut dir: Option<&str> = None;
    let mut rest = call;
    loop {
        let quote = rest.find('"');
        let angle = rest.find('<');
        match (quote, angle) {
            (Some(q), a) if a.is_none_or(|a| q < a) => {
                let after = &rest[q + 1..];
                let end = closing_quote(after);
                let name = &after[..end];
                let path = match dir.take() {
                    Some(d) if !name.starts_with('/') => {
                        Path::new(d).join(name).to_string_lossy().into_owned()
                    }
                    _ => name.to_owned(),
                };
                out.push(path);
                rest = after.get(end + 1..).unwrap_or("");
            }
            (_, Some(a)) => {
                let after = &rest[a + 1..];
                let end = after.find('>').unwrap_or(after.len());
                dir = Some(&after[..end]);
                rest = after.get(end + 1..).unwrap_or("");
            }
            _ => return out,
        }
    }
}

/// Where a quoted string that starts at `s` ends (its closing quote).
fn closing_quote(s: &str) -> usize {
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'\\' if !escaped => escaped = true,
            b'"' if !escaped => return i,
            _ => escaped = false,
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = r#"100 openat(AT_FDCWD</r>, "runs/j1/job.json.tmp", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 7</r/runs/j1/job.json.tmp>
100 fsync(7</r/runs/j1/job.json.tmp>) = 0
100 rename("/r/runs/j1/job.json.tmp", "/r/runs/j1/job.json") = 0
100 openat(5</r/runs/j1>, "job.json.tmp", O_WRONLY|O_CREAT|O_EXCL, 0600 <unfinished ...>
101 clone3({flags=CLONE_VM|CLONE_VFORK, exit_signal=SIGCHLD, stack=0x7f, stack_size=0x10000}, 88 <unfinished ...>
100 <... openat resumed>)      = 8</r/runs/j1/job.json.tmp>
102 execve("/usr/bin/true", ["/usr/bin/true"], 0x55 /* 3 vars */ <unfinished ...>
101 <... clone3 resumed>) = 102
102 <... execve resumed>) = 0
102 brk(NULL) = 0x5555
102 exit_group(0) = ?
102 +++ exited with 0 +++
100 renameat2(5</r/runs/j1>, "job.json.tmp", 5</r/runs/j1>, "job.json", 0) = 0
100 mkdir("/r/runs/j2", 0700) = -1 EEXIST (File exists)
100 unlinkat(AT_FDCWD</r>, "inbox/a.tmp", 0) = 0
100 linkat(6</r/inbox/p>, "a.running.md", 5</r/runs/j1>, "prompt.md", 0) = 0
100 --- SIGCHLD {si_signo=SIGCHLD} ---
103 mount("none", "/", NULL, MS_REC|MS_PRIVATE, NULL) = 0
103 execveat(5</usr/lib/jobwarden-init>, "", ["jobwarden-init", "__sandbox-init", "3", "4", "/usr/bin/true"], 0x1 /* 2 vars */, AT_EMPTY_PATH) = 0
103 rt_sigprocmask(SIG_SETMASK, ~[], NULL, 8) = 0
104 setpgid(0, 0) = 0
104 execve("/usr/bin/true", ["/usr/bin/true"], 0x55 /* 3 vars */) = 0
104 exit_group(0) = ?
103 wait4(-1, [{WIFEXITED(s) && WEXITSTATUS(s) == 0}], 0, NULL) = 2
"#;

    #[test]
    fn a_trace_is_counted_with_the_jobs_processes_taken_off() {
        let c = count(TRACE, "/usr/bin/true");
        assert_eq!(
            c,
            Count {
                // openat, fsync, rename, openat, clone3, renameat2, mkdir,
                // unlinkat, linkat
                calls: 9,
                fsyncs: 1,
                // the temporary file, made twice under one name
                created: 1,
                // prompt.md
                linked: 1,
                // mkdir failed
                folders: 0,
                // job.json replaced once, a temporary file unlinked
                freed: 2,
                jobs: 2,
                jobs_own: 5,
                // the init's four calls, its child's one before `execve`
                setup: 5,
            }
        );
    }

    #[test]
    fn paths_are_joined_to_their_descriptors_folder() {
        assert_eq!(
            paths(r#"5</r/runs/j1>, "job.json.tmp", 6</r/archive>, "/abs", 0"#),
            vec!["/r/runs/j1/job.json.tmp".to_owned(), "/abs".to_owned()]
        );
        assert_eq!(
            paths(r#"AT_FDCWD</r>, "a\"b", O_RDONLY"#),
            vec![r#"/r/a\"b"#]
        );
    }
}
