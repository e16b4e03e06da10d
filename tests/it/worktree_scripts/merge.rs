//! `worktree-publish --merge`: the branch merged into the base branch, a
//! fast-forward when the base has not moved, else a merge commit; with an
//! origin the base is pushed there, without one it is updated in the
//! repository. A conflict, or a base checked out where updating its ref
//! would leave a worktree behind, refuses and merges nothing.

use std::fs;

use super::world::*;

#[test]
fn merge_fast_forwards_origin_main_when_it_has_not_moved() {
    let w = World::with_origin();
    w.prepare("ff");
    change(&w, "ff");
    let out = w.spawn_publish_merge("ff").wait();
    assert!(out.ok(), "publish --merge: {out:?}");
    let result = out.result_line();
    assert!(is_sha(result), "{out:?}");
    assert_eq!(w.rev(&w.origin, "refs/heads/main").as_deref(), Some(result));
    assert_eq!(
        w.rev(&w.origin, "refs/heads/jobwarden/ff").as_deref(),
        Some(result),
        "a fast-forward: main is the branch's own commit"
    );
    assert!(out.stderr.contains("merged jobwarden/ff"), "{out:?}");
}

#[test]
fn merge_writes_a_merge_commit_when_main_moved_and_refuses_a_conflict() {
    let w = World::with_origin();
    w.prepare("mc");
    change(&w, "mc");
    w.prepare("clash");
    fs::write(w.worktree("clash").join("README"), "clash\n").expect("clash");
    // Someone else moves origin's main meanwhile, touching README.
    w.seed_commit(&w.upstream, "README", "one\ntwo\nthree\n");
    w.git(&w.upstream, &["push", "--quiet", "origin", "main"]);
    let moved = w.git(&w.origin, &["rev-parse", "main"]);

    let out = w.spawn_publish_merge("mc").wait();
    assert!(out.ok(), "publish --merge: {out:?}");
    let merge = out.result_line().to_owned();
    assert_eq!(w.rev(&w.origin, "refs/heads/main"), Some(merge.clone()));
    let parents = w.git(&w.origin, &["show", "-s", "--format=%P", &merge]);
    let tip = w
        .rev(&w.origin, "refs/heads/jobwarden/mc")
        .expect("pushed branch");
    assert_eq!(
        parents,
        format!("{moved} {tip}"),
        "main's commit, then the branch's"
    );
    let files = w.git(&w.origin, &["ls-tree", "--name-only", &merge]);
    assert!(
        files.contains("mc.txt") && files.contains("README"),
        "{files}"
    );

    // README changed on both sides: a conflict merges nothing.
    let before = w.git(&w.origin, &["rev-parse", "main"]);
    let out = w.spawn_publish_merge("clash").wait();
    out.assert_refused("does not merge cleanly");
    assert_eq!(
        w.git(&w.origin, &["rev-parse", "main"]),
        before,
        "main untouched"
    );
}

#[test]
fn merge_without_origin_updates_main_only_where_no_worktree_has_it_checked_out() {
    let w = World::without_origin();
    w.prepare("local");
    change(&w, "local");
    // The clone has main checked out: updating the ref would leave its
    // files behind, so the script refuses.
    let main = w.git(&w.repo, &["rev-parse", "main"]);
    let out = w.spawn_publish_merge("local").wait();
    out.assert_refused("is checked out in a worktree");
    assert_eq!(w.git(&w.repo, &["rev-parse", "main"]), main);
    // Once the clone is on another branch, main moves to the job's work.
    w.git(&w.repo, &["checkout", "--quiet", "-b", "elsewhere"]);
    let out = w.spawn_publish_merge("local").wait();
    assert!(out.ok(), "publish --merge: {out:?}");
    let result = out.result_line();
    assert_eq!(w.rev(&w.repo, "refs/heads/main").as_deref(), Some(result));
    assert_eq!(
        w.rev(&w.repo, "refs/heads/jobwarden/local").as_deref(),
        Some(result)
    );
}
