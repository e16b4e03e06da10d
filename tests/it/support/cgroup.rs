//! A delegated cgroup v2 subtree for one test, laid out the way systemd
//! lays one out with `Delegate=yes` and `DelegateSubgroup=supervisor`: a
//! test cgroup holding no process, and its `supervisor` leaf, where the
//! daemon is started. Jobs' cgroups appear beside `supervisor`. Where no
//! cgroup v2 tree can be written (no cgroup2 mount, not root, read-only),
//! [`TestCgroup::new`] says why, and the test reports itself skipped.

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Daemon, Sandbox, millis, poll_until, secs};

static SERIAL: AtomicUsize = AtomicUsize::new(0);

/// A test's own delegated cgroup (removed, with whatever is left in it, on drop).
pub struct TestCgroup {
    pub base: PathBuf,
}

impl TestCgroup {
    /// Create `<cgroup2 mount>/jw-it-<pid>-<n>/supervisor`, or say why not.
    pub fn new() -> Result<TestCgroup, String> {
        let mount = cgroup2_mount()?;
        let n = SERIAL.fetch_add(1, Ordering::SeqCst);
        let base = mount.join(format!("jw-it-{}-{n}", std::process::id()));
        fs::create_dir(&base)
            .map_err(|e| format!("cannot create a cgroup under {}: {e}", mount.display()))?;
        let cg = TestCgroup { base };
        fs::create_dir(cg.supervisor())
            .map_err(|e| format!("cannot create {}: {e}", cg.supervisor().display()))?;
        Ok(cg)
    }

    /// The leaf the daemon runs in.
    pub fn supervisor(&self) -> PathBuf {
        self.base.join("supervisor")
    }

    /// The cgroup of job `id`.
    pub fn job(&self, id: &str) -> PathBuf {
        self.base.join(format!("job-{id}"))
    }

    /// Is `controller` offered to the jobs' cgroups?
    pub fn has_controller(&self, controller: &str) -> bool {
        fs::read_to_string(self.base.join("cgroup.controllers"))
            .is_ok_and(|t| t.split_whitespace().any(|c| c == controller))
    }

    /// Start a daemon on `sb` inside the `supervisor` leaf.
    pub fn start_daemon(&self, sb: &Sandbox) -> Daemon {
        let procs = fs::OpenOptions::new()
            .write(true)
            .open(self.supervisor().join("cgroup.procs"))
            .expect("open supervisor cgroup.procs");
        let fd = procs.as_raw_fd();
        let mut daemon = Daemon::spawn_with(sb, &[], move |cmd| {
            // SAFETY: one write(2) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::write(fd, b"0\n".as_ptr().cast(), 2) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        });
        drop(procs);
        daemon.wait_ready(sb, secs(10));
        daemon
    }

    /// The cgroup `pid` is in (`0::` of `/proc/<pid>/cgroup`).
    pub fn of(pid: i32) -> Option<String> {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(str::to_owned)
    }
}

/// Where the machine's cgroup v2 tree is mounted (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid host).
pub fn cgroup2_mount() -> Result<PathBuf, String> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    mountinfo
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            (right.split_whitespace().next()? == "cgroup2")
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .ok_or_else(|| "no cgroup2 file system is mounted".to_string())
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        assert!(
            remove_tree(&self.base),
            "the test cgroup {} was not removed within 10 s",
            self.base.display()
        );
    }
}

/// Kill what is left in the cgroup `base` and remove it, deepest first
/// (an emptied cgroup stays busy for a moment after a kill); false if it
/// is still there after 10 s.
pub fn remove_tree(base: &Path) -> bool {
    let _ = fs::write(base.join("cgroup.kill"), "1");
    let mut dirs = Vec::new();
    collect_dirs(base, &mut dirs);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    poll_until(secs(10), millis(50), || {
        dirs.retain(|d| d.exists() && fs::remove_dir(d).is_err());
        dirs.is_empty().then_some(())
    })
    .is_some()
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_dirs(&e.path(), out);
            }
        }
    }
    out.push(dir.to_path_buf());
}
