//! Pause markers: the operator's standing order that no new job start, for
//! the whole daemon, one profile or one project (DESIGN §13: operator
//! control is state under the root, like `ABORT`). A marker is a file
//! under `control/` (names in `layout/control.rs`); `jobwarden pause`
//! writes it atomically as `{"paused_at", "by", "reason"}`, once (a
//! second pause leaves the first in place and is told so), and any tool
//! may create one with any content. Removing it resumes. A pause only
//! holds back starts: prompts are still claimed and queued, and running
//! jobs go on.
//!
//! The daemon reads the markers at start (so a pause outlives restarts),
//! when its watch reports a change under `control/`, and on every
//! heartbeat tick; the CLI reads them for `status` and `jobs`. Nothing
//! needs a daemon to be running: the markers are the state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::layout::{self, Layout};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio;

/// What a pause holds back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every job.
    Daemon,
    /// Jobs of this profile.
    Profile(String),
    /// Jobs of prompts in exactly this inbox folder.
    Project(String),
}

impl Scope {
    /// `daemon`, `profile` or `project`.
    pub fn kind(&self) -> &'static str {
        match self {
            Scope::Daemon => "daemon",
            Scope::Profile(_) => "profile",
            Scope::Project(_) => "project",
        }
    }

    /// The profile or project named, none for the daemon.
    pub fn name(&self) -> Option<&str> {
        match self {
            Scope::Daemon => None,
            Scope::Profile(n) | Scope::Project(n) => Some(n),
        }
    }

    /// Where its marker is; an error names an unusable profile or project.
    pub fn marker(&self, layout: &Layout) -> Result<PathBuf, String> {
        match self {
            Scope::Daemon => Ok(layout.daemon_pause()),
            Scope::Profile(p) => layout.profile_pause(p),
            Scope::Project(p) => layout.project_pause(p),
        }
    }
}

impl std::fmt::Display for Scope {
    /// `daemon`, `profile review`, `project acme/api`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            None => f.write_str(self.kind()),
            Some(name) => write!(f, "{} {name}", self.kind()),
        }
    }
}

/// What a marker says: when, by whom and why (each null when a tool wrote
/// a marker without it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    #[serde(default)]
    pub paused_at: Option<Timestamp>,
    #[serde(default)]
    pub by: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// What the markers under `control/` say of one kind of order (pauses,
/// limits): the whole daemon's, each profile's, each project's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ByScope<T> {
    /// The whole daemon's.
    pub daemon: Option<T>,
    /// By profile name.
    pub profiles: BTreeMap<String, T>,
    /// By project folder (`acme/api`).
    pub projects: BTreeMap<String, T>,
    /// Files under `control/` that name no profile or project, or say
    /// nothing of this kind: they order nothing.
    #[serde(skip)]
    pub ignored: Vec<PathBuf>,
}

impl<T> Default for ByScope<T> {
    fn default() -> Self {
        ByScope {
            daemon: None,
            profiles: BTreeMap::new(),
            projects: BTreeMap::new(),
            ignored: Vec::new(),
        }
    }
}

impl<T> ByScope<T> {
    pub fn is_empty(&self) -> bool {
        self.daemon.is_none() && self.profiles.is_empty() && self.projects.is_empty()
    }

    /// Every order, the daemon's first.
    pub fn list(&self) -> Vec<(Scope, &T)> {
        let daemon = self.daemon.iter().map(|p| (Scope::Daemon, p));
        let profiles = self
            .profiles
            .iter()
            .map(|(n, p)| (Scope::Profile(n.clone()), p));
        let projects = self
            .projects
            .iter()
            .map(|(n, p)| (Scope::Project(n.clone()), p));
        daemon.chain(profiles).chain(projects).collect()
    }
}

/// Every pause in force, as the markers under `control/` say.
pub type Pauses = ByScope<Pause>;

impl Pauses {
    /// The pause that holds back jobs of `project` with `profile`, if any,
    /// the narrowest first (project, then profile, then the daemon).
    pub fn holding(&self, project: &str, profile: &str) -> Option<Scope> {
        if self.projects.contains_key(project) {
            Some(Scope::Project(project.to_owned()))
        } else if self.profiles.contains_key(profile) {
            Some(Scope::Profile(profile.to_owned()))
        } else {
            self.daemon.as_ref().map(|_| Scope::Daemon)
        }
    }
}

/// Why a pause could not be written, read or lifted.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The profile or project cannot name a marker.
    #[error("{0}")]
    Name(String),
    #[error(transparent)]
    Io(#[from] IoError),
}

/// What [`pause`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paused {
    /// This call wrote the marker.
    Now(Pause),
    /// The scope was already paused: that marker is left as it is.
    Already(Pause),
}

/// Longest reason kept in a marker.
const MAX_REASON: usize = crate::abort::MAX_REASON;
/// Longest marker content read; the rest is ignored.
const MAX_MARKER_BYTES: u64 = 4096;

/// Pause `scope`: write its marker atomically unless there is one (making
/// the root and `control/` if missing: a pause may precede the first start).
pub fn pause(layout: &Layout, scope: &Scope, reason: Option<&str>) -> Result<Paused, ControlError> {
    let marker = scope.marker(layout).map_err(ControlError::Name)?;
    fsio::create_root(layout.root())?;
    for dir in layout.control_folders() {
        fsio::create_dirs(layout.root(), &dir)?;
    }
    let pause = Pause {
        paused_at: Some(Timestamp::now()),
        by: Some(who()),
        reason: reason.and_then(|r| crate::abort::marker_reason(r.as_bytes())),
    };
    let mut bytes = serde_json::to_vec_pretty(&pause)
        .map_err(|e| IoError::new("serialising", &marker, std::io::Error::other(e)))?;
    bytes.push(b'\n');
    if fsio::create_new_atomic(layout.root(), &marker, &bytes)? {
        return Ok(Paused::Now(pause));
    }
    Ok(Paused::Already(read_marker(layout, &marker)))
}

/// Lift the pause of `scope`: remove its marker. What it said, or `None`
/// when the scope was not paused.
pub fn resume(layout: &Layout, scope: &Scope) -> Result<Option<Pause>, ControlError> {
    let marker = scope.marker(layout).map_err(ControlError::Name)?;
    if !is_there(layout, &marker) {
        return Ok(None);
    }
    let was = read_marker(layout, &marker);
    Ok(fsio::remove_file(layout.root(), &marker)?.then_some(was))
}

/// Read every marker. Folders that cannot be read are logged and count as
/// holding no pause (they are made by the daemon and `pause`; a root that
/// never had them has none).
pub fn read(layout: &Layout) -> Pauses {
    let mut pauses = Pauses::default();
    let daemon = layout.daemon_pause();
    if is_there(layout, &daemon) {
        pauses.daemon = Some(read_marker(layout, &daemon));
    }
    for (name, path) in markers_in(layout, &layout.profile_pauses()) {
        match layout::paused_profile(&name) {
            Some(profile) => drop(pauses.profiles.insert(profile, read_marker(layout, &path))),
            None => pauses.ignored.push(path),
        }
    }
    for (name, path) in markers_in(layout, &layout.project_pauses()) {
        match layout::paused_project(&name) {
            Some(project) => drop(pauses.projects.insert(project, read_marker(layout, &path))),
            None => pauses.ignored.push(path),
        }
    }
    pauses
}

/// Is there a file (of any kind) at `marker`? Looked at through the
/// root's handle without following a link: a `control/` swapped for a
/// link holds no pause, and is reported.
fn is_there(layout: &Layout, marker: &Path) -> bool {
    match fsio::stat_nofollow(layout.root(), marker) {
        Ok(found) => found.is_some(),
        Err(e) => {
            tracing::warn!("reading pause markers: {e}");
            false
        }
    }
}

/// The entries of a marker folder, dotfiles (a writer's temporary files)
/// left out.
pub(crate) fn markers_in(layout: &Layout, dir: &Path) -> Vec<(String, PathBuf)> {
    let entries = match fsio::read_dir(layout.root(), dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!("reading pause markers: {e}");
            return Vec::new();
        }
    };
    entries
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| !n.as_encoded_bytes().starts_with(b"."))
        .map(|n| (n.to_string_lossy().into_owned(), dir.join(&n)))
        .collect()
}

/// What a marker says. Any file counts as a pause, even one that cannot
/// be read (a FIFO, a symlink: never followed or waited on); JSON gives
/// its fields, plain text its first line as the reason.
fn read_marker(layout: &Layout, path: &Path) -> Pause {
    let Ok((bytes, _)) = fsio::read_capped(layout.root(), path, MAX_MARKER_BYTES) else {
        return Pause::default();
    };
    let mut pause = serde_json::from_slice::<Pause>(&bytes).unwrap_or_default();
    pause.reason = crate::abort::marker_reason(&bytes);
    pause.by = pause.by.map(|b| b.chars().take(MAX_REASON).collect());
    pause
}

/// Who is pausing: the user name and uid.
pub(crate) fn who() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid).ok().flatten() {
        Some(user) => format!("{} (uid {uid})", user.name),
        None => format!("uid {uid}"),
    }
}

/// Note in job `id`'s events what an operator did to it from outside (an
/// input, see [`crate::events::INPUT_OPS`]), with `by`, who did it (unless `fields` says),
/// if the job's events are on. Fail-soft, as every event is: a job whose
/// record cannot be read, or whose events cannot be written, just gets no
/// line.
pub fn note_input(
    layout: &crate::layout::Layout,
    config: &crate::config::Config,
    id: &crate::job::JobId,
    op: crate::events::Op,
    mut fields: serde_json::Value,
    by: &str,
) {
    let Ok(rec) = crate::job::JobRecord::load_job(layout, id) else {
        return;
    };
    if let Some(map) = fields.as_object_mut() {
        map.entry("by").or_insert_with(|| serde_json::json!(by));
    }
    crate::events::EventLog::open(layout.root(), &layout.events(id), config.events_for(&rec))
        .append(op, fields);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_is_written_once_read_back_and_lifted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path().join("root"));
        let scope = Scope::Project("acme/api".into());
        let first = pause(&layout, &scope, Some("release freeze")).expect("pause");
        assert!(matches!(first, Paused::Now(_)), "{first:?}");
        let again = pause(&layout, &scope, Some("other")).expect("pause again");
        let Paused::Already(kept) = again else {
            panic!("second pause replaced the first: {again:?}")
        };
        assert_eq!(kept.reason.as_deref(), Some("release freeze"));
        let seen = read(&layout);
        assert_eq!(seen.holding("acme/api", "default"), Some(scope.clone()));
        assert_eq!(seen.holding("acme", "default"), None);
        let was = resume(&layout, &scope).expect("resume");
        assert_eq!(
            was.and_then(|p| p.reason).as_deref(),
            Some("release freeze")
        );
        assert_eq!(resume(&layout, &scope).expect("resume again"), None);
        assert!(read(&layout).is_empty());
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a tool's marker
    fn any_file_is_a_pause_and_stray_names_pause_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        for d in layout.control_folders() {
            std::fs::create_dir_all(d).expect("dirs");
        }
        std::fs::write(layout.daemon_pause(), "maintenance window\nmore").expect("write");
        std::fs::write(layout.profile_pauses().join("-bad"), "").expect("write");
        std::fs::write(layout.profile_pauses().join(".x.tmp"), "").expect("write");
        std::fs::write(layout.profile_pauses().join("review"), "").expect("write");
        let seen = read(&layout);
        let daemon = seen.daemon.clone().expect("daemon paused");
        assert_eq!(daemon.reason.as_deref(), Some("maintenance window"));
        assert_eq!(seen.profiles.keys().collect::<Vec<_>>(), ["review"]);
        assert_eq!(seen.ignored.len(), 1, "{:?}", seen.ignored);
        assert_eq!(
            seen.holding("p", "review"),
            Some(Scope::Profile("review".into()))
        );
        assert_eq!(seen.holding("p", "other"), Some(Scope::Daemon));
    }
}
