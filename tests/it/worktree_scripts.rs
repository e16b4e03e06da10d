//! The git worktree scripts (`scripts/worktree-prepare`,
//! `scripts/worktree-publish`), run directly the way a profile's prepare and
//! publish phases run them: a clean environment, stdin from /dev/null, the
//! `JOBWARDEN_*` variables. No daemon and no network: `origin` is a local bare
//! repository, and the repository the jobs work on is a clone of it.
//!
//! Git reads neither the machine's nor the user's config
//! (`GIT_CONFIG_GLOBAL=/dev/null`, `GIT_CONFIG_NOSYSTEM=1`), so no identity is
//! configured unless a test sets one: the seed commits name theirs with `-c`,
//! and the jobs' commits use the script's fallback identity.
mod merge;
mod world;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use nix::fcntl::{Flock, FlockArg};

use crate::support::{assert_never, millis};
use world::*;

#[test]
fn prepare_creates_a_worktree_on_a_new_branch_from_origin_main() {
    let w = World::with_origin();
    let origin_main = w.git(&w.origin, &["rev-parse", "main"]);
    let stale = w.git(&w.repo, &["rev-parse", "origin/main"]);
    assert_ne!(origin_main, stale, "the clone must start behind origin");

    let out = w.spawn_prepare("job1").wait();
    assert!(out.ok(), "prepare: {out:?}");
    assert_eq!(out.stdout, "", "prepare keeps stdout empty");

    let wt = w.worktree("job1");
    assert_eq!(w.git(&wt, &["rev-parse", "HEAD"]), origin_main);
    assert_eq!(
        w.git(&wt, &["symbolic-ref", "HEAD"]),
        "refs/heads/jobwarden/job1"
    );
    assert_eq!(
        w.git(&wt, &["status", "--porcelain"]),
        "",
        "a clean checkout"
    );
    let upstream = w.try_git(&wt, &["rev-parse", "--abbrev-ref", "@{upstream}"]);
    assert!(
        !upstream.ok(),
        "the new branch tracks nothing: {upstream:?}"
    );
    let list = w.git(&w.repo, &["worktree", "list", "--porcelain"]);
    assert!(
        list.contains(&format!("worktree {}", wt.display())),
        "{list}"
    );
    // The local main is left alone.
    assert_eq!(w.git(&w.repo, &["rev-parse", "main"]), stale);
}

#[test]
fn two_prepares_at_once_get_their_own_worktrees_and_branches() {
    let w = World::with_origin();
    let origin_main = w.git(&w.origin, &["rev-parse", "main"]);

    // Both start before either is waited for; both fetch into the same clone.
    let a = w.spawn_prepare("job-a");
    let b = w.spawn_prepare("job-b");
    let (a, b) = (a.wait(), b.wait());
    assert!(a.ok(), "prepare job-a: {a:?}");
    assert!(b.ok(), "prepare job-b: {b:?}");

    for job in ["job-a", "job-b"] {
        let wt = w.worktree(job);
        let head = format!("refs/heads/jobwarden/{job}");
        assert_eq!(w.git(&wt, &["symbolic-ref", "HEAD"]), head);
        assert_eq!(w.git(&wt, &["rev-parse", "HEAD"]), origin_main);
    }
    let branches = w.git(&w.repo, &["branch", "--list", "jobwarden/*"]);
    assert_eq!(branches.lines().count(), 2, "{branches}");
}

#[test]
fn publishing_two_jobs_pushes_each_branch_with_its_commit_on_top_of_main() {
    let w = World::with_origin();
    let origin_main = w.git(&w.origin, &["rev-parse", "main"]);
    for job in ["job-a", "job-b"] {
        w.prepare(job);
        change(&w, job);
    }

    // Both publish at the same time; their pushes share the repository lock.
    let a = w.spawn_publish("job-a");
    let b = w.spawn_publish("job-b");
    for (job, out) in [("job-a", a.wait()), ("job-b", b.wait())] {
        assert!(out.ok(), "publish {job}: {out:?}");
        let sha = out.result_line();
        assert!(is_sha(sha), "result line of {job} is not a SHA: {out:?}");
        let on_origin = w.rev(&w.origin, &format!("refs/heads/jobwarden/{job}"));
        assert_eq!(on_origin.as_deref(), Some(sha), "origin's branch of {job}");
        assert_eq!(
            w.git(&w.origin, &["rev-parse", &format!("{sha}^")]),
            origin_main
        );
        let files = w.git(&w.origin, &["show", "--format=", "--name-only", sha]);
        assert_eq!(files, format!("{job}.txt"));
        let meta = w.git(&w.origin, &["log", "-1", "--format=%an <%ae>|%s", sha]);
        let subject = format!("jobwarden: acme/main/fix-{job} (job {job})");
        assert_eq!(meta, format!("jobwarden <jobwarden@localhost>|{subject}"));
    }
    assert_eq!(w.git(&w.origin, &["rev-parse", "main"]), origin_main);
    // The worktrees stay for the operator.
    assert!(w.worktree("job-a").join("job-a.txt").is_file());
}

#[test]
fn publish_without_changes_exits_0_and_prints_head() {
    let w = World::with_origin();
    let wt = w.prepare("idle");

    let out = w.spawn_publish("idle").wait();
    assert!(out.ok(), "publish: {out:?}");
    assert!(out.stderr.contains("nothing to publish"), "{out:?}");
    assert_eq!(out.result_line(), w.git(&wt, &["rev-parse", "HEAD"]));
    assert_eq!(out.stdout.lines().count(), 1, "only the result on stdout");
    assert_eq!(
        w.rev(&w.origin, "refs/heads/jobwarden/idle"),
        None,
        "nothing pushed"
    );
}

#[test]
fn publish_pushes_commits_the_agent_made_itself() {
    let w = World::with_origin();
    let wt = w.prepare("selfcommit");
    change(&w, "selfcommit");
    w.git(&wt, &["add", "-A"]);
    let agent = [
        "-c",
        "user.name=Agent",
        "-c",
        "user.email=agent@example.com",
    ];
    w.git(
        &wt,
        &[&agent[..], &["commit", "--quiet", "-m", "agent's own"]].concat(),
    );
    let agent_commit = w.git(&wt, &["rev-parse", "HEAD"]);

    let out = w.spawn_publish("selfcommit").wait();
    assert!(out.ok(), "publish: {out:?}");
    assert_eq!(out.result_line(), agent_commit, "no extra commit on top");
    let pushed = w.rev(&w.origin, "refs/heads/jobwarden/selfcommit");
    assert_eq!(pushed, Some(agent_commit));
}

#[test]
fn prepare_refuses_an_existing_worktree_path() {
    let w = World::with_origin();
    let wt = w.worktree("taken");
    fs::create_dir_all(&wt).expect("create folder");
    fs::write(wt.join("keep.txt"), "mine\n").expect("write file");

    w.spawn_prepare("taken")
        .wait()
        .assert_refused("already exists");
    assert_eq!(fs::read_to_string(wt.join("keep.txt")).unwrap(), "mine\n");
    assert_eq!(
        fs::read_dir(&wt).unwrap().count(),
        1,
        "folder left as it was"
    );
    assert_eq!(w.rev(&w.repo, "refs/heads/jobwarden/taken"), None);
}

#[test]
fn prepare_refuses_an_existing_branch() {
    let w = World::with_origin();
    w.git(&w.repo, &["branch", "jobwarden/dup", "main"]);
    let before = w.git(&w.repo, &["rev-parse", "jobwarden/dup"]);

    w.spawn_prepare("dup")
        .wait()
        .assert_refused("already exists");
    assert!(!w.worktree("dup").exists());
    assert_eq!(w.git(&w.repo, &["rev-parse", "jobwarden/dup"]), before);
}

#[test]
fn prepare_refuses_an_unknown_base_branch() {
    let w = World::with_origin();
    let wt = w.worktree("nobase");
    let args = [s(&w.repo), "no-such-branch", s(&wt), "jobwarden/nobase"];
    let out = w.spawn_script(PREPARE, &args, "nobase", &w.base).wait();
    out.assert_refused("no-such-branch");
    assert!(!wt.exists(), "no worktree");
    assert_eq!(w.rev(&w.repo, "refs/heads/jobwarden/nobase"), None);

    // Without an origin, the local branch is what must exist.
    let local = World::without_origin();
    let wt = local.worktree("nobase");
    let args = [s(&local.repo), "no-such-branch", s(&wt), "jobwarden/nobase"];
    let out = local.spawn_script(PREPARE, &args, "nobase", &local.base);
    out.wait().assert_refused("no branch no-such-branch");
    assert!(!wt.exists(), "no worktree");
}

#[test]
fn prepare_refuses_a_folder_that_is_not_a_repository() {
    let w = World::empty();
    let plain = w.base.join("plain");
    fs::create_dir(&plain).expect("create folder");
    let wt = w.worktree("norepo");
    let args = [s(&plain), "main", s(&wt), "jobwarden/norepo"];

    let out = w.spawn_script(PREPARE, &args, "norepo", &w.base).wait();
    out.assert_refused("not a git repository");
    assert!(!wt.exists() && !w.base.join("worktrees").exists());
    assert_eq!(fs::read_dir(&plain).unwrap().count(), 0, "nothing written");
}

#[test]
fn publish_without_origin_commits_and_prints_the_sha() {
    let w = World::without_origin();
    let main = w.git(&w.repo, &["rev-parse", "main"]);
    w.prepare("local");
    change(&w, "local");

    let out = w.spawn_publish("local").wait();
    assert!(out.ok(), "publish: {out:?}");
    let sha = out.result_line();
    assert!(is_sha(sha), "{out:?}");
    assert_eq!(out.stdout.lines().count(), 1, "only the result on stdout");
    assert_eq!(
        w.rev(&w.repo, "refs/heads/jobwarden/local").as_deref(),
        Some(sha)
    );
    assert_eq!(w.git(&w.repo, &["rev-parse", &format!("{sha}^")]), main);
    // The repository's own identity wins over the fallback.
    let author = w.git(&w.repo, &["log", "-1", "--format=%an <%ae>", sha]);
    assert_eq!(author, "Operator <operator@example.com>");
}

#[test]
fn publish_fails_when_the_push_is_rejected() {
    let w = World::with_origin();
    let hook = w.origin.join("hooks/pre-receive");
    fs::write(&hook, "#!/bin/sh\necho 'refused by policy' >&2\nexit 1\n").expect("hook");
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).expect("chmod hook");
    let wt = w.prepare("rejected");
    change(&w, "rejected");

    let out = w.spawn_publish("rejected").wait();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains("refused by policy"),
        "git's reason: {out:?}"
    );
    assert!(out.stderr.contains("push of jobwarden/rejected"), "{out:?}");
    assert_eq!(out.stdout, "", "no result line for a failed publish");
    assert_eq!(w.rev(&w.origin, "refs/heads/jobwarden/rejected"), None);
    // The commit is kept in the worktree, on top of main.
    let main = w.git(&w.origin, &["rev-parse", "main"]);
    assert_eq!(w.git(&wt, &["rev-parse", "HEAD^"]), main);
}

/// Points `repo`'s origin at a GitHub URL that git rewrites (`insteadOf`) to
/// the local bare repository, so that pushes still need no network.
fn pretend_origin_is_on_github(w: &World) {
    let url = "https://github.com/acme/widgets.git";
    w.git(&w.repo, &["remote", "set-url", "origin", url]);
    let key = format!("url.{}.insteadOf", w.origin.display());
    w.git(&w.repo, &["config", &key, url]);
}

// A real `gh` would need the network and a GitHub login, so the pull-request
// path runs against a fake `gh` that prints a URL as the real one does.
#[test]
fn publish_opens_a_pull_request_with_gh_for_a_github_origin() {
    let w = World::with_origin();
    pretend_origin_is_on_github(&w);
    w.install_fake_gh();
    w.prepare("pr");
    change(&w, "pr");

    let out = w.spawn_publish("pr").wait();
    assert!(out.ok(), "publish: {out:?}");
    assert_eq!(out.result_line(), "https://github.com/acme/widgets/pull/7");
    let args = fs::read_to_string(w.base.join("out/gh.args")).expect("gh was run");
    assert_eq!(args, "pr create --base main --head jobwarden/pr --fill\n");
    let pushed = w.rev(&w.origin, "refs/heads/jobwarden/pr");
    assert_eq!(
        pushed,
        Some(w.git(&w.worktree("pr"), &["rev-parse", "HEAD"]))
    );
}

#[test]
fn publish_runs_no_gh_for_an_origin_elsewhere() {
    let w = World::with_origin();
    w.install_fake_gh();
    w.prepare("plain");
    change(&w, "plain");

    let out = w.spawn_publish("plain").wait();
    assert!(out.ok(), "publish: {out:?}");
    assert!(is_sha(out.result_line()), "{out:?}");
    assert!(!w.base.join("out/gh.args").exists(), "gh was run");
}

// Without `gh` installed, a GitHub origin gets its branch pushed and the SHA
// as result. Where a real `gh` is installed this cannot be arranged (PATH
// would find it), so the test skips.
#[test]
fn publish_to_github_without_gh_prints_the_sha() {
    if on_path("gh") {
        eprintln!("skipped: gh is installed, and a real gh would need the network");
        return;
    }
    let w = World::with_origin();
    pretend_origin_is_on_github(&w);
    w.prepare("nogh");
    change(&w, "nogh");

    let out = w.spawn_publish("nogh").wait();
    assert!(out.ok(), "publish: {out:?}");
    let pushed = w.rev(&w.origin, "refs/heads/jobwarden/nogh");
    assert_eq!(pushed.as_deref(), Some(out.result_line()));
}

#[test]
fn prepare_waits_for_the_repository_lock() {
    if !on_path("flock") {
        eprintln!("skipped: no flock command, so the scripts take no lock");
        return;
    }
    let w = World::with_origin();
    let lock_path = w.repo.join(".git").join(LOCK_FILE);
    let file = fs::File::create(&lock_path).expect("create lock file");
    let held = Flock::lock(file, FlockArg::LockExclusive).expect("take the lock");

    let mut prepare = w.spawn_prepare("locked");
    assert_never("prepare ending while the lock is held", millis(500), || {
        prepare.try_status().is_some()
    });
    assert!(
        !w.worktree("locked").exists(),
        "worktree made under a held lock"
    );
    drop(held);
    let out = prepare.wait();
    assert!(out.ok(), "prepare after the lock was released: {out:?}");
    assert!(w.worktree("locked").join("README").is_file());
}
