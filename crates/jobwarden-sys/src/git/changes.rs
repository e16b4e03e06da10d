//! What a job changed in the git checkout it worked in, found without the
//! job's help: the checkout's files (tracked, and untracked but not
//! ignored: `git ls-files`) and their `lstat` (size, change time, inode)
//! as the job's command starts, against the same as it ended, and the
//! files its commits touched (`git diff` of the two HEADs: trees only).
//! Modified, added, deleted and created files all count; a file that was
//! already changed when the job started counts only if it changed again;
//! ignored files are left out. No git command run here reads the working
//! files through a filter, a hook or an fsmonitor a job could have
//! written (see `Git::run`), and no file is opened: only `lstat`.
//! At most `max` paths are kept, sorted; `cut` says when more were found
//! (or when the checkout holds more files than are looked at).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use super::Git;

/// The most files of a checkout looked at.
const FILES_MAX: usize = 200_000;

/// What `lstat` says of a file: size, change time (s, ns), inode.
type Stat = (u64, i64, i64, u64);

/// A checkout as a job's command starts.
#[derive(Debug, Clone)]
pub struct Before {
    /// The checkout's top folder (absolute).
    top: String,
    head: Option<String>,
    files: BTreeMap<String, Stat>,
    cut: bool,
}

/// What the job changed: absolute paths, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changed {
    pub paths: Vec<String>,
    /// More were found than kept, or the checkout was too large to look
    /// at whole.
    pub cut: bool,
}

/// The checkout `dir` is in, as it is now; `None` when `dir` is in no
/// git checkout (or git cannot say).
pub async fn before(dir: &Path, timeout: Duration) -> Option<Before> {
    let dir = dir.to_str()?;
    let git = Git { repo: dir, timeout };
    let top = git
        .run("rev-parse", &["rev-parse", "--show-toplevel"])
        .await
        .ok()?
        .trim()
        .to_owned();
    let git = Git {
        repo: &top,
        timeout,
    };
    let head = head(&git).await;
    let (files, cut) = files(&git, &top).await?;
    Some(Before {
        top,
        head,
        files,
        cut,
    })
}

/// What changed in `before`'s checkout since, at most `max` paths.
pub async fn after(before: &Before, timeout: Duration, max: usize) -> Changed {
    let git = Git {
        repo: &before.top,
        timeout,
    };
    let (now, cut_now) = files(&git, &before.top).await.unwrap_or_default();
    let mut found: BTreeSet<String> = BTreeSet::new();
    for (path, stat) in &now {
        if before.files.get(path) != Some(stat) {
            found.insert(path.clone());
        }
    }
    for path in before.files.keys() {
        if !now.contains_key(path) {
            found.insert(path.clone());
        }
    }
    if let (Some(was), Some(is)) = (&before.head, head(&git).await)
        && *was != is
    {
        // What the job committed: the files its commits touched.
        let args = [
            "diff",
            "--name-only",
            "-z",
            "--no-renames",
            was.as_str(),
            is.as_str(),
        ];
        let names = git.run("diff", &args).await.unwrap_or_default();
        found.extend(
            names
                .split('\0')
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
        );
    }
    let cut = before.cut || cut_now || found.len() > max;
    let top = before.top.trim_end_matches('/');
    Changed {
        paths: found
            .into_iter()
            .take(max)
            .map(|p| format!("{top}/{p}"))
            .collect(),
        cut,
    }
}

async fn head(git: &Git<'_>) -> Option<String> {
    git.run("rev-parse", &["rev-parse", "--verify", "-q", "HEAD"])
        .await
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The checkout's files, tracked and untracked but not ignored, each with
/// what `lstat` says (a file gone meanwhile is left out); whether there
/// were more than [`FILES_MAX`].
async fn files(git: &Git<'_>, top: &str) -> Option<(BTreeMap<String, Stat>, bool)> {
    let args = [
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ];
    let listed = git.run("ls-files", &args).await.ok()?;
    let names: BTreeSet<&str> = listed.split('\0').filter(|n| !n.is_empty()).collect();
    let cut = names.len() > FILES_MAX;
    let top = Path::new(top);
    let files = names
        .into_iter()
        .take(FILES_MAX)
        .filter_map(|name| {
            let meta = std::fs::symlink_metadata(top.join(name)).ok()?;
            let stat = (meta.size(), meta.ctime(), meta.ctime_nsec(), meta.ino());
            Some((name.to_owned(), stat))
        })
        .collect();
    Some((files, cut))
}
