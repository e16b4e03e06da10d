//! The root's storage: is it accepting writes? A full disk (or quota) and a
//! read-only filesystem are conditions that waiting can cure, unlike other
//! I/O errors, so the daemon and the monitors treat them apart: nothing is
//! failed or dropped because of them; work waits until writes succeed again
//! (DESIGN §10, `docs/decisions/016-a-full-disk-or-a-read-only-root.md`).
//!
//! [`probe`] asks the filesystem (`statvfs`); [`fault_of`] classifies an
//! error; [`Health`] is the daemon's view, combining both, reported in
//! `daemon.json` and by `jobwarden status`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::IoError;

/// Below this many free bytes the root counts as full: a claim alone
/// writes a few files of a few KiB each.
pub const LOW_SPACE_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    Ok,
    /// No space or no inodes left (or over quota).
    Full,
    ReadOnly,
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Condition::Ok => "ok",
            Condition::Full => "full",
            Condition::ReadOnly => "read_only",
        })
    }
}

/// What the filesystem holding `path` says about itself.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub condition: Condition,
    pub free_bytes: u64,
    pub free_inodes: u64,
}

/// `statvfs` on `path`. Free space counts what this process may use (root
/// may use the reserved blocks).
pub fn probe(path: &Path) -> Result<Probe, IoError> {
    use nix::sys::statvfs::{FsFlags, statvfs};
    let st = statvfs(path).map_err(|e| IoError::new("inspecting filesystem of", path, e.into()))?;
    let blocks = if nix::unistd::geteuid().is_root() {
        st.blocks_free()
    } else {
        st.blocks_available()
    };
    let free_bytes = blocks.saturating_mul(st.fragment_size());
    // Filesystems without inode accounting report zero files in all.
    let free_inodes = if st.files() == 0 {
        u64::MAX
    } else {
        st.files_available()
    };
    let condition = if st.flags().contains(FsFlags::ST_RDONLY) {
        Condition::ReadOnly
    } else if free_bytes < LOW_SPACE_BYTES || free_inodes == 0 {
        Condition::Full
    } else {
        Condition::Ok
    };
    Ok(Probe {
        condition,
        free_bytes,
        free_inodes,
    })
}

/// The condition an I/O error reveals, if it is one of storage refusing
/// writes.
pub fn fault_of(e: &std::io::Error) -> Option<Condition> {
    match e.raw_os_error()? {
        libc::ENOSPC | libc::EDQUOT => Some(Condition::Full),
        libc::EROFS => Some(Condition::ReadOnly),
        _ => None,
    }
}

/// The daemon's view of its storage. Bad as soon as a write fails for lack
/// of space (or a probe says so), good again when a probe says so and no
/// write has failed since the previous one. While bad, the daemon neither
/// claims nor starts jobs: their writes would fail.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Health {
    pub condition: Condition,
    pub since: Timestamp,
    /// What showed the condition (an error, or the probe's figures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    #[serde(skip)]
    failed_since_probe: bool,
}

/// How a call changed [`Health`].
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    None,
    Degraded,
    Recovered,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            condition: Condition::Ok,
            since: Timestamp::now(),
            detail: None,
            free_bytes: None,
            failed_since_probe: false,
        }
    }
}

impl Health {
    pub fn is_ok(&self) -> bool {
        self.condition == Condition::Ok
    }

    /// A write failed with `condition` (never `Ok`).
    pub fn failed(&mut self, condition: Condition, detail: impl Into<String>) -> Change {
        self.failed_since_probe = true;
        self.set(condition, Some(detail.into()))
    }

    /// Probe `root`. A failed probe changes nothing (writes will tell).
    pub fn probe(&mut self, root: &Path) -> Change {
        let Ok(p) = probe(root) else {
            return Change::None;
        };
        self.free_bytes = Some(p.free_bytes);
        let failed = std::mem::take(&mut self.failed_since_probe);
        match p.condition {
            Condition::Ok if failed => Change::None,
            Condition::Ok => self.set(Condition::Ok, None),
            bad => {
                let detail = match bad {
                    Condition::ReadOnly => "the filesystem is mounted read-only".to_owned(),
                    _ => format!(
                        "{} bytes and {} inodes free",
                        p.free_bytes,
                        if p.free_inodes == u64::MAX {
                            "unlimited".to_owned()
                        } else {
                            p.free_inodes.to_string()
                        }
                    ),
                };
                // Keep a write's own error as the explanation if there is one.
                let detail = if self.condition == bad && self.detail.is_some() {
                    self.detail.clone()
                } else {
                    Some(detail)
                };
                self.set(bad, detail)
            }
        }
    }

    fn set(&mut self, condition: Condition, detail: Option<String>) -> Change {
        let change = match (self.is_ok(), condition == Condition::Ok) {
            (true, false) => Change::Degraded,
            (false, true) => Change::Recovered,
            _ => Change::None,
        };
        if self.condition != condition {
            self.since = Timestamp::now();
        }
        self.condition = condition;
        self.detail = detail;
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_are_told_apart_from_others() {
        let err = |code| std::io::Error::from_raw_os_error(code);
        assert_eq!(fault_of(&err(libc::ENOSPC)), Some(Condition::Full));
        assert_eq!(fault_of(&err(libc::EDQUOT)), Some(Condition::Full));
        assert_eq!(fault_of(&err(libc::EROFS)), Some(Condition::ReadOnly));
        assert_eq!(fault_of(&err(libc::EACCES)), None);
        assert_eq!(fault_of(&std::io::Error::other("x")), None);
    }

    #[test]
    fn a_writable_temp_dir_probes_ok() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = probe(dir.path()).expect("statvfs");
        assert_eq!(p.condition, Condition::Ok, "{p:?}");
        assert!(p.free_bytes >= LOW_SPACE_BYTES);
    }

    #[test]
    fn a_failed_write_outlives_one_good_probe() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = Health::default();
        assert_eq!(h.failed(Condition::Full, "ENOSPC"), Change::Degraded);
        assert_eq!(h.failed(Condition::Full, "ENOSPC"), Change::None);
        // The probe right after a failure does not clear it...
        assert_eq!(h.probe(dir.path()), Change::None);
        assert!(!h.is_ok());
        assert_eq!(h.detail.as_deref(), Some("ENOSPC"));
        // ...the next one, with no failure in between, does.
        assert_eq!(h.probe(dir.path()), Change::Recovered);
        assert!(h.is_ok());
        assert_eq!(h.detail, None);
    }

    #[test]
    fn a_missing_path_changes_nothing() {
        let mut h = Health::default();
        assert_eq!(h.probe(Path::new("/nonexistent/jobwarden")), Change::None);
        assert!(h.is_ok());
    }
}
