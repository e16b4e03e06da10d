//! A real systemd, booted for one test as PID 1 of fresh namespaces, with a
//! throw-away root: the host's `/` through an overlay whose writes go to a
//! tmpfs (`tests/it/systemd/ns-init.sh` does the mounts and becomes
//! systemd). The checkout and its built binaries are visible inside at the
//! same paths. Commands run inside through `nsenter`.
//!
//! The instance lives in a cgroup v2 subtree of its own,
//! `<cgroup2 mount>/jw-sys-<pid>-<n>`: `payload` holds the namespace (its
//! cgroup namespace's root, where the inner systemd makes its tree) and
//! `supervisor` the `unshare` process outside it. On drop, on every path
//! (a failed assertion too), the system is powered off, then killed if it
//! lingers, and the cgroups are removed: nothing is left on the host.
//!
//! Where it cannot boot (not root, no cgroup2, no overlayfs, no systemd,
//! no `unshare`), [`System::boot`] says why and the test reports itself
//! skipped; in CI it must boot (`.ci/run` installs systemd).

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::cgroup::{cgroup2_mount, remove_tree};
use super::{millis, poll_until, secs, wait_until};

static SERIAL: AtomicUsize = AtomicUsize::new(0);

const SYSTEMD: &str = "/lib/systemd/systemd";

/// A booted throw-away system.
pub struct System {
    pub name: String,
    /// The instance's work folder on the host (its console log is here).
    pub work: tempfile::TempDir,
    cgroup: PathBuf,
    unshare: Child,
    /// The host's pid of the namespace's PID 1 (systemd).
    pid1: i32,
}

impl System {
    /// Boot one, or say why it cannot be done here.
    pub fn boot() -> Result<System, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("a real systemd needs root".into());
        }
        for tool in [SYSTEMD, "/usr/bin/unshare", "/usr/bin/nsenter"] {
            if !Path::new(tool).exists() {
                return Err(format!("{tool} is not installed"));
            }
        }
        let filesystems = fs::read_to_string("/proc/filesystems").unwrap_or_default();
        if !filesystems.contains("overlay") {
            return Err("the kernel has no overlayfs".into());
        }
        let mount = cgroup2_mount()?;
        sweep_left_by_dead_runs(&mount);
        let n = SERIAL.fetch_add(1, Ordering::SeqCst);
        let name = format!("jw-sys-{}-{n}", std::process::id());
        let cgroup = mount.join(&name);
        fs::create_dir(&cgroup)
            .map_err(|e| format!("cannot create a cgroup under {}: {e}", mount.display()))?;
        let cleanup = Cleanup(cgroup.clone());
        let work = tempfile::Builder::new()
            .prefix(&format!("{name}-"))
            .tempdir()
            .map_err(|e| e.to_string())?;
        for leaf in ["payload", "supervisor"] {
            fs::create_dir(cgroup.join(leaf)).map_err(|e| format!("cgroup {leaf}: {e}"))?;
        }
        fs::create_dir(work.path().join("scratch")).map_err(|e| e.to_string())?;
        fs::write(work.path().join("console.log"), "").map_err(|e| e.to_string())?;
        let init = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/systemd/ns-init.sh");
        let payload = fs::OpenOptions::new()
            .write(true)
            .open(cgroup.join("payload/cgroup.procs"))
            .map_err(|e| format!("cgroup payload: {e}"))?;
        let fd = payload.as_raw_fd();
        let mut cmd = Command::new("/usr/bin/unshare");
        cmd.args([
            "--pid",
            "--fork",
            // Should `unshare` die, the namespace's PID 1 and with it
            // every process of the system dies too.
            "--kill-child=SIGKILL",
            "--mount",
            "--uts",
            "--cgroup",
            "--propagation",
            "private",
            "/bin/bash",
        ])
        .arg(&init)
        .arg(work.path())
        .arg(&name)
        .args(kept_folders())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            fs::File::create(work.path().join("init.log"))
                .map(Stdio::from)
                .map_err(|e| e.to_string())?,
        );
        // SAFETY: one write(2) and one prctl(2) between fork and exec: the
        // namespace's cgroup root is `payload`, and `unshare` (so the
        // whole system, see --kill-child) dies with the test's thread,
        // should the test process be killed before its guard's drop.
        unsafe {
            cmd.pre_exec(move || {
                if libc::write(fd, b"0\n".as_ptr().cast(), 2) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let unshare = cmd.spawn().map_err(|e| format!("unshare: {e}"))?;
        drop(payload);
        let mut sys = System {
            name,
            work,
            cgroup,
            unshare,
            pid1: 0,
        };
        std::mem::forget(cleanup);
        // PID 1 is the process of `payload` whose pid in its own
        // namespace is 1; once it is there, `unshare` leaves `payload` to it.
        let upid = sys.unshare.id();
        let procs = sys.cgroup.join("payload/cgroup.procs");
        let found = poll_until(secs(10), millis(50), || {
            let listed = fs::read_to_string(&procs).ok()?;
            listed
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .find(|&pid| innermost_pid(pid) == Some(1))
        });
        sys.pid1 = found.ok_or_else(|| format!("no PID 1 appeared: {}", sys.init_log()))?;
        fs::write(sys.cgroup.join("supervisor/cgroup.procs"), upid.to_string())
            .map_err(|e| format!("moving unshare to supervisor: {e}"))?;
        let state = poll_until(secs(30), millis(50), || {
            let out = sys.run(&["systemctl", "is-system-running"]);
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            matches!(state.as_str(), "running" | "degraded").then_some(state)
        });
        match state {
            Some(_) => Ok(sys),
            None => Err(format!(
                "the system did not come up in 30 s: {}\n{}",
                sys.init_log(),
                sys.console()
            )),
        }
    }

    /// Run `argv` inside (its mount, pid and uts namespaces), as root.
    pub fn run(&self, argv: &[&str]) -> Output {
        self.command(argv)
            .output()
            .unwrap_or_else(|e| panic!("nsenter {argv:?}: {e}"))
    }

    /// Run a `bash -c` script inside; its output, whatever its status.
    pub fn sh(&self, script: &str) -> Output {
        self.run(&["/bin/bash", "-c", script])
    }

    /// Run a `bash -c` script inside; its stdout, or a panic with both
    /// streams if it fails.
    pub fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "inside {}: {script}\nstatus {}\nstdout:\n{}\nstderr:\n{}",
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `argv` inside, not yet run.
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new("/usr/bin/nsenter");
        cmd.args(["-t", &self.pid1.to_string(), "-m", "-p", "-u", "--"])
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("LANG", "C.UTF-8")
            .args(argv)
            .stdin(Stdio::null());
        cmd
    }

    /// Wait until `script` succeeds inside, or panic with `what`.
    pub fn wait_for(&self, what: &str, timeout: Duration, script: &str) -> String {
        wait_until(what, timeout, || {
            let out = self.sh(script);
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })
    }

    /// The system's console (systemd's own messages).
    pub fn console(&self) -> String {
        fs::read_to_string(self.work.path().join("console.log")).unwrap_or_default()
    }

    fn init_log(&self) -> String {
        fs::read_to_string(self.work.path().join("init.log")).unwrap_or_default()
    }
}

impl Drop for System {
    fn drop(&mut self) {
        if self.pid1 > 0 && std::thread::panicking() {
            // What the system said, for the failed test's report.
            let journal = self.sh("journalctl --no-pager -n 80 -o short-monotonic");
            super::say(&format!(
                "== {}: the last of its journal\n{}",
                self.name,
                String::from_utf8_lossy(&journal.stdout)
            ));
        }
        if self.pid1 > 0 {
            let _ = self
                .command(&["systemctl", "poweroff", "--no-block"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let upid = self.unshare.id();
        let ended = poll_until(secs(10), millis(50), || {
            matches!(self.unshare.try_wait(), Ok(Some(_))).then_some(())
        });
        if ended.is_none() {
            // Killing PID 1 ends every process of the namespace.
            let _ = fs::write(self.cgroup.join("payload/cgroup.kill"), "1");
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(upid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = self.unshare.wait();
        }
        remove_tree(&self.cgroup);
    }
}

/// What a test process killed outright left (its systems died with it,
/// see `--kill-child`): the cgroups and work folders named after a pid
/// that no longer runs. Done once per test process.
fn sweep_left_by_dead_runs(mount: &Path) {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        let dead = |name: &str| {
            let Some(pid) = name
                .strip_prefix("jw-sys-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<i32>().ok())
            else {
                return false;
            };
            pid != std::process::id() as i32 && !Path::new(&format!("/proc/{pid}")).exists()
        };
        for folder in [mount.to_path_buf(), std::env::temp_dir()] {
            let Ok(entries) = fs::read_dir(&folder) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !dead(&name) {
                    continue;
                }
                if folder == mount {
                    let _ = fs::write(entry.path().join("payload/cgroup.kill"), "1");
                    remove_tree(&entry.path());
                } else {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
    });
}

/// Removes a half-made instance's cgroup if booting stops early.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_tree(&self.0);
    }
}

/// The checkout and the tested binary's folder: seen inside at the same
/// paths, read-only, wherever they are (a checkout under /tmp too).
fn kept_folders() -> Vec<PathBuf> {
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut kept = vec![checkout.clone()];
    if let Some(bin_dir) = Path::new(super::BIN).parent()
        && !bin_dir.starts_with(&checkout)
    {
        kept.push(bin_dir.to_path_buf());
    }
    kept
}

/// The pid of `pid` in the innermost pid namespace it is in (`NSpid:`).
fn innermost_pid(pid: i32) -> Option<i32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// A booted system, or `None` after saying why the test is skipped. In
/// CI (`CI=true`, where `.ci/run` installs what it needs) a system that
/// cannot boot fails the test instead.
pub fn boot_or_skip() -> Option<System> {
    match System::boot() {
        Ok(sys) => Some(sys),
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("no real systemd could be booted in CI: {why}")
        }
        Err(why) => {
            super::say(&format!("SKIPPED: no real systemd here: {why}"));
            None
        }
    }
}
