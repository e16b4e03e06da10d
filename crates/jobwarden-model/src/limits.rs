//! Limits set by hand (`jobwarden limit`): how many jobs run at once, for
//! the whole daemon (in place of the config's `max_jobs`), one profile (in
//! place of its `max_jobs`) or one project (which the config cannot
//! limit). A limit is a marker under `control/` (names in
//! `layout/control.rs`), JSON `{"max_jobs", "set_at", "by"}` (a tool may
//! write the bare number), written atomically and replaced by the next
//! `limit`; removing it (`limit --clear`) gives the config's value back.
//! Like a pause, it needs no running daemon, outlives restarts, and a
//! running daemon follows it at once. It only holds back starts: running
//! jobs go on when a limit is lowered.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::control::{ByScope, ControlError, Scope, markers_in, who};
use crate::layout::{self, Layout};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio;

/// Bounds of a limit.
pub const RANGE: std::ops::RangeInclusive<usize> = 1..=4096;

/// Longest marker read.
const MAX_MARKER_BYTES: u64 = 4096;

/// What a limit marker says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    pub max_jobs: usize,
    #[serde(default)]
    pub set_at: Option<Timestamp>,
    #[serde(default)]
    pub by: Option<String>,
}

/// Every limit set by hand, as the markers say.
pub type Limits = ByScope<Limit>;

/// Where `scope`'s limit marker is; an error names an unusable name.
pub fn marker(layout: &Layout, scope: &Scope) -> Result<PathBuf, String> {
    let beside = |pause: PathBuf, dir: PathBuf| {
        pause
            .file_name()
            .map(|n| dir.join(n))
            .ok_or_else(|| "no marker name".to_owned())
    };
    match scope {
        Scope::Daemon => Ok(layout.daemon_limit()),
        Scope::Profile(p) => beside(layout.profile_pause(p)?, layout.profile_limits()),
        Scope::Project(p) => beside(layout.project_pause(p)?, layout.project_limits()),
    }
}

/// Set `scope`'s limit to `max_jobs` (replacing one set before), making
/// the root and `control/` if missing.
pub fn set(layout: &Layout, scope: &Scope, max_jobs: usize) -> Result<Limit, ControlError> {
    if !RANGE.contains(&max_jobs) {
        return Err(ControlError::Name(format!(
            "a limit of {max_jobs}: give {} to {}",
            RANGE.start(),
            RANGE.end()
        )));
    }
    let path = marker(layout, scope).map_err(ControlError::Name)?;
    fsio::create_root(layout.root())?;
    for dir in layout.control_folders() {
        fsio::create_dirs(layout.root(), &dir)?;
    }
    let limit = Limit {
        max_jobs,
        set_at: Some(Timestamp::now()),
        by: Some(who()),
    };
    let mut bytes = serde_json::to_vec_pretty(&limit)
        .map_err(|e| IoError::new("serialising", &path, std::io::Error::other(e)))?;
    bytes.push(b'\n');
    fsio::write_atomic(layout.root(), &path, &bytes)?;
    Ok(limit)
}

/// Clear `scope`'s limit: what it was, or `None` when none was set.
pub fn clear(layout: &Layout, scope: &Scope) -> Result<Option<Limit>, ControlError> {
    let path = marker(layout, scope).map_err(ControlError::Name)?;
    let was = read_marker(layout, &path);
    let removed = fsio::remove_file(layout.root(), &path)?;
    Ok(was.filter(|_| removed))
}

/// Read every limit marker; one that says no limit is logged, ignored.
pub fn read(layout: &Layout) -> Limits {
    let mut limits = Limits::default();
    let daemon = layout.daemon_limit();
    if fsio::stat_nofollow(layout.root(), &daemon)
        .ok()
        .flatten()
        .is_some()
    {
        match read_marker(layout, &daemon) {
            Some(l) => limits.daemon = Some(l),
            None => limits.ignored.push(daemon),
        }
    }
    for (name, path) in markers_in(layout, &layout.profile_limits()) {
        match (layout::paused_profile(&name), read_marker(layout, &path)) {
            (Some(profile), Some(l)) => drop(limits.profiles.insert(profile, l)),
            _ => limits.ignored.push(path),
        }
    }
    for (name, path) in markers_in(layout, &layout.project_limits()) {
        match (layout::paused_project(&name), read_marker(layout, &path)) {
            (Some(project), Some(l)) => drop(limits.projects.insert(project, l)),
            _ => limits.ignored.push(path),
        }
    }
    limits
}

/// What a marker says: JSON, or a bare number; `None` for anything else.
fn read_marker(layout: &Layout, path: &std::path::Path) -> Option<Limit> {
    let (bytes, _) = fsio::read_capped(layout.root(), path, MAX_MARKER_BYTES).ok()?;
    let limit = serde_json::from_slice::<Limit>(&bytes).ok().or_else(|| {
        let n = String::from_utf8_lossy(&bytes).trim().parse().ok()?;
        Some(Limit {
            max_jobs: n,
            set_at: None,
            by: None,
        })
    })?;
    RANGE.contains(&limit.max_jobs).then_some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::disallowed_methods)] // a tool's marker
    fn limits_are_set_replaced_read_and_cleared_and_junk_limits_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        set(&layout, &Scope::Daemon, 3).expect("set");
        set(&layout, &Scope::Daemon, 2).expect("replace");
        set(&layout, &Scope::Profile("review".into()), 1).expect("profile");
        set(&layout, &Scope::Project("acme/api".into()), 4).expect("project");
        assert!(set(&layout, &Scope::Daemon, 0).is_err());
        std::fs::write(layout.profile_limits().join("bare"), "5\n").expect("bare");
        std::fs::write(layout.profile_limits().join("junk"), "many").expect("junk");
        let limits = read(&layout);
        assert_eq!(limits.daemon.as_ref().map(|l| l.max_jobs), Some(2));
        assert_eq!(limits.profiles.get("review").map(|l| l.max_jobs), Some(1));
        assert_eq!(limits.profiles.get("bare").map(|l| l.max_jobs), Some(5));
        assert_eq!(limits.projects.get("acme/api").map(|l| l.max_jobs), Some(4));
        assert_eq!(limits.ignored.len(), 1, "{:?}", limits.ignored);
        assert_eq!(
            clear(&layout, &Scope::Daemon)
                .expect("clear")
                .map(|l| l.max_jobs),
            Some(2)
        );
        assert_eq!(clear(&layout, &Scope::Daemon).expect("again"), None);
        assert!(read(&layout).daemon.is_none());
    }
}
