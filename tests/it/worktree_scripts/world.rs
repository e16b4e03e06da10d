//! The world the worktree scripts run in: a bare `origin`, the clone jobs
//! work on, and an `upstream` clone standing for other people; the scripts
//! started as a phase is, and what they printed.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::{secs, wait_until};

pub(super) const PREPARE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/worktree-prepare");
pub(super) const PUBLISH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/worktree-publish");

/// The file, in the repository's git dir, that both scripts lock.
pub(super) const LOCK_FILE: &str = "jobwarden-worktree.lock";

pub(super) static SERIAL: AtomicUsize = AtomicUsize::new(0);

/// Temporary folders holding `origin.git` (bare), `upstream` (a clone that
/// stands for other people pushing) and `repo` (the clone jobs work on).
pub(super) struct World {
    pub(super) _dir: tempfile::TempDir,
    pub(super) base: PathBuf,
    pub(super) origin: PathBuf,
    pub(super) repo: PathBuf,
    pub(super) upstream: PathBuf,
}

impl World {
    /// Empty folders only; see [`World::with_origin`] and [`World::without_origin`].
    pub(super) fn empty() -> World {
        let dir = tempfile::Builder::new()
            .prefix("jw-wt-")
            .tempdir()
            .expect("create tempdir");
        let base = dir.path().canonicalize().expect("canonicalize tempdir");
        for d in ["home", "bin", "out"] {
            fs::create_dir(base.join(d)).expect("create test folder");
        }
        World {
            origin: base.join("origin.git"),
            repo: base.join("repo"),
            upstream: base.join("upstream"),
            base,
            _dir: dir,
        }
    }

    /// `repo` is a clone of `origin`, and origin's `main` has since moved one
    /// commit ahead of the clone's `origin/main`, so that a prepare must fetch.
    pub(super) fn with_origin() -> World {
        let w = World::empty();
        w.git(
            &w.base,
            &["init", "--quiet", "--bare", "-b", "main", "origin.git"],
        );
        w.git(&w.base, &["clone", "--quiet", "origin.git", "upstream"]);
        w.seed_commit(&w.upstream, "README", "one\n");
        w.git(&w.upstream, &["push", "--quiet", "origin", "main"]);
        w.git(&w.base, &["clone", "--quiet", "origin.git", "repo"]);
        w.seed_commit(&w.upstream, "README", "one\ntwo\n");
        w.git(&w.upstream, &["push", "--quiet", "origin", "main"]);
        w
    }

    /// `repo` has a `main` with one commit, no remote, and a configured
    /// identity.
    pub(super) fn without_origin() -> World {
        let w = World::empty();
        w.git(&w.base, &["init", "--quiet", "-b", "main", "repo"]);
        w.git(&w.repo, &["config", "user.name", "Operator"]);
        w.git(&w.repo, &["config", "user.email", "operator@example.com"]);
        w.seed_commit(&w.repo, "README", "one\n");
        w
    }

    pub(super) fn seed_commit(&self, dir: &Path, file: &str, text: &str) {
        fs::write(dir.join(file), text).expect("write seed file");
        self.git(dir, &["add", file]);
        let commit = [
            "-c",
            "user.name=Seed",
            "-c",
            "user.email=seed@example.com",
            "commit",
            "--quiet",
            "-m",
            "seed",
        ];
        self.git(dir, &commit);
    }

    /// A command with the clean environment a phase gets: no `GIT_*` or other
    /// variable of the test's own environment leaks in. `bin/` comes first in
    /// `PATH`, for a fake `gh`.
    pub(super) fn command(&self, program: &str, args: &[&str]) -> Command {
        let path = format!(
            "{}:{}",
            self.base.join("bin").display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.base.join("home"))
            .env("LANG", "C")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs git in `dir`, asserts it succeeded, returns its trimmed stdout.
    pub(super) fn git(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.try_git(dir, args);
        assert!(out.ok(), "git {args:?} in {}: {out:?}", dir.display());
        out.stdout.trim().to_string()
    }

    /// Runs git in `dir`, whatever its outcome.
    pub(super) fn try_git(&self, dir: &Path, args: &[&str]) -> Output {
        let mut cmd = self.command("git", args);
        cmd.current_dir(dir);
        Running::spawn(self, cmd, &format!("git {args:?}")).wait()
    }

    /// Starts a script as a phase of job `job` (project `acme/main`, name
    /// `fix-<job>`), with cwd `cwd`.
    pub(super) fn spawn_script(
        &self,
        script: &str,
        args: &[&str],
        job: &str,
        cwd: &Path,
    ) -> Running {
        let phase = if script == PREPARE {
            "prepare"
        } else {
            "publish"
        };
        let mut cmd = self.command(script, args);
        cmd.current_dir(cwd)
            .env("JOBWARDEN_JOB_ID", job)
            .env("JOBWARDEN_PROJECT", "acme/main")
            .env("JOBWARDEN_NAME", format!("fix-{job}"))
            .env("JOBWARDEN_ATTEMPT", "1")
            .env("JOBWARDEN_PHASE", phase)
            .env("JOBWARDEN_WORKDIR", self.worktree(job));
        Running::spawn(self, cmd, &format!("{script} {args:?}"))
    }

    /// Where job `job`'s worktree goes (its parent folders do not exist yet).
    pub(super) fn worktree(&self, job: &str) -> PathBuf {
        self.base.join("worktrees").join("repo").join(job)
    }

    /// Starts `worktree-prepare repo main <worktree of job> jobwarden/<job>`,
    /// from a run folder of its own, as the daemon does.
    pub(super) fn spawn_prepare(&self, job: &str) -> Running {
        let run_dir = self.base.join("runs").join(job);
        fs::create_dir_all(&run_dir).expect("create run folder");
        let wt = self.worktree(job);
        let args = [s(&self.repo), "main", s(&wt), &branch(job)].map(str::to_string);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn_script(PREPARE, &args, job, &run_dir)
    }

    /// Runs [`World::spawn_prepare`] and asserts it succeeded.
    pub(super) fn prepare(&self, job: &str) -> PathBuf {
        let out = self.spawn_prepare(job).wait();
        assert!(out.ok(), "prepare {job}: {out:?}");
        self.worktree(job)
    }

    /// Starts `worktree-publish repo main <worktree of job> jobwarden/<job>`
    /// in the worktree.
    pub(super) fn spawn_publish(&self, job: &str) -> Running {
        let wt = self.worktree(job);
        let args = [s(&self.repo), "main", s(&wt), &branch(job)].map(str::to_string);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn_script(PUBLISH, &args, job, &wt)
    }

    /// [`World::spawn_publish`] with `--merge`.
    pub(super) fn spawn_publish_merge(&self, job: &str) -> Running {
        let wt = self.worktree(job);
        let args = ["--merge", s(&self.repo), "main", s(&wt), &branch(job)].map(str::to_string);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn_script(PUBLISH, &args, job, &wt)
    }

    /// The commit `rev` of the repository at `dir`, or `None`.
    pub(super) fn rev(&self, dir: &Path, rev: &str) -> Option<String> {
        let out = self.try_git(dir, &["rev-parse", "--verify", "--quiet", rev]);
        out.ok().then(|| out.stdout.trim().to_string())
    }

    /// Puts a fake `gh` first in `PATH`: it appends its arguments to
    /// `out/gh.args` and prints a pull request URL as real gh does (chatter on
    /// stderr, the URL on stdout).
    pub(super) fn install_fake_gh(&self) {
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {}\n\
             echo 'Creating pull request into main' >&2\n\
             echo https://github.com/acme/widgets/pull/7\n",
            self.base.join("out/gh.args").display()
        );
        let gh = self.base.join("bin/gh");
        fs::write(&gh, script).expect("write fake gh");
        fs::set_permissions(&gh, fs::Permissions::from_mode(0o755)).expect("chmod fake gh");
    }
}

pub(super) fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 test path")
}

pub(super) fn branch(job: &str) -> String {
    format!("jobwarden/{job}")
}

/// True when `program` is an executable file in one of `PATH`'s folders.
pub(super) fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            fs::metadata(dir.join(program)).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
    })
}

/// A started process whose stdout and stderr go to files.
pub(super) struct Running {
    pub(super) child: Child,
    pub(super) what: String,
    pub(super) stdout: PathBuf,
    pub(super) stderr: PathBuf,
}

impl Running {
    pub(super) fn spawn(w: &World, mut cmd: Command, what: &str) -> Running {
        let n = SERIAL.fetch_add(1, Ordering::SeqCst);
        let stdout = w.base.join(format!("out/{n}.stdout"));
        let stderr = w.base.join(format!("out/{n}.stderr"));
        let child = cmd
            .stdout(fs::File::create(&stdout).expect("create stdout file"))
            .stderr(fs::File::create(&stderr).expect("create stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        Running {
            child,
            what: what.to_string(),
            stdout,
            stderr,
        }
    }

    /// The exit status, once the process has exited.
    pub(super) fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Waits (at most 60 s) for the process to exit and returns what it printed.
    pub(super) fn wait(mut self) -> Output {
        let what = format!("{} to exit", self.what);
        let status = wait_until(&what, secs(60), || self.try_status());
        Output {
            status,
            stdout: fs::read_to_string(&self.stdout).expect("read stdout"),
            stderr: fs::read_to_string(&self.stderr).expect("read stderr"),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[derive(Debug)]
pub(super) struct Output {
    pub(super) status: ExitStatus,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

impl Output {
    pub(super) fn ok(&self) -> bool {
        self.status.success()
    }

    /// The last non-empty stdout line: what jobwarden stores as `result_ref`.
    pub(super) fn result_line(&self) -> &str {
        self.stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_else(|| panic!("no result line on stdout: {self:?}"))
    }

    /// Asserts a refusal: a non-zero exit, `needle` on stderr, nothing on stdout.
    pub(super) fn assert_refused(&self, needle: &str) {
        assert_eq!(self.status.code(), Some(1), "expected a refusal: {self:?}");
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}: {self:?}"
        );
        assert_eq!(self.stdout, "", "a refusal prints nothing on stdout");
    }
}

pub(super) fn is_sha(line: &str) -> bool {
    line.len() == 40 && line.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Writes a file into job `job`'s worktree, as an agent would.
pub(super) fn change(w: &World, job: &str) {
    let path = w.worktree(job).join(format!("{job}.txt"));
    fs::write(path, format!("work of {job}\n")).expect("write change");
}
