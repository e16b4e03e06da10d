//! Merged work and the reconcile of published work, against real git: a
//! bare `origin`, the clone jobs work on, worktrees made by the shipped
//! `worktree-prepare`, branches published by the shipped
//! `worktree-publish` (with `--merge`, or not), and merges, deletions and
//! removed worktrees made by hand as an operator (or a hosting service)
//! would. The daemon sees them at start and every `reconcile_interval`.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::support::*;

const PREPARE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/worktree-prepare");
const PUBLISH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/worktree-publish");

/// `origin.git` (bare, `main` seeded), `repos/widgets` (the clone jobs
/// work on) and `upstream` (another clone: the hosting side, where merges
/// are made by hand).
struct Repos {
    origin: PathBuf,
    widgets: PathBuf,
    upstream: PathBuf,
}

impl Repos {
    fn new(sb: &Sandbox) -> Repos {
        let repos = sb.base.join("repos");
        fs::create_dir_all(&repos).expect("repos");
        git(
            &sb.base,
            &["init", "--quiet", "--bare", "-b", "main", "origin.git"],
        );
        git(&repos, &["clone", "--quiet", "../origin.git", "widgets"]);
        let widgets = repos.join("widgets");
        fs::write(widgets.join("README"), "widgets\n").expect("seed");
        git(&widgets, &["add", "README"]);
        git(&widgets, &["commit", "--quiet", "-m", "seed"]);
        git(&widgets, &["push", "--quiet", "origin", "main"]);
        git(&sb.base, &["clone", "--quiet", "origin.git", "upstream"]);
        Repos {
            origin: sb.base.join("origin.git"),
            widgets,
            upstream: sb.base.join("upstream"),
        }
    }

    /// Merge `branch` of origin into origin's `main` from the upstream
    /// clone: `--no-ff` (a merge commit) or `--ff-only`. The new `main`.
    fn merge_upstream(&self, branch: &str, how: &str) -> String {
        git(&self.upstream, &["fetch", "--quiet", "origin"]);
        git(&self.upstream, &["checkout", "--quiet", "main"]);
        git(
            &self.upstream,
            &["reset", "--quiet", "--hard", "origin/main"],
        );
        git(
            &self.upstream,
            &[
                "merge",
                "--quiet",
                how,
                "-m",
                "merge by hand",
                &format!("origin/{branch}"),
            ],
        );
        git(&self.upstream, &["push", "--quiet", "origin", "main"]);
        git(&self.origin, &["rev-parse", "main"])
    }
}

/// A config whose `wt` profile gives each job a worktree and branch of
/// widgets (`inbox/widgets/main/…`), publishes with `publish_args`, and
/// says where its work lives (`git`); the reconcile runs every 300 ms.
fn configure(sb: &Sandbox, repos: &Repos, publish_args: &[&str], agent: &str) {
    let repo_t = format!(
        "{}/{{repo}}",
        repos.widgets.parent().expect("repos").display()
    );
    let phase = |script: &str, extra: &[&str]| {
        let mut argv: Vec<&str> = vec![script];
        argv.extend_from_slice(extra);
        argv.extend([
            repo_t.as_str(),
            "{branch}",
            "{workdir}",
            "jobwarden/{job_id}",
        ]);
        format!("{{ command = {}, timeout = \"60s\" }}", q_argv(&argv))
    };
    let agent = sb.script("agent", agent);
    let cfg = ConfigToml::new(&["cat"])
        .global("reconcile_interval", "\"300ms\"")
        .extra(&format!(
            "[profiles.wt]\ncommand = {}\nprepare = {}\npublish = {}\n\n\
             [profiles.wt.git]\nrepo = {}\nbranch = \"jobwarden/{{job_id}}\"\n\
             target = \"origin/{{branch}}\"\nfetch = \"origin\"\nworktree = \"{{workdir}}\"\n\n\
             [[route]]\nmatch = \"{{repo}}/{{branch}}/**\"\nprofile = \"wt\"\n\
             workdir = \"{{root}}/worktrees/{{repo}}/{{job_id}}\"\n",
            q_argv(&["/bin/sh", &agent]),
            phase(PREPARE, &[]),
            phase(PUBLISH, publish_args),
            q(&repo_t),
        ));
    sb.configure(&cfg);
}

/// An agent that writes the prompt into a file of the worktree.
const EDITS: &str = r#"body=$(cat); echo "$body" > "change-$JOBWARDEN_NAME.txt""#;

fn json(sb: &Sandbox, args: &[&str]) -> Value {
    let out = sb.run(args);
    assert_eq!(out.code(), 0, "{args:?}: {out:?}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", out.stdout))
}

fn state_events(job: &Job) -> Vec<Value> {
    job.events()
        .into_iter()
        .filter(|e| e["op"] == "state")
        .collect()
}

/// The archived prompt of `job` under `archive/<state>/`, if it is there.
fn archived(sb: &Sandbox, job: &Job, state: &str) -> Option<PathBuf> {
    let path = sb
        .root
        .join("archive")
        .join(state)
        .join("widgets/main")
        .join(format!("{}.{}.md", job.record["name"].as_str()?, job.id));
    path.exists().then_some(path)
}

#[test]
fn a_publish_that_merges_ends_the_job_merged_with_its_commit_everywhere() {
    let sb = Sandbox::new();
    let repos = Repos::new(&sb);
    configure(&sb, &repos, &["--merge"], EDITS);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("widgets/main", "fix", "the fix\n");
    let job = sb.wait_done("widgets/main", "fix", secs(60));
    assert_eq!(job.state(), "merged", "{:#}\n{}", job.record, job.log());
    assert_eq!(job.str_field("state_reason"), Some("publish_merged"));
    let main = git(&repos.origin, &["rev-parse", "main"]);
    assert_eq!(job.str_field("merge_commit"), Some(main.as_str()));
    assert_eq!(job.str_field("result_ref"), Some(main.as_str()));
    assert!(job.str_field("merged_at").is_some(), "{:#}", job.record);
    assert_eq!(
        git(&repos.origin, &["show", "--name-only", "--format=", &main]),
        "change-fix.txt",
        "origin's main holds the job's change"
    );
    let git_field = &job.record["git"];
    assert_eq!(
        git_field["branch"],
        format!("jobwarden/{}", job.id).as_str()
    );
    assert_eq!(git_field["target"], "origin/main");
    // The transition is publishing → merged, and the end says why.
    let last = state_events(&job).pop().expect("state events");
    assert_eq!(
        (last["from"].as_str(), last["to"].as_str()),
        (Some("publishing"), Some("merged"))
    );
    assert_eq!(last["reason"], "publish_merged");
    assert!(
        archived(&sb, &job, "merged").is_some(),
        "archive/merged/ holds the prompt"
    );
    // status, jobs, wait, history: each says merged.
    let status = json(&sb, &["status", "--json"]);
    assert_eq!(status["counts"]["merged"], 1, "{status:#}");
    let listed = json(&sb, &["jobs", "--state", "merged", "--json"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed:#}");
    assert_eq!(
        sb.run(&["wait", &job.id]).code(),
        0,
        "a merged job is a success for wait"
    );
    let row = json(&sb, &["history", "show", &job.id, "--json"]);
    assert_eq!(row["outcome"], "success");
    assert_eq!(row["published"]["settled"], "publish_merged", "{row:#}");
    assert_eq!(row["published"]["merge_commit"], main.as_str());
    let stats = json(&sb, &["history", "stats", "--json"]);
    assert_eq!(stats["merged"], 1, "{stats:#}");
    assert_eq!(stats["projects"]["widgets/main"]["merged"], 1, "{stats:#}");
    let human = sb.run(&["history", "stats"]);
    assert!(
        human.stdout.contains("success 1, (of which merged 1)"),
        "{}",
        human.stdout
    );
    let shown = sb.run(&["show", &job.id]);
    assert!(
        shown.stdout.contains(&format!("by {main}")),
        "{}",
        shown.stdout
    );
}

#[test]
fn a_branch_merged_later_is_found_by_the_reconcile_merge_commit_or_fast_forward() {
    let sb = Sandbox::new();
    let repos = Repos::new(&sb);
    let (_d, one) = one_published(&sb, &repos);
    let tip = one.str_field("result_ref").expect("published commit");
    assert_eq!(one.record["git"]["tip"], tip, "the published tip is kept");
    // Published, not merged: passes come and go, nothing changes.
    assert_never("an unmerged branch counts as merged", millis(1200), || {
        sb.job(&one.id).is_some_and(|j| j.state() != "succeeded")
    });
    let finished = one
        .str_field("finished_at")
        .expect("finished_at")
        .to_owned();
    let branch = format!("jobwarden/{}", one.id);
    let merge = repos.merge_upstream(&branch, "--no-ff");
    let merged = wait_until("the reconcile finds the merge", secs(20), || {
        sb.job(&one.id).filter(|j| j.state() == "merged")
    });
    assert_eq!(merged.str_field("state_reason"), Some("branch_merged"));
    assert_eq!(merged.str_field("merge_commit"), Some(merge.as_str()));
    assert_eq!(
        merged.str_field("finished_at"),
        Some(finished.as_str()),
        "its end is kept"
    );
    assert_eq!(merged.record["reconciled"]["reason"], "branch_merged");
    let last = state_events(&merged).pop().expect("state events");
    assert_eq!(
        (last["from"].as_str(), last["to"].as_str()),
        (Some("succeeded"), Some("merged"))
    );
    assert_eq!(last["merge_commit"], merge.as_str());
    let moved = wait_until("its prompt moves to archive/merged", secs(10), || {
        archived(&sb, &merged, "merged")
    });
    assert_eq!(
        fs::read_to_string(&moved).expect("archived prompt"),
        "first\n"
    );
    assert!(
        archived(&sb, &merged, "succeeded").is_none(),
        "moved, not copied"
    );
    let now = sb.job(&one.id).expect("record");
    let rel = format!("archive/merged/widgets/main/one.{}.md", one.id);
    assert_eq!(
        now.str_field("archive_path"),
        Some(rel.as_str()),
        "the record names it"
    );
    // The ledger's settle comes last, after the record and the move.
    let row = wait_until("the ledger to settle it", secs(10), || {
        let row = json(&sb, &["history", "show", &one.id, "--json"]);
        (row["published"]["settled"] == "branch_merged").then_some(row)
    });
    assert_eq!(row["outcome"], "success", "the row itself never changes");
    assert_eq!(row["published"]["merge_commit"], merge.as_str());
    let indexed = json(&sb, &["jobs", "--state", "merged", "--json"]);
    assert_eq!(indexed.as_array().map(Vec::len), Some(1), "{indexed:#}");

    // A fast-forward: the merging commit is the branch's own tip.
    sb.drop_prompt("widgets/main", "two", "second\n");
    let two = sb.wait_done("widgets/main", "two", secs(60));
    assert_eq!(two.state(), "succeeded", "{:#}\n{}", two.record, two.log());
    let tip_two = two.str_field("result_ref").expect("published").to_owned();
    // Its branch started before `one` was merged: rebase it by hand so that
    // main can fast-forward to it, as a hosting service's rebase would not
    // (that is a new commit); here the branch itself moves.
    let branch_two = format!("jobwarden/{}", two.id);
    git(&repos.upstream, &["fetch", "--quiet", "origin"]);
    let base = git(
        &repos.upstream,
        &["merge-base", "origin/main", &format!("origin/{branch_two}")],
    );
    assert_eq!(
        base,
        git(&repos.upstream, &["rev-parse", "origin/main"]),
        "two starts from main"
    );
    let after = repos.merge_upstream(&branch_two, "--ff-only");
    assert_eq!(after, tip_two);
    let two = wait_until("the reconcile finds the fast-forward", secs(20), || {
        sb.job(&two.id).filter(|j| j.state() == "merged")
    });
    assert_eq!(two.str_field("merge_commit"), Some(tip_two.as_str()));
    // The ledger's settle comes last, after the record and the prompt's move.
    wait_until("the ledger to count both merged", secs(10), || {
        let stats = json(&sb, &["history", "stats", "--json"]);
        (stats["merged"] == 2).then_some(())
    });
}

#[test]
fn a_branch_deleted_unmerged_is_recorded_needs_attention_and_one_deleted_after_its_merge_is_merged()
{
    let sb = Sandbox::new();
    let repos = Repos::new(&sb);
    configure(&sb, &repos, &[], EDITS);
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("widgets/main", "dropped", "abandoned work\n");
    sb.drop_prompt("widgets/main", "landed", "merged work\n");
    let dropped = sb.wait_done("widgets/main", "dropped", secs(60));
    let landed = sb.wait_done("widgets/main", "landed", secs(60));
    for j in [&dropped, &landed] {
        assert_eq!(j.state(), "succeeded", "{:#}\n{}", j.record, j.log());
    }
    d.sigterm();
    d.wait_exit(secs(20));
    // While no daemon runs: `landed` is merged upstream, and then both
    // branches are deleted everywhere with their worktrees, as a hosting
    // service and a clean-up would.
    let merge = repos.merge_upstream(&format!("jobwarden/{}", landed.id), "--no-ff");
    for j in [&dropped, &landed] {
        let branch = format!("jobwarden/{}", j.id);
        git(&repos.origin, &["branch", "--quiet", "-D", &branch]);
        let wt = sb.root.join("worktrees/widgets").join(&j.id);
        git(
            &repos.widgets,
            &["worktree", "remove", "--force", &wt.display().to_string()],
        );
        git(&repos.widgets, &["branch", "--quiet", "-D", &branch]);
    }
    // The pass at start sees both.
    let _d = Daemon::start(&sb);
    let landed = wait_until("the merged then deleted branch is merged", secs(20), || {
        sb.job(&landed.id).filter(|j| j.state() == "merged")
    });
    assert_eq!(landed.str_field("merge_commit"), Some(merge.as_str()));
    let dropped = wait_until("the deleted branch is recorded", secs(20), || {
        sb.job(&dropped.id)
            .filter(|j| !j.record["reconciled"].is_null())
    });
    assert_eq!(
        dropped.state(),
        "succeeded",
        "a deleted branch changes no state"
    );
    assert_eq!(dropped.record["reconciled"]["reason"], "branch_deleted");
    let event = dropped
        .events()
        .into_iter()
        .find(|e| e["op"] == "reconciled")
        .expect("a reconciled event");
    assert_eq!(event["reason"], "branch_deleted");
    assert_eq!(
        event["branch"],
        format!("jobwarden/{}", dropped.id).as_str()
    );
    assert!(
        archived(&sb, &dropped, "succeeded").is_some(),
        "nothing moved, nothing deleted"
    );
    let inputs = sb.run(&["events", &dropped.id, "--inputs-only", "--json"]);
    assert!(
        inputs.stdout.contains("\"reconciled\""),
        "an input: {inputs:?}"
    );
    let row = wait_until("the ledger to settle it", secs(10), || {
        let row = json(&sb, &["history", "show", &dropped.id, "--json"]);
        (row["published"]["settled"] == "branch_deleted").then_some(row)
    });
    assert!(row["published"]["merged_at"].is_null());
    let shown = sb.run(&["show", &dropped.id]);
    assert!(shown.stdout.contains("branch_deleted"), "{}", shown.stdout);
    // It needs attention, saying what to do, and `history stats` counts it.
    let status = json(&sb, &["status", "--json"]);
    let attention = status["needs_attention"].as_array().expect("a list");
    let listed = attention
        .iter()
        .find(|a| a["job_id"] == dropped.id.as_str())
        .unwrap_or_else(|| panic!("the deleted branch needs attention: {status:#}"));
    assert_eq!(listed["outcome"], "branch_deleted");
    let reason = listed["reason"].as_str().unwrap_or("");
    assert!(reason.contains("deleted without being merged"), "{reason}");
    assert!(
        attention.iter().all(|a| a["job_id"] != landed.id.as_str()),
        "the merged one needs none: {status:#}"
    );
    let human = sb.run(&["status"]);
    assert!(human.stdout.contains("branch_deleted"), "{}", human.stdout);
    let stats = json(&sb, &["history", "stats", "--json"]);
    assert_eq!(stats["branch_deleted"], 1, "{stats:#}");
    assert_eq!(stats["merged"], 1, "{stats:#}");
    let human = sb.run(&["history", "stats"]);
    assert!(
        human.stdout.contains("branch deleted unmerged 1"),
        "{}",
        human.stdout
    );
    let acked = sb.run(&["ack", &dropped.id]);
    assert_eq!(acked.code(), 0, "{acked:?}");
    let status = json(&sb, &["status", "--json"]);
    assert!(
        status["needs_attention"]
            .as_array()
            .is_some_and(|a| a.iter().all(|a| a["job_id"] != dropped.id.as_str())),
        "acknowledged: {status:#}"
    );
    // Settled: later passes (every 300 ms) leave it alone (one event, not
    // one a pass).
    assert_never("a second reconciled event", millis(1200), || {
        sb.job(&dropped.id).is_none_or(|j| {
            j.events()
                .iter()
                .filter(|e| e["op"] == "reconciled")
                .count()
                != 1
        })
    });
}

#[test]
fn a_running_job_whose_worktree_is_removed_is_aborted_as_worktree_missing() {
    let sb = Sandbox::new();
    let repos = Repos::new(&sb);
    let release = sb.base.join("release");
    configure(
        &sb,
        &repos,
        &[],
        &format!(
            "cat >/dev/null; touch \"$OUT/started\"; while [ ! -e {} ]; do sleep 0.05; done",
            q(&release.display().to_string())
        ),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("widgets/main", "long", "work\n");
    wait_until("the agent runs", secs(60), || {
        sb.out().join("started").exists().then_some(())
    });
    let job = sb.wait_state("widgets/main", "long", "running", secs(10));
    let wt = PathBuf::from(job.str_field("workdir").expect("workdir"));
    assert_eq!(
        job.record["git"]["worktree"],
        wt.display().to_string().as_str()
    );
    fs::remove_dir_all(&wt).expect("remove the worktree under the job");
    let ended = sb.wait_done("widgets/main", "long", secs(20));
    assert_eq!(ended.state(), "aborted", "{:#}", ended.record);
    let reason = ended.str_field("state_reason").expect("reason");
    assert!(reason.contains("worktree_missing"), "{reason}");
    assert!(reason.contains(&wt.display().to_string()), "{reason}");
    let event = ended
        .events()
        .into_iter()
        .find(|e| e["op"] == "reconciled")
        .expect("a reconciled event");
    assert_eq!(event["reason"], "worktree_missing");
    let marker = fs::read_to_string(sb.run_dir(&ended.id).join("ABORT")).expect("marker");
    assert!(marker.contains("jobwarden reconcile"), "{marker}");
    assert!(
        archived(&sb, &ended, "aborted").is_some(),
        "its prompt is archived"
    );
}

#[test]
fn a_branch_name_git_would_misread_is_a_setup_failure_and_a_broken_repository_changes_nothing() {
    let sb = Sandbox::new();
    let repos = Repos::new(&sb);
    let cfg = ConfigToml::new(&["cat"])
        .global("reconcile_interval", "\"300ms\"")
        .extra(&format!(
            "[profiles.g]\n[profiles.g.git]\nrepo = {}\nbranch = \"jw/{{name}}\"\n\n\
             [profiles.nogit]\n[profiles.nogit.git]\nrepo = {}\nbranch = \"jw/{{job_id}}\"\n\n\
             [[route]]\nmatch = \"bad/**\"\nprofile = \"g\"\n\n\
             [[route]]\nmatch = \"broken/**\"\nprofile = \"nogit\"\n",
            q(&repos.widgets.display().to_string()),
            q(&sb.base.join("not-a-repo").display().to_string()),
        ));
    sb.configure(&cfg);
    let _d = Daemon::start(&sb);
    // `..` in a name is a valid file name, but not a branch name.
    sb.drop_prompt("bad", "a..b", "x\n");
    let bad = sb.wait_done("bad", "a..b", secs(20));
    assert_eq!(bad.state(), "setup_failed", "{:#}", bad.record);
    let reason = bad.str_field("state_reason").expect("reason");
    assert!(
        reason.contains("profiles.g.git.branch \"jw/a..b\""),
        "{reason}"
    );
    // A repository that is not one: the job still succeeds, git's answer
    // is an event, and the reconcile keeps asking without a fuss.
    fs::create_dir_all(sb.base.join("not-a-repo")).expect("folder");
    sb.drop_prompt("broken", "c", "x\n");
    let broken = sb.wait_done("broken", "c", secs(20));
    assert_eq!(broken.state(), "succeeded", "{:#}", broken.record);
    assert_eq!(
        broken.record["git"]["branch"],
        format!("jw/{}", broken.id).as_str()
    );
    let row = json(&sb, &["history", "show", &broken.id, "--json"]);
    assert!(row["published"]["settled"].is_null(), "{row:#}");
    assert_never(
        "a repository git cannot read changes the job",
        millis(1000),
        || sb.job(&broken.id).is_some_and(|j| j.state() != "succeeded"),
    );
    let status = sb.run(&["status"]);
    assert_eq!(status.code(), 0, "{status:?}");
}

#[test]
fn the_reconcile_fetches_only_under_the_worktree_scripts_lock() {
    let sb = Sandbox::new();
    let repos = Repos::new(&sb);
    let (_d, one) = one_published(&sb, &repos);
    // Held as a worktree script holds it while it pushes.
    let lock = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(repos.widgets.join(".git/jobwarden-worktree.lock"))
        .expect("lock file");
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("flock: {e}"));
    repos.merge_upstream(&format!("jobwarden/{}", one.id), "--no-ff");
    assert_never("a fetch while the lock is held", millis(1500), || {
        sb.job(&one.id).is_some_and(|j| j.state() == "merged")
    });
    drop(held);
    wait_until("merged once the lock is free", secs(20), || {
        sb.job(&one.id).filter(|j| j.state() == "merged")
    });
}

#[test]
fn an_abort_ends_a_job_whose_post_publish_check_hangs_and_its_git_goes_with_it() {
    let sb = Sandbox::new();
    let repos = Repos::new(&sb);
    // A remote whose upload-pack never answers.
    git(
        &repos.widgets,
        &["remote", "add", "slow", &repos.origin.display().to_string()],
    );
    let marker = format!("jw-hang-{}", std::process::id());
    git(
        &repos.widgets,
        &[
            "config",
            "remote.slow.uploadpack",
            &format!("sleep 1000 || {marker} #"),
        ],
    );
    let cfg = ConfigToml::new(&["cat"]).extra(&format!(
        "[profiles.h]\npublish = {{ command = [\"true\"], timeout = \"30s\" }}\n\
         [profiles.h.git]\nrepo = {}\nbranch = \"main\"\ntarget = \"main\"\nfetch = \"slow\"\n\n\
         [[route]]\nmatch = \"h/**\"\nprofile = \"h\"\n",
        q(&repos.widgets.display().to_string())
    ));
    sb.configure(&cfg);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("h", "x", "x\n");
    let job = sb.wait_state("h", "x", "publishing", secs(20));
    let hanging = || {
        Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    wait_until("the fetch hangs", secs(20), || hanging().then_some(()));
    let out = sb.run(&["abort", &job.id]);
    assert_eq!(out.code(), 0, "{out:?}");
    let ended = sb.wait_done("h", "x", secs(10));
    assert_eq!(ended.state(), "aborted", "{:#}", ended.record);
    wait_until("the hung upload-pack is killed", secs(10), || {
        (!hanging()).then_some(())
    });
}

#[test]
fn a_publish_that_removes_its_own_worktree_is_not_aborted() {
    let sb = Sandbox::new();
    let repos = Repos::new(&sb);
    let publish = sb.script(
        "publish",
        &format!(
            "{} \"$@\" && git -C \"$1\" worktree remove --force \"$3\" && sleep 1",
            q(PUBLISH)
        ),
    );
    configure(&sb, &repos, &[], EDITS);
    let cfg = fs::read_to_string(&sb.config).expect("config");
    sb.write_config(&cfg.replacen(
        &format!("\"{PUBLISH}\""),
        &format!("\"/bin/sh\", {}", q(&publish)),
        1,
    ));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("widgets/main", "tidy", "tidy\n");
    let job = sb.wait_done("widgets/main", "tidy", secs(60));
    assert_eq!(job.state(), "succeeded", "{:#}\n{}", job.record, job.log());
    assert!(
        !sb.root.join("worktrees/widgets").join(&job.id).exists(),
        "the publish removed its worktree"
    );
}

/// The completion summary names the batch's last job and its end, and a
/// merge the reconcile learns after the job ended is that job's end.
#[test]
fn the_completion_summary_names_the_last_job_and_a_merge_learned_later_as_its_end() {
    let sb = Sandbox::new();
    let repos = Repos::new(&sb);
    let (_d, one) = one_published(&sb, &repos);
    let finished = one
        .str_field("finished_at")
        .expect("finished_at")
        .to_owned();
    let summary = wait_until("a completion summary", secs(10), || {
        let st = json(&sb, &["status", "--json"]);
        Some(st["completion_summary"].clone()).filter(|s| !s.is_null())
    });
    let last = &summary["last"];
    assert_eq!(last["id"], one.id.as_str(), "{summary:#}");
    assert_eq!(last["state"], "succeeded", "{summary:#}");
    assert_eq!(last["finished_at"], finished.as_str(), "{summary:#}");
    assert!(last["merged_at"].is_null(), "{summary:#}");
    assert_eq!(last["ended_at"], finished.as_str(), "{summary:#}");

    // Merged by hand a while after the job ended (git's times are whole
    // seconds): the reconcile learns it, and the merge becomes its end.
    assert_never("the branch merged before it was", millis(1200), || {
        sb.job(&one.id).is_some_and(|j| j.state() != "succeeded")
    });
    repos.merge_upstream(&format!("jobwarden/{}", one.id), "--no-ff");
    let summary = wait_until("the summary to know the merge", secs(20), || {
        let st = json(&sb, &["status", "--json"]);
        let s = st["completion_summary"].clone();
        (s["last"]["state"] == "merged" && s["last"]["merged_at"].is_string()).then_some(s)
    });
    let last = &summary["last"];
    assert_eq!(last["id"], one.id.as_str(), "{summary:#}");
    assert_eq!(
        last["finished_at"],
        finished.as_str(),
        "its run's end is kept"
    );
    assert_eq!(last["ended_at"], last["merged_at"], "{summary:#}");
    let ended = last["ended_at"].as_str().expect("ended_at");
    assert!(
        ended > finished.as_str(),
        "merged after it ended: {summary:#}"
    );
    // The line may wrap: read it as words.
    let human = sb.run(&["status"]).stdout;
    let words = human.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("ended last: widgets/main/one (merged,"),
        "{human}"
    );
}

/// A daemon on `repos` whose job `widgets/main/one` published its branch
/// and succeeded; the daemon, kept running, and the job.
fn one_published(sb: &Sandbox, repos: &Repos) -> (Daemon, Job) {
    configure(sb, repos, &[], EDITS);
    let d = Daemon::start(sb);
    sb.drop_prompt("widgets/main", "one", "first\n");
    let one = sb.wait_done("widgets/main", "one", secs(60));
    assert_eq!(one.state(), "succeeded", "{:#}\n{}", one.record, one.log());
    (d, one)
}
