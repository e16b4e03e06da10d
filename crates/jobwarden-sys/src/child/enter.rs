//! Entering a job's sandbox: what the child does in its new namespaces
//! before it executes the sandbox's init (see the monitor's `sandbox.rs` for what the
//! sandbox is and `child.rs` for the child's other steps).
//!
//! The child is created by `clone` with new mount and pid namespaces, and
//! a new user namespace when the monitor is not root (an unprivileged user
//! namespace, as bubblewrap uses one, mapping the user to itself). In it:
//!
//! 1. its own uid and gid mapped to themselves (`setgroups` denied first,
//!    as the kernel asks of an unprivileged map);
//! 2. every mount made private, so that nothing below reaches the rest of
//!    the machine;
//! 3. the root opened and checked to be the folder the monitor saw
//!    (device and inode), each hole (the workdir, `affected`, the inbox)
//!    opened from it one component at a time without following a link,
//!    and bound onto itself;
//! 4. the root bound onto itself with its holes, and that bind made
//!    read-only (keeping the flags the kernel locks in a user namespace),
//!    checked read-only afterwards;
//! 5. a `/proc` of the new pid namespace mounted over `/proc` (if the
//!    kernel refuses, the machine's stays: said, not fatal);
//! 6. as root, `CAP_SYS_ADMIN` dropped from the bounding set, so that the
//!    job cannot unmount or remount what was made read-only.
//!
//! Mounts are made through `/proc/self/fd/<n>` of descriptors opened in
//! the new mount namespace, never through a path a job could swap between
//! a check and a mount. Everything here runs in a child that shares the
//! monitor's memory: system calls only, on data prepared before the
//! `clone`, nothing allocated.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The highest capability number this code names: `CAP_SYS_ADMIN`.
const CAP_SYS_ADMIN: libc::c_int = 21;

/// Steps that can fail, as the monitor reports them (`STEP_*` of
/// `child.rs` count from [`FIRST_STEP`]).
const FIRST_STEP: i32 = 10;
const STEP_ID_MAP: i32 = FIRST_STEP;
const STEP_PRIVATE: i32 = FIRST_STEP + 1;
const STEP_ROOT: i32 = FIRST_STEP + 2;
const STEP_ROOT_MOVED: i32 = FIRST_STEP + 3;
const STEP_HOLE: i32 = FIRST_STEP + 4;
const STEP_BIND_ROOT: i32 = FIRST_STEP + 5;
const STEP_READ_ONLY: i32 = FIRST_STEP + 6;
const STEP_NOT_READ_ONLY: i32 = FIRST_STEP + 7;
const STEP_CAPS: i32 = FIRST_STEP + 8;

/// What a failed step was doing, said plainly.
pub fn step_name(step: i32) -> &'static str {
    match step {
        STEP_ID_MAP => "mapping the user into its user namespace",
        STEP_PRIVATE => "making its mounts private",
        STEP_ROOT => "opening the root",
        STEP_ROOT_MOVED => "checking the root (it is not the folder the monitor opened)",
        STEP_HOLE => {
            "opening or binding a folder the job may write (a symlink or a missing folder?)"
        }
        STEP_BIND_ROOT => "binding the root onto itself",
        STEP_READ_ONLY => "making the root read-only",
        STEP_NOT_READ_ONLY => "checking the root is read-only",
        STEP_CAPS => "dropping CAP_SYS_ADMIN",
        _ => "setting up the sandbox",
    }
}

/// The uid and gid maps of an unprivileged user namespace.
pub struct IdMaps {
    pub uid_map: CString,
    pub gid_map: CString,
}

/// A path below the root that the job may write, one component each.
pub struct Hole {
    /// Null-terminated pointers into `components`.
    ptrs: Vec<*const libc::c_char>,
    _components: Vec<CString>,
    /// The components joined with `/`: opened in one `openat2` where the
    /// kernel has it.
    joined: CString,
    /// A folder (else a regular file).
    pub dir: bool,
    /// The job cannot run without it (its workdir); others are skipped
    /// when they cannot be opened (an inbox a job made a symlink).
    pub required: bool,
}

impl Hole {
    pub fn new(components: Vec<CString>, dir: bool, required: bool) -> Hole {
        let ptrs = components
            .iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let joined = components
            .iter()
            .map(|c| c.as_bytes())
            .collect::<Vec<_>>()
            .join(&b'/');
        Hole {
            ptrs,
            joined: CString::new(joined).unwrap_or_default(),
            _components: components,
            dir,
            required,
        }
    }
}

/// Everything the child needs to enter the sandbox, prepared by the
/// monitor.
pub struct Enter {
    /// `None` as root: no user namespace is made.
    pub id_maps: Option<IdMaps>,
    pub root: CString,
    /// The root's device and inode as the monitor saw them.
    pub root_id: (libc::dev_t, libc::ino_t),
    pub holes: Vec<Hole>,
    /// The root mount's flags that a read-only remount must keep.
    pub keep_flags: libc::c_ulong,
    pub drop_sys_admin: bool,
}

impl Enter {
    /// The namespaces made, named.
    pub fn namespace_names(&self) -> &'static str {
        if self.id_maps.is_some() {
            "user, mount, pid"
        } else {
            "mount, pid"
        }
    }

    /// The namespaces `clone` makes for the child.
    pub fn clone_flags(&self) -> libc::c_int {
        let user = if self.id_maps.is_some() {
            libc::CLONE_NEWUSER
        } else {
            0
        };
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | user
    }
}

/// What the child tells the monitor besides a failure.
#[derive(Default)]
pub struct Entered {
    /// A `/proc` of the job's own pid namespace was mounted.
    pub proc_mounted: AtomicBool,
}

/// In the child: enter the sandbox; the failed step, errno left set.
///
/// # Safety
/// Only in the child of `process::start`'s `clone`, which made the
/// namespaces of [`Enter::clone_flags`].
pub unsafe fn enter(e: &Enter, entered: &Entered) -> Result<(), i32> {
    unsafe {
        if let Some(maps) = &e.id_maps {
            // Kernels before 3.19 have no setgroups file: nothing to deny.
            let _ = write_file(c"/proc/self/setgroups", b"deny");
            if !write_file(c"/proc/self/uid_map", maps.uid_map.as_bytes())
                || !write_file(c"/proc/self/gid_map", maps.gid_map.as_bytes())
            {
                return Err(STEP_ID_MAP);
            }
        }
        let private = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            private,
            std::ptr::null(),
        ) != 0
        {
            return Err(STEP_PRIVATE);
        }
        let root = open_root(e)?;
        for hole in &e.holes {
            if !bind_hole(root, hole) && hole.required {
                libc::close(root);
                return Err(STEP_HOLE);
            }
        }
        let bound = bind_onto_itself(root);
        libc::close(root);
        if !bound {
            return Err(STEP_BIND_ROOT);
        }
        read_only(e)?;
        let proc_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        let proc = libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            proc_flags,
            std::ptr::null(),
        );
        entered.proc_mounted.store(proc == 0, Ordering::Release);
        if e.drop_sys_admin && libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0 {
            return Err(STEP_CAPS);
        }
        Ok(())
    }
}

/// The root, opened in the new mount namespace and checked to be the
/// folder the monitor saw.
unsafe fn open_root(e: &Enter) -> Result<libc::c_int, i32> {
    unsafe {
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        let fd = libc::open(e.root.as_ptr(), flags);
        if fd < 0 {
            return Err(STEP_ROOT);
        }
        if !same_folder(fd, e.root_id) {
            libc::close(fd);
            return Err(STEP_ROOT_MOVED);
        }
        Ok(fd)
    }
}

/// Bind the bind of the root read-only, and check that it is.
unsafe fn read_only(e: &Enter) -> Result<(), i32> {
    unsafe {
        let top = open_root(e)?;
        let mut path = [0u8; FD_PATH_LEN];
        let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | e.keep_flags;
        let target = fd_path(top, &mut path);
        if libc::mount(
            std::ptr::null(),
            target,
            std::ptr::null(),
            flags,
            std::ptr::null(),
        ) != 0
        {
            libc::close(top);
            return Err(STEP_READ_ONLY);
        }
        let mut vfs: libc::statvfs = std::mem::zeroed();
        let checked = libc::fstatvfs(top, &mut vfs) == 0 && vfs.f_flag & libc::ST_RDONLY != 0;
        libc::close(top);
        if !checked {
            return Err(STEP_NOT_READ_ONLY);
        }
        Ok(())
    }
}

/// Open `hole` below `root` without following a link (one `openat2`
/// where the kernel has it, else one component at a time), check its
/// type, and bind it onto itself. False if any step failed.
unsafe fn bind_hole(root: libc::c_int, hole: &Hole) -> bool {
    unsafe {
        let at = match open_hole_at_once(root, hole) {
            Some(fd) => fd,
            None => open_hole_by_components(root, hole),
        };
        if at < 0 {
            return false;
        }
        let mut st: libc::stat = std::mem::zeroed();
        let kind_ok = libc::fstat(at, &mut st) == 0
            && if hole.dir {
                st.st_mode & libc::S_IFMT == libc::S_IFDIR
            } else {
                st.st_mode & libc::S_IFMT == libc::S_IFREG
            };
        let bound = kind_ok && bind_onto_itself(at);
        libc::close(at);
        bound
    }
}

/// `hole` below `root` in one `openat2` that follows no link and stays
/// beneath the root: the descriptor, or -1 when it is not there as asked;
/// `None` when the kernel has no `openat2` (the walk does it then).
unsafe fn open_hole_at_once(root: libc::c_int, hole: &Hole) -> Option<libc::c_int> {
    if hole.joined.is_empty() {
        return Some(-1);
    }
    let mut flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    if hole.dir {
        flags |= libc::O_DIRECTORY;
    }
    // SAFETY: a zeroed `open_how` is valid (no flags, no mode, no resolve).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH;
    // SAFETY: `joined` is NUL-terminated; `how` lives on this stack.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            hole.joined.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd >= 0 {
        return libc::c_int::try_from(fd).ok();
    }
    // SAFETY: reading this thread's errno.
    match unsafe { *libc::__errno_location() } {
        libc::ENOSYS | libc::E2BIG | libc::EPERM => None,
        _ => Some(-1),
    }
}

/// `hole` below `root`, one component at a time without following a
/// link: the descriptor, or -1.
unsafe fn open_hole_by_components(root: libc::c_int, hole: &Hole) -> libc::c_int {
    unsafe {
        let mut at = root;
        let mut i = 0;
        while !(*hole.ptrs.as_ptr().add(i)).is_null() {
            let component = *hole.ptrs.as_ptr().add(i);
            let last = (*hole.ptrs.as_ptr().add(i + 1)).is_null();
            let mut flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            if !last || hole.dir {
                flags |= libc::O_DIRECTORY;
            }
            let next = libc::openat(at, component, flags);
            if at != root {
                libc::close(at);
            }
            if next < 0 {
                return -1;
            }
            at = next;
            i += 1;
        }
        if at == root { -1 } else { at }
    }
}

/// Bind what `fd` names onto itself, with what is mounted below it.
unsafe fn bind_onto_itself(fd: libc::c_int) -> bool {
    let mut path = [0u8; FD_PATH_LEN];
    let path = fd_path(fd, &mut path);
    let flags = libc::MS_BIND | libc::MS_REC;
    // SAFETY: `path` is a NUL-terminated string on the caller's stack.
    unsafe { libc::mount(path, path, std::ptr::null(), flags, std::ptr::null()) == 0 }
}

/// Whether `fd` is the folder `id` names.
unsafe fn same_folder(fd: libc::c_int, id: (libc::dev_t, libc::ino_t)) -> bool {
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_dev, st.st_ino) == id
    }
}

/// Write `bytes` to the file at `path` in one `write`.
unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> bool {
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        usize::try_from(written).is_ok_and(|n| n == bytes.len())
    }
}

/// Room for `/proc/self/fd/` and any descriptor's number, and a NUL.
const FD_PATH_LEN: usize = 32;

/// `/proc/self/fd/<fd>` written into `buf`, NUL-terminated, without
/// allocating.
fn fd_path(fd: libc::c_int, buf: &mut [u8; FD_PATH_LEN]) -> *const libc::c_char {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 12];
    let mut n = fd.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    buf.as_ptr().cast()
}

/// Whether a job's commands run sandboxed, as its `limits` event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// In namespaces of their own.
    On,
    /// The profile says `sandbox = false`.
    Off,
    /// The machine refuses (why).
    Unavailable(String),
}

impl State {
    /// As the `limits` event and `status` name it.
    pub fn name(&self) -> &'static str {
        match self {
            State::On => "namespaces",
            State::Off => "off",
            State::Unavailable(_) => "unavailable",
        }
    }

    /// Why there is no sandbox, where the machine refused one.
    pub fn why_not(&self) -> Option<&str> {
        match self {
            State::Unavailable(why) => Some(why),
            State::On | State::Off => None,
        }
    }
}

/// The sandbox a job with `wanted` gets on this machine under the root `root`.
pub fn state(root: &Path, wanted: bool) -> State {
    if !wanted {
        return State::Off;
    }
    match available(root) {
        Ok(()) => State::On,
        Err(why) => State::Unavailable(why.clone()),
    }
}

/// Whether this machine lets a child enter a sandbox of the root `root`:
/// tried once per process.
pub fn available(root: &Path) -> &'static Result<(), String> {
    static FOUND: OnceLock<Result<(), String>> = OnceLock::new();
    FOUND.get_or_init(|| {
        let enter = enter_for(root, Vec::new()).map_err(|e| e.to_string())?;
        super::probe(&enter).map_err(|e| e.to_string())
    })
}

/// The sandbox of the root at `root` with `holes`, as this process's user.
pub fn enter_for(root: &Path, holes: Vec<Hole>) -> std::io::Result<Enter> {
    let seen = root_seen(root)?;
    let euid = nix::unistd::Uid::from_raw(seen.euid);
    let id_maps = (!euid.is_root()).then(|| {
        let egid = nix::unistd::getegid();
        IdMaps {
            uid_map: CString::new(format!("{euid} {euid} 1\n")).unwrap_or_default(),
            gid_map: CString::new(format!("{egid} {egid} 1\n")).unwrap_or_default(),
        }
    });
    Ok(Enter {
        id_maps,
        root: CString::new(root.as_os_str().as_bytes())?,
        root_id: seen.id,
        holes,
        keep_flags: seen.keep_flags,
        drop_sys_admin: euid.is_root(),
    })
}

/// What a process saw of a root the first time it entered a sandbox of
/// it: every later sandbox checks the root is still that folder, as every
/// open under the root starts from the handle the process opened first
/// (a root replaced under a running process is not followed).
#[derive(Clone)]
struct RootSeen {
    path: std::path::PathBuf,
    id: (libc::dev_t, libc::ino_t),
    keep_flags: libc::c_ulong,
    euid: libc::uid_t,
}

/// [`RootSeen`] of `root`, looked at once per process and root.
fn root_seen(root: &Path) -> std::io::Result<RootSeen> {
    use std::os::unix::fs::MetadataExt;
    static SEEN: std::sync::Mutex<Option<RootSeen>> = std::sync::Mutex::new(None);
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = seen.as_ref().filter(|s| s.path == root) {
        return Ok(known.clone());
    }
    let meta = std::fs::metadata(root)?;
    let vfs = nix::sys::statvfs::statvfs(root)?;
    let found = RootSeen {
        path: root.to_path_buf(),
        id: (meta.dev() as libc::dev_t, meta.ino() as libc::ino_t),
        keep_flags: kept_flags(vfs.flags()),
        euid: nix::unistd::geteuid().as_raw(),
    };
    *seen = Some(found.clone());
    Ok(found)
}

/// The mount flags of the root's mount that a read-only remount of it
/// must keep (in a user namespace the kernel refuses to change them).
fn kept_flags(flags: nix::sys::statvfs::FsFlags) -> libc::c_ulong {
    use nix::sys::statvfs::FsFlags;
    [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
        (FsFlags::ST_NOATIME, libc::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, libc::MS_RELATIME),
    ]
    .into_iter()
    .filter(|(st, _)| flags.contains(*st))
    .fold(0, |all, (_, ms)| all | ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_path_names_the_descriptor() {
        let mut buf = [0u8; FD_PATH_LEN];
        for (fd, want) in [
            (0, "/proc/self/fd/0"),
            (7, "/proc/self/fd/7"),
            (1234567, "/proc/self/fd/1234567"),
        ] {
            let p = fd_path(fd, &mut buf);
            // SAFETY: fd_path wrote a NUL-terminated string into `buf`.
            let got = unsafe { std::ffi::CStr::from_ptr(p) };
            assert_eq!(got.to_str().ok(), Some(want));
        }
    }
}
