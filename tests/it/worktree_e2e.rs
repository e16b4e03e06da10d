//! The git-worktree example end to end through the daemon: a route
//! `{repo}/{branch}/**`, a profile whose prepare creates a worktree and
//! branch per job and whose publish commits and pushes, two jobs at once on
//! the same repository and branch, against a local bare `origin` (no
//! network). Each gets its own worktree and branch, both publish, and each
//! job's `result_ref` is the commit its branch now has in `origin`.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::*;

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn two_jobs_on_one_repository_and_branch_each_get_a_worktree_and_publish() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("skipped: git is not installed");
        return;
    }
    let sb = Sandbox::new();
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
    git(
        &widgets,
        &[
            "-c",
            "user.name=Seed",
            "-c",
            "user.email=seed@example.com",
            "commit",
            "--quiet",
            "-m",
            "seed",
        ],
    );
    git(&widgets, &["push", "--quiet", "origin", "main"]);

    // The "agent" edits a file in its worktree and waits until both jobs
    // are in their main command, so the two really run side by side.
    let agent = sb.script(
        "agent",
        r#"body=$(cat); echo "$body" > "change-$JOBWARDEN_NAME.txt"
touch "$OUT/in-$JOBWARDEN_NAME"; pwd > "$OUT/pwd-$JOBWARDEN_NAME"
while [ ! -e "$OUT/in-a" ] || [ ! -e "$OUT/in-b" ]; do sleep 0.05; done"#,
    );
    let phase = |name: &str| {
        format!(
            "{{ command = {}, timeout = \"60s\" }}",
            q_argv(&[
                &script(name),
                &format!("{}/{{repo}}", repos.display()),
                "{branch}",
                "{workdir}",
                "jobwarden/{job_id}",
            ])
        )
    };
    let cfg = ConfigToml::new(&["cat"]).global("max_jobs", "2").extra(&format!(
        "[profiles.worktree]\ncommand = {}\nprepare = {}\npublish = {}\n\n[[route]]\nmatch = \"{{repo}}/{{branch}}/**\"\nprofile = \"worktree\"\nworkdir = \"{{root}}/worktrees/{{repo}}/{{job_id}}\"\n",
        q_argv(&["/bin/sh", &agent]),
        phase("worktree-prepare"),
        phase("worktree-publish"),
    ));
    sb.configure(&cfg);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("widgets/main", "a", "change from a\n");
    sb.drop_prompt("widgets/main", "b", "change from b\n");

    let mut shas = Vec::new();
    for name in ["a", "b"] {
        let job = sb.wait_done("widgets/main", name, secs(60));
        assert_eq!(job.state(), "succeeded", "{:#}\n{}", job.record, job.log());
        let states: Vec<String> = job
            .events()
            .iter()
            .filter(|e| e["op"] == "state")
            .filter_map(|e| e["to"].as_str().map(str::to_owned))
            .collect();
        assert!(
            states.starts_with(&[
                "preparing".to_owned(),
                "running".to_owned(),
                "publishing".to_owned()
            ]),
            "{states:?}"
        );
        let worktree = sb.root.join("worktrees/widgets").join(&job.id);
        let pwd = fs::read_to_string(sb.out().join(format!("pwd-{name}"))).expect("pwd");
        assert_eq!(
            pwd.trim(),
            worktree.display().to_string(),
            "ran in its own worktree"
        );
        let sha = job.str_field("result_ref").expect("result_ref").to_owned();
        let branch = format!("jobwarden/{}", job.id);
        let pushed = git(&sb.base.join("origin.git"), &["rev-parse", &branch]);
        assert_eq!(pushed, sha, "origin has {branch} at the published commit");
        let files = git(
            &sb.base.join("origin.git"),
            &["show", "--name-only", "--format=", &sha],
        );
        assert_eq!(files, format!("change-{name}.txt"));
        let row = sb.run(&["history", "show", &job.id, "--json"]);
        let row: serde_json::Value = serde_json::from_str(&row.stdout).expect("history json");
        assert_eq!(row["result_ref"], sha.as_str());
        shas.push(sha);
    }
    assert_ne!(shas[0], shas[1], "two branches, two commits");
}
