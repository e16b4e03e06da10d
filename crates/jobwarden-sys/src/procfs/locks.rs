//! Who holds an `flock` on a file, read from `/proc/locks` without
//! touching the lock.

use super::is_running;

/// The pid holding an `flock` on `path`, read from `/proc/locks` without
/// touching the lock (taking it to test it, even for an instant, could make
/// its owner's own attempt fail). `Ok(None)`: nobody holds it.
///
/// `/proc/locks` names files by device and inode only: a lock still held on
/// a deleted file whose inode number was reused would be reported too, so
/// this is for files that are never deleted while locked (`daemon.lock`).
/// Of several entries, a live process holding it is preferred.
pub fn flock_holder(path: &std::path::Path) -> std::io::Result<Option<i32>> {
    let holders = flock_holders(path)?;
    Ok(holders
        .iter()
        .copied()
        .find(|&p| is_running(p))
        .or(holders.first().copied()))
}

/// Every pid `/proc/locks` lists as holding an `flock` on `path`'s device
/// and inode.
///
/// On overlayfs (a container's root, a throw-away system's), `stat` of a
/// file may give the device of the layer it lives in while `/proc/locks`
/// names the overlay's own (its folders' device): there either matches.
pub fn flock_holders(path: &std::path::Path) -> std::io::Result<Vec<i32>> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let dev = meta.dev();
    let file = LockedFile {
        dev: hex_dev(dev),
        ino: meta.ino().to_string(),
        overlay_dev: on_overlayfs(path)
            .then(|| path.parent().and_then(|dir| std::fs::metadata(dir).ok()))
            .flatten()
            .map(|dir| hex_dev(dir.dev())),
    };
    // The kernel hands `/proc/locks` out a page per read, walking its list
    // of locks afresh by position each time: a lock released between two
    // reads shifts the rest, and the entry after it is never shown. With
    // many locks on the machine (hundreds of jobs, other daemons) a held
    // lock can so look free. Absent from one reading is read again.
    for _ in 0..LOCKS_READINGS - 1 {
        let holders = parse_flock_holders(&std::fs::read_to_string("/proc/locks")?, &file);
        if !holders.is_empty() {
            return Ok(holders);
        }
    }
    Ok(parse_flock_holders(
        &std::fs::read_to_string("/proc/locks")?,
        &file,
    ))
}

/// A file as `/proc/locks` names it: `MAJ:MIN` (hex) and inode.
struct LockedFile {
    dev: String,
    ino: String,
    /// On overlayfs: the overlay's own device (its folders'), which
    /// `/proc/locks` may name where `stat` of the file gives its layer's.
    overlay_dev: Option<String>,
}

impl LockedFile {
    fn is(&self, named: &str) -> bool {
        let Some((dev, ino)) = named.rsplit_once(':') else {
            return false;
        };
        ino == self.ino && (dev == self.dev || self.overlay_dev.as_deref() == Some(dev))
    }
}

/// A device number as `/proc/locks` writes it: `MAJ:MIN` in hex.
fn hex_dev(dev: u64) -> String {
    format!(
        "{:02x}:{:02x}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    )
}

fn on_overlayfs(path: &std::path::Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::OVERLAYFS_SUPER_MAGIC)
}

/// How often `/proc/locks` is read before a lock is taken for free (see
/// [`flock_holders`]).
const LOCKS_READINGS: usize = 4;

/// In `/proc/locks` text, the pids of the granted FLOCKs on `file`
/// (named `MAJ:MIN:INODE`, device numbers in hex). Waiters (`->`) do not
/// count.
fn parse_flock_holders(locks: &str, file: &LockedFile) -> Vec<i32> {
    locks
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // `1: FLOCK ADVISORY WRITE 1234 00:2c:56789 0 EOF`
            match f.as_slice() {
                [_, "FLOCK", _, _, pid, id, ..] if file.is(id) => pid.parse().ok(),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_holder_of_a_flock_and_not_its_waiters() {
        let locks = "1: POSIX  ADVISORY  WRITE 10 00:2c:99 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4321 00:2c:99 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 77 00:2c:99 0 EOF\n";
        let file = |dev: &str, ino: &str, overlay: Option<&str>| LockedFile {
            dev: dev.into(),
            ino: ino.into(),
            overlay_dev: overlay.map(str::to_owned),
        };
        assert_eq!(
            parse_flock_holders(locks, &file("00:2c", "99", None)),
            vec![4321]
        );
        assert!(parse_flock_holders(locks, &file("00:2c", "98", None)).is_empty());
        // Through overlayfs the file's device is its layer's; the lock
        // names the overlay's.
        assert!(parse_flock_holders(locks, &file("00:2d", "99", None)).is_empty());
        assert_eq!(
            parse_flock_holders(locks, &file("00:2d", "99", Some("00:2c"))),
            vec![4321]
        );
        assert!(parse_flock_holders(locks, &file("00:2d", "9", Some("00:2c"))).is_empty());
        // A lock with the same inode on another file system is not it.
        assert!(parse_flock_holders(locks, &file("00:2d", "99", Some("00:2e"))).is_empty());
    }

    #[test]
    fn sees_a_lock_held_in_this_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.lock");
        assert_eq!(flock_holder(&path).expect("no file"), None);
        let held = crate::fsio::try_lock(dir.path(), &path)
            .expect("lock")
            .expect("free");
        let me = std::process::id() as i32;
        // Other processes' locks on deleted files may share the inode
        // number: only our own entry is certain.
        assert!(flock_holders(&path).expect("read").contains(&me));
        drop(held);
        assert!(!flock_holders(&path).expect("read").contains(&me));
    }
}
