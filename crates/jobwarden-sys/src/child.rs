//! Starting a job's process without copying the monitor, in a sandbox
//! when asked: the clone, the namespaces (`child/enter.rs`) and the
//! sandbox's init (`child/init.rs`). What a job may touch (the policy) is
//! the monitor's; this module only carries it out.
//!
//! A `fork` copies the monitor's page tables and then faults in a private
//! copy of every page either side writes before the child's `exec`: with
//! job after job, most of what a monitor costs the machine. The child is
//! started the way `posix_spawn` starts one instead, with
//! `clone(CLONE_VM | CLONE_VFORK)`: it runs on a stack of its own in the
//! monitor's memory while the monitor's thread waits, and the monitor
//! goes on once the child has called `exec` (or given up).
//!
//! What the child does before `exec` ([`Setup`]) shares the monitor's
//! memory, so it only makes async-signal-safe system calls on what was
//! prepared before the `clone`, and allocates nothing:
//!
//! - every signal handler set to the default (a handler would run on the
//!   monitor's memory), `SIGPIPE` to the default too (Rust ignores it):
//!   the handled ones are asked once per process ([`signals_to_reset`]),
//!   not at every start;
//! - `SIGKILL` when the monitor dies (`PR_SET_PDEATHSIG`), and a check
//!   that it has not died already;
//! - its own process group (pgid = pid);
//! - the job's cgroup and rlimits ([`Confinement`]);
//! - stdin, stdout and stderr; the working folder; no signal blocked;
//! - `execvpe` (a script without `#!` runs under `/bin/sh`, as `execvp`
//!   does).
//!
//! A sandboxed job's child is made with new namespaces and enters its
//! sandbox (`enter.rs`) before its working folder is set; it then runs the
//! sandbox's init (`init.rs`: `jobwarden-init` beside this program, else
//! this program), which runs the job.
//!
//! The monitor blocks every signal around the `clone`, so that none is
//! handled in the child before its handlers are reset. An error of any
//! step is left for the monitor in memory both share, and the child exits.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sched::CloneFlags;
use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous, munmap};
use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, pipe2};

mod enter;
pub mod init;

use enter::Entered;
pub use enter::{Enter, Hole, IdMaps, State, available, enter_for, state, step_name};

/// How long past its CPU time limit a process that handles SIGXCPU may go
/// on before the kernel sends SIGKILL (the hard limit).
pub const CPU_HARD_GRACE_SECS: u64 = 5;

/// The child's own stack, beyond one pointer per argument (a script
/// without `#!` has its argv rebuilt on it). The child makes system calls
/// and nothing else.
const CHILD_STACK: usize = 64 * 1024;

/// What the child applies to itself before it runs the program.
#[derive(Debug, Clone, Copy, Default)]
pub struct Confinement {
    /// RLIMIT_DATA of the process, bytes.
    pub data: Option<u64>,
    /// RLIMIT_CPU, whole seconds (the hard limit [`CPU_HARD_GRACE_SECS`] later).
    pub cpu_secs: Option<u64>,
    /// RLIMIT_NOFILE.
    pub nofile: Option<u64>,
    /// RLIMIT_NPROC.
    pub nproc: Option<u64>,
    /// The job's cgroup's `cgroup.procs`, open for writing.
    pub cgroup_procs: Option<RawFd>,
}

#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

impl Confinement {
    /// `(resource, soft, hard)` of each rlimit to set, computed before the
    /// child starts (it must not allocate).
    fn rlimits(&self) -> [Option<(Resource, u64, u64)>; 4] {
        [
            self.data.map(|m| (libc::RLIMIT_DATA, m, m)),
            self.cpu_secs
                .map(|s| (libc::RLIMIT_CPU, s, s + CPU_HARD_GRACE_SECS)),
            self.nofile.map(|n| (libc::RLIMIT_NOFILE, n, n)),
            self.nproc.map(|n| (libc::RLIMIT_NPROC, n, n)),
        ]
    }
}

/// A process to start.
pub struct Command<'a> {
    /// The program's path, already resolved.
    pub program: &'a Path,
    /// argv, argv[0] included.
    pub argv: &'a [String],
    /// The whole environment.
    pub env: &'a [(String, OsString)],
    pub cwd: &'a Path,
    /// What the process reads on stdin.
    pub stdin: OwnedFd,
    pub confinement: Confinement,
    /// Run in a sandbox: the child enters it, then runs the init.
    pub sandbox: Option<Sandboxed<'a>>,
}

/// A command's sandbox, as the child needs it.
#[derive(Clone, Copy)]
pub struct Sandboxed<'a> {
    pub enter: &'a Enter,
    /// Left open for the init (its arguments name them): the write end of
    /// its report pipe, the read end of the pipe that closes when the
    /// monitor dies.
    pub init_fds: [RawFd; 2],
}

/// A started process: the leader of its own process group, its output
/// on two pipes (their read ends here, non-blocking).
#[derive(Debug)]
pub struct Started {
    pub pid: Pid,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Sandboxed: whether the job's pid namespace got a `/proc` of its own.
    pub proc_mounted: bool,
    /// Sandboxed: the monitor's link to the init (`pid`), which runs the
    /// command.
    pub init: Option<init::InitLink>,
}

/// Why the child gave up before `exec`: the step (one of `STEP_*`) and
/// its errno, written by the child, read by the monitor once the child
/// has left its memory.
#[derive(Default)]
struct Failure {
    step: AtomicI32,
    errno: AtomicI32,
    entered: Entered,
}

const STEP_MONITOR_GONE: i32 = 1;
const STEP_OTHER: i32 = 2;

/// The program a sandboxed child runs: this one, as its init.
const SELF_EXE: &std::ffi::CStr = c"/proc/self/exe";

/// Start `cmd` (see the module docs). An error is what `exec` or the
/// step before it said, as `std::process::Command::spawn` would.
pub fn start(cmd: Command<'_>) -> io::Result<Started> {
    let mut program = c_string(cmd.program.as_os_str())?;
    let mut argv = cmd
        .argv
        .iter()
        .map(|a| c_string(OsStr::new(a)))
        .collect::<io::Result<Vec<_>>>()?;
    let mut init_fd = None;
    if let Some(sb) = &cmd.sandbox {
        // The init's arguments, then the job's program and argv.
        let mut init = init::argv(sb.init_fds);
        init.push(program);
        init.append(&mut argv);
        argv = init;
        program = SELF_EXE.to_owned();
        init_fd = init_program();
    }
    let env = cmd
        .env
        .iter()
        .map(|(k, v)| {
            let mut kv = OsString::from(k);
            kv.push("=");
            kv.push(v);
            c_string(&kv)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let cwd = c_string(cmd.cwd.as_os_str())?;
    let argv_ptrs = null_terminated(&argv);
    let env_ptrs = null_terminated(&env);
    let (out_r, out_w) = pipe2(OFlag::O_CLOEXEC)?;
    let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC)?;
    // The monitor's ends read without blocking; the command's stay as a
    // command expects its output to be.
    for read_end in [&out_r, &err_r] {
        nix::fcntl::fcntl(read_end, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    }
    // The child moves these onto 0, 1 and 2: none may be one of those
    // already, or a move would close another before it is moved.
    let stdio = [
        above_stdio(cmd.stdin)?,
        above_stdio(out_w)?,
        above_stdio(err_w)?,
    ];
    let setup = Setup {
        program: &program,
        argv: argv_ptrs.as_ptr(),
        env: env_ptrs.as_ptr(),
        cwd: &cwd,
        stdio: [
            stdio[0].as_raw_fd(),
            stdio[1].as_raw_fd(),
            stdio[2].as_raw_fd(),
        ],
        monitor: crate::procfs::own_pid(),
        reset_signals: signals_to_reset(),
        init_fd,
        cgroup_procs: cmd.confinement.cgroup_procs,
        rlimits: cmd.confinement.rlimits(),
        sandbox: cmd.sandbox,
    };
    let failure = Failure::default();
    let namespaces = cmd.sandbox.map_or(0, |sb| sb.enter.clone_flags());
    // SAFETY: `Setup::run` only reads what `setup` points to, which lives
    // until after `clone` returns, and writes `failure`'s atomics. See the
    // module docs.
    let pid = unsafe {
        clone_waited(CHILD_STACK + 8 * argv_ptrs.len(), namespaces, &mut || {
            setup.run(&failure)
        })?
    };
    match failure.step.load(Ordering::Acquire) {
        0 => Ok(Started {
            pid,
            stdout: out_r,
            stderr: err_r,
            proc_mounted: failure.entered.proc_mounted.load(Ordering::Acquire),
            init: None,
        }),
        step => {
            // The child has exited: reap it.
            let _ = waitpid(pid, None);
            Err(failed(&failure, step))
        }
    }
}

/// The error of a child that gave up at `step`.
fn failed(failure: &Failure, step: i32) -> io::Error {
    let errno = io::Error::from_raw_os_error(failure.errno.load(Ordering::Acquire));
    match step {
        STEP_MONITOR_GONE => io::Error::other("monitor exited during spawn"),
        STEP_OTHER => errno,
        step => io::Error::new(
            errno.kind(),
            SandboxError {
                step: enter::step_name(step),
                errno,
            },
        ),
    }
}

/// A step of entering the sandbox that failed.
#[derive(Debug)]
pub struct SandboxError {
    pub step: &'static str,
    pub errno: io::Error,
}

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sandbox: {}: {}", self.step, self.errno)
    }
}

impl std::error::Error for SandboxError {}

/// Whether this machine lets a child enter `enter`'s sandbox: a child is
/// made with its namespaces, enters it and exits. `Err` says why not.
pub fn probe(enter: &Enter) -> io::Result<()> {
    let failure = Failure::default();
    // SAFETY: as in `start`: the child only makes system calls on
    // `enter`, prepared before, and writes `failure`'s atomics.
    let made = unsafe {
        clone_waited(CHILD_STACK, enter.clone_flags(), &mut || {
            // In the child of this clone, with its namespaces.
            match enter::enter(enter, &failure.entered) {
                Ok(()) => 0,
                Err(step) => {
                    failure.errno.store(errno(), Ordering::Release);
                    failure.step.store(step, Ordering::Release);
                    1
                }
            }
        })
    };
    let pid = made.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "making its namespaces ({}): {e}; the kernel or its policy refuses them (user.max_*_namespaces, kernel.unprivileged_userns_clone, AppArmor, or a unit's RestrictNamespaces=)",
                enter.namespace_names()
            ),
        )
    })?;
    let _ = waitpid(pid, None);
    match failure.step.load(Ordering::Acquire) {
        0 => Ok(()),
        step => Err(failed(&failure, step)),
    }
}

/// Run `child` in a new process on a stack of `stack_len` bytes of its
/// own, sharing this one's memory, with the namespaces of `namespaces`
/// (`CLONE_NEW*`), every signal blocked around the `clone`; returns once
/// the child has called `exec` or exited (`CLONE_VFORK`).
///
/// # Safety
/// `child` runs in the new process on this process's memory: it may only
/// make async-signal-safe system calls on memory prepared before, and
/// allocate nothing.
unsafe fn clone_waited(
    stack_len: usize,
    namespaces: libc::c_int,
    child: &mut dyn FnMut() -> isize,
) -> io::Result<Pid> {
    let mut stack = ChildStack::take(stack_len)?;
    let flags =
        CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK | CloneFlags::from_bits_retain(namespaces);
    let blocked = block_all_signals()?;
    // SAFETY: the caller's promise; this thread waits while the child
    // runs (`CLONE_VFORK`), and `stack` outlives it.
    let cloned = unsafe {
        nix::sched::clone(
            Box::new(child),
            stack.as_mut_slice(),
            flags,
            Some(libc::SIGCHLD),
        )
    };
    let restored = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&blocked), None);
    stack.keep();
    let pid = cloned?;
    restored?;
    Ok(pid)
}

thread_local! {
    /// The stack of this thread's last child, kept for its next: a
    /// monitor starts job after job on the same thread, and a child has
    /// called `exec` or exited before its stack is taken again.
    static KEPT_STACK: std::cell::Cell<Option<ChildStack>> = const { std::cell::Cell::new(None) };
}

/// The child's stack: pages of its own, mapped and never touched by the
/// monitor, so that only the few the child uses become memory (a zeroed
/// buffer on the heap made all of them the monitor's, for good).
struct ChildStack {
    base: NonNull<libc::c_void>,
    len: NonZeroUsize,
}

impl ChildStack {
    /// The kept stack if it is at least `len` bytes long, else a new one.
    fn take(len: usize) -> io::Result<ChildStack> {
        match KEPT_STACK.take() {
            Some(kept) if kept.len.get() >= len => Ok(kept),
            _ => ChildStack::new(len),
        }
    }

    /// Keep this stack for the thread's next child (the one kept before,
    /// if any, is unmapped).
    fn keep(self) {
        KEPT_STACK.set(Some(self));
    }

    fn new(len: usize) -> io::Result<ChildStack> {
        let len = NonZeroUsize::new(len).unwrap_or(NonZeroUsize::MIN);
        let flags = MapFlags::MAP_PRIVATE | MapFlags::MAP_STACK | MapFlags::MAP_NORESERVE;
        // SAFETY: a new anonymous mapping, aliased by nothing.
        let base = unsafe {
            mmap_anonymous(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                flags,
            )?
        };
        Ok(ChildStack { base, len })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, readable and writable, and
        // zero-filled until written; it lives as long as `self`.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().cast(), self.len.get()) }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which no
        // slice outlives.
        let _ = unsafe { munmap(self.base, self.len.get()) };
    }
}

/// Block every signal on this thread; the mask it had.
fn block_all_signals() -> io::Result<SigSet> {
    let mut old = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    )?;
    Ok(old)
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} holds a NUL byte", s.to_string_lossy()),
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// `fd`, or a copy of it numbered 3 or above (close-on-exec).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    let moved = fcntl(&fd, FcntlArg::F_DUPFD_CLOEXEC(3))?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Everything the child needs, prepared by the monitor.
struct Setup<'a> {
    program: &'a CString,
    argv: *const *const libc::c_char,
    env: *const *const libc::c_char,
    cwd: &'a CString,
    /// Moved onto stdin, stdout, stderr.
    stdio: [RawFd; 3],
    monitor: libc::pid_t,
    /// The highest signal number, asked before (glibc reserves some).
    /// The signals set back to the default ([`signals_to_reset`]).
    reset_signals: &'static [libc::c_int],
    /// The sandbox's init program, executed through this handle
    /// ([`init_program`]) instead of `program` when there is one.
    init_fd: Option<RawFd>,
    cgroup_procs: Option<RawFd>,
    rlimits: [Option<(Resource, u64, u64)>; 4],
    sandbox: Option<Sandboxed<'a>>,
}

impl Setup<'_> {
    /// In the child: set itself up and `exec`; returns (the child's exit
    /// status) only if a step failed, which `failure` then says.
    fn run(&self, failure: &Failure) -> isize {
        // SAFETY: each call is an async-signal-safe system call on
        // memory prepared by the monitor (see the module docs).
        let step = unsafe { self.exec(failure) };
        failure.errno.store(errno(), Ordering::Release);
        failure.step.store(step, Ordering::Release);
        127
    }

    /// The steps before `exec`, then `exec`; the step that failed.
    ///
    /// # Safety
    /// Only in the child of `start`'s `clone`.
    unsafe fn exec(&self, failure: &Failure) -> i32 {
        unsafe {
            for &sig in self.reset_signals {
                libc::signal(sig, libc::SIG_DFL);
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return STEP_OTHER;
            }
            // The monitor may have died before prctl took effect. (In a
            // pid namespace of its own the child has no parent it can
            // name: the init watches a pipe for the monitor instead.)
            if self.sandbox.is_none() && libc::getppid() != self.monitor {
                return STEP_MONITOR_GONE;
            }
            if libc::setpgid(0, 0) != 0 {
                return STEP_OTHER;
            }
            // Entered before the rlimits are lowered: the descriptors it
            // opens must not count against the job's `open_files`.
            if let Some(sb) = &self.sandbox {
                if let Err(step) = enter::enter(sb.enter, &failure.entered) {
                    return step;
                }
                // Left open for the init, in this child's table only.
                for fd in sb.init_fds {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return STEP_OTHER;
                    }
                }
            }
            if !confine(self.cgroup_procs, &self.rlimits) {
                return STEP_OTHER;
            }
            for (target, &fd) in (0..).zip(self.stdio.iter()) {
                if libc::dup2(fd, target) < 0 {
                    return STEP_OTHER;
                }
            }
            if libc::chdir(self.cwd.as_ptr()) != 0 {
                return STEP_OTHER;
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            if let Some(fd) = self.init_fd {
                libc::syscall(
                    libc::SYS_execveat,
                    fd,
                    c"".as_ptr(),
                    self.argv,
                    self.env,
                    libc::AT_EMPTY_PATH,
                );
            }
            libc::execvpe(self.program.as_ptr(), self.argv, self.env);
            STEP_OTHER
        }
    }
}

/// The sandbox's init program: `jobwarden-init` beside this program's
/// executable (a regular file someone may execute), opened once per
/// process and kept open (`O_PATH`), so that a monitor runs the init of
/// its own version even after an upgrade replaced the files, and executed
/// through that handle (`execveat`), which no sandbox's mounts can hide.
/// `None` where there is no such file: this program is run as the init
/// instead (`/proc/self/exe` with [`init::ARG`]), at the cost of loading
/// all of it for each job.
fn init_program() -> Option<RawFd> {
    static INIT: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    INIT.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        let path = exe.parent()?.join("jobwarden-init");
        let flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::open(&path, flags, nix::sys::stat::Mode::empty()).ok()?;
        let st = nix::sys::stat::fstat(&fd).ok()?;
        let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG;
        (regular && st.st_mode & 0o111 != 0).then_some(fd)
    })
    .as_ref()
    .map(AsRawFd::as_raw_fd)
}

/// The signals a child sets back to the default before `exec`: those this
/// process handles, asked of the kernel once, at its first child (std and
/// the runtime install theirs at start; a monitor installs none of its
/// own), and always `SIGPIPE` (Rust ignores it) and `SIGCHLD` (a runtime
/// may handle it later, when it first runs a command of its own). Asking
/// at every start cost 64 `sigaction` calls a job.
fn signals_to_reset() -> &'static [libc::c_int] {
    static SET: std::sync::OnceLock<Vec<libc::c_int>> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        let mut set = vec![libc::SIGPIPE, libc::SIGCHLD];
        for sig in 1..=libc::SIGRTMAX() {
            if set.contains(&sig) || sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            // SAFETY: a query of the disposition into a zeroed struct.
            let handled = unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction != libc::SIG_DFL
                    && old.sa_sigaction != libc::SIG_IGN
            };
            if handled {
                set.push(sig);
            }
        }
        set
    })
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// In the child: join the cgroup, then lower each rlimit (never above the
/// hard limit already in force, which only privilege could raise).
///
/// # Safety
/// Only async-signal-safe system calls, on the caller's memory.
unsafe fn confine(
    cgroup_procs: Option<RawFd>,
    rlimits: &[Option<(Resource, u64, u64)>; 4],
) -> bool {
    if let Some(fd) = cgroup_procs {
        // SAFETY: writes two bytes from a static buffer to an open fd.
        if unsafe { libc::write(fd, b"0\n".as_ptr().cast(), 2) } < 0 {
            return false;
        }
    }
    for &(resource, soft, hard) in rlimits.iter().flatten() {
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit read and write a local struct.
        if unsafe { libc::getrlimit(resource, &mut cur) } != 0 {
            return false;
        }
        let max = hard.min(cur.rlim_max);
        let new = libc::rlimit {
            rlim_cur: soft.min(max),
            rlim_max: max,
        };
        if unsafe { libc::setrlimit(resource, &new) } != 0 {
            return false;
        }
    }
    true
}
