//! The sandbox's init: the first process of a sandboxed job's pid
//! namespace: the small program `jobwarden-init` installed beside
//! `jobwarden` (`src/bin/jobwarden-init.rs`, which starts no runtime), or,
//! where there is none, `jobwarden` itself run with [`ARG`]. Both take
//! the same arguments ([`argv`]) and run [`run_args`].
//!
//! It starts the job's command as its child, in a process group of its
//! own, and then only waits: it reaps every process of the job that is
//! orphaned to it, forwards every signal it is sent to all of the job's
//! processes (`kill(-1)` from a namespace's first process reaches every
//! other process in it, however they regrouped), and when the command
//! exits it tells the monitor how (its wait status, which an init cannot
//! take as its own: the kernel does not let the first process of a pid
//! namespace die of its own signal) and exits. When it exits, or is
//! killed, or its monitor dies (the parent-death signal, and a pipe that
//! closes), the kernel kills every process left in the namespace:
//! `setsid`, double forks and `env -i` included.
//!
//! It reports on a pipe, one [`Report`] of 8 bytes at a time: `Ready` once
//! the command is executing, `ExecFailed` with the errno if it could not
//! be executed, `Exited` with the wait status.

use std::ffi::{CString, OsString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

/// The argument that makes this program the sandbox's init.
pub const ARG: &str = "__sandbox-init";
/// Its `argv[0]`, as `ps` shows it.
const NAME: &str = "jobwarden-init";

/// What the init tells its monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The job's command is executing (its pid in the namespace).
    Ready(i32),
    /// The command could not be executed (errno).
    ExecFailed(i32),
    /// The command ended (its raw wait status).
    Exited(i32),
}

impl Report {
    /// Its 8 bytes on the pipe.
    pub fn encode(self) -> [u8; 8] {
        let (tag, value): (i32, i32) = match self {
            Report::Ready(v) => (1, v),
            Report::ExecFailed(v) => (2, v),
            Report::Exited(v) => (3, v),
        };
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&tag.to_ne_bytes());
        out[4..].copy_from_slice(&value.to_ne_bytes());
        out
    }

    /// The report in 8 bytes, if they are one.
    pub fn decode(bytes: [u8; 8]) -> Option<Report> {
        let tag = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let value = i32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        match tag {
            1 => Some(Report::Ready(value)),
            2 => Some(Report::ExecFailed(value)),
            3 => Some(Report::Exited(value)),
            _ => None,
        }
    }
}

/// The init's arguments before the job's program and argv: its name,
/// [`ARG`], its report pipe's write end, the monitor's-death pipe's read
/// end.
pub fn argv(fds: [RawFd; 2]) -> Vec<CString> {
    [
        NAME.to_owned(),
        ARG.to_owned(),
        fds[0].to_string(),
        fds[1].to_string(),
    ]
    .into_iter()
    .filter_map(|a| CString::new(a).ok())
    .collect()
}

/// Run as the init if this process was started as one; else `None`.
pub fn run_if_asked() -> Option<ExitCode> {
    run_args().map(ExitCode::from)
}

/// Run as the init if this process's arguments ask for one (`argv[1]` is
/// [`ARG`]); returns only an error's exit code (127), or `None` when they
/// do not ask.
pub fn run_args() -> Option<u8> {
    let mut args = std::env::args_os();
    let _ = args.next();
    if args.next().as_deref() != Some(std::ffi::OsStr::new(ARG)) {
        return None;
    }
    let rest: Vec<OsString> = args.collect();
    match init(&rest) {
        Ok(never) => match never {},
        Err(e) => {
            // Its stderr is the job's log; a closed one loses the line.
            let line = format!("{NAME}: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            Some(127)
        }
    }
}

/// The init's work; returns only an error met before the job started.
fn init(args: &[OsString]) -> Result<std::convert::Infallible, String> {
    let [report, death, program, rest @ ..] = args else {
        return Err("usage: <report fd> <death fd> <program> <argv...>".into());
    };
    let fd = |a: &OsString| -> Result<RawFd, String> {
        a.to_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not a descriptor: {}", a.to_string_lossy()))
    };
    let (report, death) = (fd(report)?, fd(death)?);
    // SAFETY: prctl and fcntl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::fcntl(report, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(death, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    if monitor_gone(death) {
        // SAFETY: _exit ends this process.
        unsafe { libc::_exit(1) }
    }
    let c = |s: &OsString| {
        CString::new(s.as_bytes()).map_err(|_| format!("{} holds a NUL byte", s.to_string_lossy()))
    };
    let program = c(program)?;
    let argv: Vec<CString> = rest.iter().map(c).collect::<Result<_, _>>()?;
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    block_all_signals();
    let child = start(&program, &ptrs, report)?;
    supervise(child, report)
}

/// Whether the monitor's end of the death pipe is closed already.
fn monitor_gone(death: RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: death,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd of ours, no wait.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & (libc::POLLHUP | libc::POLLIN | libc::POLLERR) != 0
}

fn block_all_signals() {
    // SAFETY: sigfillset and sigprocmask on a local set.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    }
}

/// Fork the job's command; report `Ready` once it executes, or
/// `ExecFailed` (and exit) if it cannot.
fn start(program: &CString, argv: &[*const libc::c_char], report: RawFd) -> Result<i32, String> {
    let mut exec_pipe = [0; 2];
    // SAFETY: pipe2 fills a local array.
    if unsafe { libc::pipe2(exec_pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    let [exec_r, exec_w] = exec_pipe;
    // SAFETY: this process is single-threaded; the child makes only
    // async-signal-safe calls on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: in the child, see above.
        unsafe { exec_child(program, argv, exec_w) }
    }
    // SAFETY: close and read on our own descriptors, into a local buffer.
    unsafe {
        libc::close(exec_w);
        let mut errno = [0u8; 4];
        let n = loop {
            let n = libc::read(exec_r, errno.as_mut_ptr().cast(), 4);
            if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break n;
            }
        };
        libc::close(exec_r);
        if n == 4 {
            send(report, Report::ExecFailed(i32::from_ne_bytes(errno)));
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            libc::_exit(127);
        }
    }
    send(report, Report::Ready(pid));
    Ok(pid)
}

/// In the forked child: its own process group, no signal blocked, SIGPIPE
/// back to the default (this program's runtime ignores it), no descriptor
/// but 0, 1 and 2 past the `exec`, then the job's command; its errno on
/// `exec_w` if that fails.
///
/// # Safety
/// Only in the child of `start`'s fork.
unsafe fn exec_child(program: &CString, argv: &[*const libc::c_char], exec_w: RawFd) -> ! {
    unsafe {
        libc::setpgid(0, 0);
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        close_others_on_exec(exec_w);
        libc::execvp(program.as_ptr(), argv.as_ptr());
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        libc::write(exec_w, errno.to_ne_bytes().as_ptr().cast(), 4);
        libc::_exit(127)
    }
}

/// Mark every descriptor from 3 on close-on-exec (`exec_w` already is).
///
/// # Safety
/// Async-signal-safe system calls only.
unsafe fn close_others_on_exec(exec_w: RawFd) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range with integer arguments (Linux 5.11); on older
    // kernels each descriptor up to the limit is marked instead.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        let mut lim: libc::rlimit = std::mem::zeroed();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(65536) as i32
        } else {
            1024
        };
        for fd in 3..max {
            if fd != exec_w {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
    }
}

/// Wait for signals: reap on SIGCHLD, and when the command has exited
/// report how and exit; forward every other signal to the whole job.
fn supervise(child: i32, report: RawFd) -> ! {
    // SAFETY: sigfillset, sigwaitinfo, waitpid, kill and _exit on local
    // data; this process is single-threaded.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        loop {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigwaitinfo(&all, &mut info);
            if sig < 0 {
                continue;
            }
            if sig != libc::SIGCHLD {
                libc::kill(-1, sig);
                continue;
            }
            while let Some((pid, status)) = reap() {
                if pid == child {
                    send(report, Report::Exited(status));
                    libc::_exit(exit_code(status));
                }
            }
        }
    }
}

/// One exited child of the init, without waiting.
fn reap() -> Option<(i32, i32)> {
    let mut status = 0;
    // SAFETY: waitpid into a local.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some((pid, status))
}

/// The init's own exit code for the command's `status`, for anyone who
/// reads it rather than the report: the code, or 128 + the signal.
fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    }
}

fn send(report: RawFd, r: Report) {
    let bytes = r.encode();
    // SAFETY: write from a local buffer; 8 bytes on a pipe are written
    // whole or not at all.
    unsafe {
        libc::write(report, bytes.as_ptr().cast(), bytes.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        for r in [
            Report::Ready(2),
            Report::ExecFailed(libc::ENOENT),
            Report::Exited(9 << 8),
        ] {
            assert_eq!(Report::decode(r.encode()), Some(r));
        }
        assert_eq!(Report::decode([0; 8]), None);
    }
}

/// The monitor's side of a sandboxed command's init: its report pipe and
/// the pipe whose closing tells the init that the monitor died.
#[derive(Debug)]
pub struct InitLink {
    report: std::os::fd::OwnedFd,
    /// Held open for as long as the command runs; never written.
    _death: std::os::fd::OwnedFd,
}

/// How long an init may take to say its command is executing.
const READY_LIMIT_MS: i32 = 10_000;

impl InitLink {
    pub fn new(report: std::os::fd::OwnedFd, death: std::os::fd::OwnedFd) -> InitLink {
        InitLink {
            report,
            _death: death,
        }
    }

    /// Wait for the init's first report: `Ok` once the command executes;
    /// else the error of its `exec`, or what became of the init.
    pub fn ready(&self) -> std::io::Result<()> {
        match self.next(READY_LIMIT_MS) {
            Some(Report::Ready(_)) => Ok(()),
            Some(Report::ExecFailed(errno)) => Err(std::io::Error::from_raw_os_error(errno)),
            Some(Report::Exited(_)) | None => Err(std::io::Error::other(
                "the sandbox's init ended before the command started (see the job's log)",
            )),
        }
    }

    /// The command's wait status, once the init has exited, if it said.
    pub fn exited(&self) -> Option<i32> {
        match self.next(0)? {
            Report::Exited(status) => Some(status),
            _ => None,
        }
    }

    /// The next report, waiting at most `limit_ms`.
    fn next(&self, limit_ms: i32) -> Option<Report> {
        use std::os::fd::AsRawFd;
        let fd = self.report.as_raw_fd();
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd of ours; read into a local buffer.
        unsafe {
            let polled = loop {
                let n = libc::poll(&mut pfd, 1, limit_ms);
                if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    break n;
                }
            };
            if polled <= 0 || pfd.revents & libc::POLLIN == 0 {
                return None;
            }
            let mut bytes = [0u8; 8];
            let n = libc::read(fd, bytes.as_mut_ptr().cast(), bytes.len());
            if n != 8 {
                return None;
            }
            Report::decode(bytes)
        }
    }
}
