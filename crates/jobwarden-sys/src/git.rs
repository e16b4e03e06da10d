//! Published work in git: where a job's work lives (its profile's
//! `[profiles.*.git]`, resolved for the job into `job.json`'s `git`), and
//! what git says about it: is the job's branch merged into its target, and
//! by which commit; is it gone; is the job's worktree gone.
//!
//! git is asked through its own commands (`rev-parse`, `for-each-ref`,
//! `rev-list`, `fetch`), each in a process group of its own, killed with
//! its children at a deadline, never waiting on a terminal or a pager.
//! One survey asks a repository about many branches at once: the cost is a
//! handful of processes a repository, not a few a job. What a job changed
//! in the checkout it worked in is asked the same way (`changes.rs`).

pub mod changes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

/// The file, in a repository's common git dir, that the worktree scripts
/// and a fetch lock.
pub const REPOSITORY_LOCK: &str = "jobwarden-worktree.lock";

/// How long one git command may take (a fetch included).
pub const GIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A job's published work, as `job.json` keeps it (`git`): resolved from
/// the profile's templates when the job started, so that a later config
/// change does not move what the reconcile watches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitWork {
    /// The repository the branch and target live in (absolute).
    pub repo: String,
    /// The job's branch: `refs/...`, or a name looked up under
    /// `refs/heads/` then `refs/remotes/` (`origin/jw/x`).
    pub branch: String,
    /// What the branch is merged into (`main`, `origin/main`).
    pub target: String,
    /// The job's worktree, when it has one: a job that still runs needs it.
    #[serde(default)]
    pub worktree: Option<String>,
    /// A remote fetched (`--prune`) before the branch is judged.
    #[serde(default)]
    pub fetch: Option<String>,
    /// The branch's commit when the job published: a branch deleted after
    /// its merge (as hosting services do) is still known merged by it.
    #[serde(default)]
    pub tip: Option<String>,
}

impl GitWork {
    /// Every value checked as git will see it; the first fault, naming the
    /// key, for a job's `setup_failed` reason or a record found bad.
    pub fn check(&self) -> Result<(), String> {
        if !Path::new(&self.repo).is_absolute() {
            return Err(format!(
                "git.repo {:?} is not an absolute path; name the repository's folder from /",
                self.repo
            ));
        }
        check_ref("git.branch", &self.branch)?;
        check_ref("git.target", &self.target)?;
        if let Some(remote) = &self.fetch {
            check_ref("git.fetch", remote)?;
        }
        if let Some(tip) = &self.tip
            && !is_commit_id(tip)
        {
            return Err(format!("git.tip {tip:?} is not a commit id"));
        }
        if let Some(w) = &self.worktree
            && !Path::new(w).is_absolute()
        {
            return Err(format!(
                "git.worktree {w:?} is not an absolute path; name the worktree's folder from /"
            ));
        }
        Ok(())
    }

    /// Is the job's worktree gone (nothing at its path, not even a
    /// symlink)? False when it has none or it cannot tell.
    pub fn worktree_missing(&self) -> bool {
        self.worktree.as_ref().is_some_and(|w| {
            std::fs::symlink_metadata(w).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        })
    }
}

/// A name git is given as a ref or a remote: what `git check-ref-format`
/// refuses, and anything git could take for an option or a range, is
/// refused here (a route capture may have made it).
pub fn check_ref(key: &str, name: &str) -> Result<(), String> {
    let example = if key.ends_with("fetch") {
        "a remote's name such as \"origin\""
    } else {
        "a branch name such as \"jobwarden/{job_id}\""
    };
    let bad = |why: &str| Err(format!("{key} {name:?} {why}; use {example}"));
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > 255 {
        return bad("is longer than 255 bytes");
    }
    if name.starts_with('-') || name.starts_with('/') || name.ends_with('/') {
        return bad("starts with '-' or '/' or ends with '/'");
    }
    if name.contains("..") || name.contains("@{") || name.contains("//") || name == "@" {
        return bad("contains '..', '@{' or '//'");
    }
    if name.ends_with(".lock") || name.ends_with('.') {
        return bad("ends with '.lock' or '.'");
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(*c))
    {
        return bad(&format!("contains {c:?}"));
    }
    if name.split('/').any(|part| part.starts_with('.')) {
        return bad("has a part starting with '.'");
    }
    Ok(())
}

/// A full or abbreviated commit id (hex, 4 to 64 digits).
pub fn is_commit_id(s: &str) -> bool {
    (4..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What git could not answer: the command and what it said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("git {what} in {repo}: {why}")]
pub struct GitError {
    pub repo: String,
    pub what: String,
    pub why: String,
    /// The command's exit code, when it ran and exited.
    pub code: Option<i32>,
}

/// Where a job's branch stands against its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BranchState {
    /// Every commit of the branch is in the target.
    Merged(Merge),
    /// The branch is there, not (yet) merged; its commit.
    Open(String),
    /// No ref of that name exists (deleted, or pruned by the fetch), and
    /// its last known commit is not in the target.
    Deleted,
}

/// How a branch came into its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merge {
    /// The commit of the target's first-parent history that brought the
    /// branch in: the merge commit, or the branch's own tip when the
    /// target was fast-forwarded to it.
    pub commit: String,
    /// That commit's committer time.
    pub committed_at: Option<Timestamp>,
}

/// A branch to ask about, with its commit when last seen, if known.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    pub branch: &'a str,
    pub tip: Option<&'a str>,
}

/// One repository asked about `branches` against `target` (fetching
/// `fetch` first, when given). A branch that is gone but whose last known
/// commit is in the target was merged, then deleted.
pub async fn survey(
    repo: &str,
    fetch: Option<&str>,
    target: &str,
    branches: &[Asked<'_>],
    timeout: Duration,
) -> Result<BTreeMap<String, BranchState>, GitError> {
    let git = Git { repo, timeout };
    if !Path::new(repo).is_dir() {
        return Err(git.error("survey", "the repository's folder does not exist".into()));
    }
    if let Some(remote) = fetch {
        // The worktree scripts' lock: a fetch updates the refs they push
        // and fetch, and git refuses a ref two writers race for.
        let _lock = git.repository_lock().await?;
        git.run(
            "fetch",
            &["fetch", "--prune", "--quiet", "--no-tags", remote],
        )
        .await?;
    }
    let target_sha = git
        .run(
            "rev-parse",
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{target}^{{commit}}"),
            ],
        )
        .await
        .map_err(|e| {
            git.error(
                "rev-parse",
                format!("target {target:?} not found ({})", e.why),
            )
        })?
        .trim()
        .to_owned();
    let all = git.refs(None).await?;
    let merged: BTreeSet<String> = git.refs(Some(&target_sha)).await?.into_keys().collect();
    let mut states = BTreeMap::new();
    for asked in branches {
        let state = match (lookup(&all, asked.branch), asked.tip) {
            (Some((name, tip)), _) if !merged.contains(name) => BranchState::Open(tip.clone()),
            (Some((_, tip)), _) => BranchState::Merged(git.merge_of(tip, &target_sha).await?),
            (None, Some(tip)) if git.contains(&target_sha, tip).await? => {
                BranchState::Merged(git.merge_of(tip, &target_sha).await?)
            }
            (None, _) => BranchState::Deleted,
        };
        states.insert(asked.branch.to_owned(), state);
    }
    Ok(states)
}

/// `refname sha` lines into a map.
fn parse_refs(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(name, sha)| (name.to_owned(), sha.trim().to_owned()))
        .collect()
}

/// The ref `branch` names, as git would resolve a branch name: a full
/// `refs/...` name as it is, else a local branch, else a remote-tracking
/// one.
fn lookup<'a>(
    refs: &'a BTreeMap<String, String>,
    branch: &str,
) -> Option<(&'a String, &'a String)> {
    let candidates = if branch.starts_with("refs/") {
        vec![branch.to_owned()]
    } else {
        vec![
            format!("refs/heads/{branch}"),
            format!("refs/remotes/{branch}"),
        ]
    };
    candidates.iter().find_map(|c| refs.get_key_value(c))
}

struct Git<'a> {
    repo: &'a str,
    timeout: Duration,
}

impl Git<'_> {
    fn error(&self, what: &str, why: String) -> GitError {
        GitError {
            repo: self.repo.to_owned(),
            what: what.to_owned(),
            why,
            code: None,
        }
    }

    /// The lock the worktree scripts take on the repository
    /// (`jobwarden-worktree.lock` in its common git dir), waited for within
    /// the deadline.
    async fn repository_lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>, GitError> {
        let dir = self
            .run(
                "rev-parse",
                &["rev-parse", "--path-format=absolute", "--git-common-dir"],
            )
            .await?;
        let path = Path::new(dir.trim()).join(REPOSITORY_LOCK);
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .map_err(|e| self.error("lock", format!("opening {}: {e}", path.display())))?;
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(lock),
                Err((_, nix::errno::Errno::EWOULDBLOCK))
                    if tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err((_, e)) => {
                    let why = format!(
                        "{} is still locked after {:?} ({e})",
                        path.display(),
                        self.timeout
                    );
                    return Err(self.error("lock", why));
                }
            }
        }
    }

    /// Branches (local and remote-tracking) by full name, with their tips;
    /// only those merged into `merged_into` when given.
    async fn refs(&self, merged_into: Option<&str>) -> Result<BTreeMap<String, String>, GitError> {
        let merged = merged_into.map(|sha| format!("--merged={sha}"));
        let mut args = vec!["for-each-ref", "--format=%(refname) %(objectname)"];
        args.extend(merged.as_deref());
        args.extend(["refs/heads", "refs/remotes"]);
        self.run("for-each-ref", &args)
            .await
            .map(|out| parse_refs(&out))
    }

    /// Is commit `tip` in `target`'s history? False when git no longer
    /// has it (pruned with its branch).
    async fn contains(&self, target: &str, tip: &str) -> Result<bool, GitError> {
        let known = self
            .run(
                "cat-file",
                &["cat-file", "-e", &format!("{tip}^{{commit}}")],
            )
            .await
            .is_ok();
        if !known {
            return Ok(false);
        }
        match self
            .run("merge-base", &["merge-base", "--is-ancestor", tip, target])
            .await
        {
            Ok(_) => Ok(true),
            // Exit 1 says no; anything else is an error, with what git said.
            Err(e) if e.code == Some(1) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The commit that brought `tip` into `target` (see [`Merge`]).
    async fn merge_of(&self, tip: &str, target: &str) -> Result<Merge, GitError> {
        let range = format!("{tip}..{target}");
        let after = self
            .run(
                "rev-list",
                &[
                    "rev-list",
                    "--first-parent",
                    "--ancestry-path",
                    "--reverse",
                    &range,
                ],
            )
            .await?;
        let commit = match after.lines().next() {
            // The target is the tip itself.
            None => tip.to_owned(),
            Some(first) => {
                let parents = self.show(first, "%P").await?;
                // The target went forward from the tip (fast-forward):
                // the tip is on its first-parent history.
                if parents.split_whitespace().next() == Some(tip) {
                    tip.to_owned()
                } else {
                    first.trim().to_owned()
                }
            }
        };
        let committed_at = self
            .show(&commit, "%ct")
            .await
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|secs| Timestamp::from_epoch_ms(secs.saturating_mul(1000)));
        Ok(Merge {
            commit,
            committed_at,
        })
    }

    async fn show(&self, commit: &str, format: &str) -> Result<String, GitError> {
        let format = format!("--format={format}");
        self.run(
            "show",
            &["show", "--no-patch", "--no-show-signature", &format, commit],
        )
        .await
    }

    /// Run `git -C repo args…` to its end or the deadline; its stdout.
    async fn run(&self, what: &str, args: &[&str]) -> Result<String, GitError> {
        let mut cmd = tokio::process::Command::new("git");
        cmd.arg("-C")
            .arg(self.repo)
            .args(["-c", "core.pager=cat", "-c", "color.ui=false"])
            // A repository's own config may have been written by a job
            // (its checkout): nothing it names runs here, outside the
            // job's sandbox. No hooks (a fetch runs `reference-transaction`),
            // no fsmonitor program, no `ext::` transport.
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
            ])
            .args(["-c", "protocol.ext.allow=never"])
            .args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                "git is not installed (no `git` on PATH); install it".to_owned()
            } else {
                format!("cannot start git: {e}")
            };
            self.error(what, why)
        })?;
        // Its helpers (ssh, a credential helper, an upload-pack) go with it
        // at the deadline, and when this future is dropped (a shutdown).
        let group = crate::procfs::GroupGuard::new(child.id());
        let waited = tokio::time::timeout(self.timeout, child.wait_with_output()).await;
        if waited.is_ok() {
            group.done();
        }
        match waited {
            Err(_) => Err(self.error(what, format!("no answer within {:?}; killed", self.timeout))),
            Ok(Err(e)) => Err(self.error(what, e.to_string())),
            Ok(Ok(out)) if out.status.success() => {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Ok(Ok(out)) => {
                let said: String = String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ")
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(300)
                    .collect();
                let why = if said.is_empty() {
                    format!("exited with {}", out.status)
                } else {
                    said
                };
                Err(GitError {
                    code: out.status.code(),
                    ..self.error(what, why)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `git` run in `dir`, which must succeed.
    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "git {args:?}");
    }

    /// A repository whose config and hooks a job wrote: a survey with a
    /// fetch runs none of what they name.
    #[test]
    #[allow(clippy::disallowed_methods)] // the job's own files
    fn a_survey_runs_nothing_a_repositorys_own_config_or_hooks_name() {
        if std::process::Command::new("git")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("CI").is_none(),
                "under CI git must be there"
            );
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (origin, repo) = (dir.path().join("origin"), dir.path().join("repo"));
        std::fs::create_dir_all(&origin).expect("origin");
        git(&origin, &["init", "-q", "-b", "main"]);
        git(&origin, &["commit", "-q", "--allow-empty", "-m", "one"]);
        git(
            dir.path(),
            &["clone", "-q", origin.to_str().expect("utf-8"), "repo"],
        );
        let pwned = dir.path().join("pwned");
        let touch = format!("touch {}", pwned.display());
        git(&repo, &["config", "core.fsmonitor", &touch]);
        let hook = repo.join(".git/hooks/reference-transaction");
        std::fs::write(&hook, format!("#!/bin/sh\n{touch}\n")).expect("hook");
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        git(&origin, &["commit", "-q", "--allow-empty", "-m", "two"]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let asked = [Asked {
            branch: "origin/main",
            tip: None,
        }];
        let surveyed = runtime.block_on(survey(
            repo.to_str().expect("utf-8"),
            Some("origin"),
            "origin/main",
            &asked,
            GIT_TIMEOUT,
        ));
        assert!(surveyed.is_ok(), "{surveyed:?}");
        assert!(!pwned.exists(), "the repository's hook or fsmonitor ran");
    }

    #[test]
    fn ref_names_git_could_misread_are_refused() {
        for good in [
            "main",
            "origin/main",
            "jobwarden/0199-ab",
            "refs/heads/x",
            "feat_1.2",
        ] {
            assert_eq!(check_ref("git.branch", good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "-x",
            "--upload-pack=sh",
            "a..b",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "x.lock",
            "/a",
            "a/",
            "a//b",
            "a@{1}",
            "@",
            "a/.hidden",
            "a\u{7}",
            "a*",
            "a?",
            "a[",
            "a\\b",
            "x.",
        ] {
            let err = check_ref("git.branch", bad).expect_err(bad);
            assert!(err.starts_with("git.branch "), "{err}");
        }
    }

    #[test]
    fn a_record_s_paths_must_be_absolute() {
        let mut w = GitWork {
            repo: "/srv/repo".into(),
            branch: "jw/1".into(),
            target: "main".into(),
            worktree: Some("/srv/wt/1".into()),
            fetch: None,
            tip: None,
        };
        assert_eq!(w.check(), Ok(()));
        w.worktree = Some("wt".into());
        assert!(w.check().expect_err("relative").contains("git.worktree"));
        w.worktree = None;
        w.repo = "repo".into();
        assert!(w.check().expect_err("relative").contains("git.repo"));
    }

    #[test]
    fn a_branch_is_found_as_git_finds_it() {
        let refs = parse_refs(
            "refs/heads/main 1\nrefs/remotes/origin/jw/a 2\nrefs/heads/jw/b 3\nrefs/remotes/jw/b 4\n",
        );
        assert_eq!(lookup(&refs, "main").map(|r| r.1.as_str()), Some("1"));
        assert_eq!(
            lookup(&refs, "origin/jw/a").map(|r| r.1.as_str()),
            Some("2")
        );
        assert_eq!(lookup(&refs, "jw/b").map(|r| r.1.as_str()), Some("3"));
        assert_eq!(
            lookup(&refs, "refs/remotes/jw/b").map(|r| r.1.as_str()),
            Some("4")
        );
        assert_eq!(lookup(&refs, "jw/c"), None);
    }
}
