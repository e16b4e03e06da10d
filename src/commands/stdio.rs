//! The process's own standard descriptors. A process started with fd 0, 1
//! or 2 closed (a careless supervisor, `cmd <&- >&- 2>&-`) would give that
//! number to the first file it opens, and its later log lines (fd 2) or
//! output (fd 1) would land in that file: a `job.json`, `ledger.db`. So the
//! first thing the program does is point each closed one at `/dev/null`.
//!
//! Rust's runtime does the same on Linux before `main` today, but as an
//! undocumented detail of its start-up; here it is a promise of ours, kept
//! whoever calls [`crate::commands::main`].

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{IntoRawFd, RawFd};

/// Point each of fd 0, 1 and 2 that is closed at `/dev/null` (opened for
/// reading and writing, inherited by children like any standard
/// descriptor). An error names the descriptor and the cause.
pub fn open_closed_std_fds() -> io::Result<()> {
    (0..=2).try_for_each(fill_if_closed)
}

/// Open `/dev/null` onto `fd` if `fd` is closed (`F_GETFD` fails with
/// `EBADF`); leave it alone otherwise.
fn fill_if_closed(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFD only reads the descriptor's flags.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1
        || io::Error::last_os_error().raw_os_error() != Some(libc::EBADF)
    {
        return Ok(());
    }
    let null = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| context(fd, "opening /dev/null", e))?;
    place(null, fd).map_err(|e| context(fd, "placing /dev/null", e))
}

/// Make `null` descriptor number `fd`, without close-on-exec.
fn place(null: File, fd: RawFd) -> io::Result<()> {
    let raw = null.into_raw_fd();
    // SAFETY: `raw` is ours (just opened), `fd` is closed; dup2 and fcntl
    // touch no memory. dup2 leaves close-on-exec off on its copy.
    let placed = unsafe {
        if raw == fd {
            libc::fcntl(fd, libc::F_SETFD, 0)
        } else {
            let placed = libc::dup2(raw, fd);
            libc::close(raw);
            placed
        }
    };
    if placed == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn context(fd: RawFd, what: &str, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("standard descriptor {fd} was closed at start, and {what} for it failed: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A descriptor number far above anything the test process opens, so
    /// that no other test thread takes it meanwhile.
    const FAR: RawFd = 700;

    fn target(fd: RawFd) -> String {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    #[test]
    fn a_closed_descriptor_gets_dev_null_without_close_on_exec() {
        assert_eq!(target(FAR), "", "descriptor {FAR} is free");
        fill_if_closed(FAR).expect("fill");
        assert_eq!(target(FAR), "/dev/null");
        // SAFETY: reads flags of, then closes, the descriptor made above.
        let flags = unsafe { libc::fcntl(FAR, libc::F_GETFD) };
        unsafe { libc::close(FAR) };
        assert_eq!(flags & libc::FD_CLOEXEC, 0, "inherited like a standard one");
    }

    #[test]
    fn an_open_descriptor_is_left_alone() {
        let (read, _write) = nix::unistd::pipe().expect("pipe");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&read);
        let before = target(fd);
        fill_if_closed(fd).expect("fill");
        assert_eq!(target(fd), before);
        assert!(before.starts_with("pipe:"), "{before}");
    }
}
