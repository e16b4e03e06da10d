//! What a job changed in the git checkout it worked in, recorded without
//! its help: tracked files modified and deleted, files created, files it
//! committed; not the files already changed before it started that it left
//! alone, nor ignored ones. `history who-touched` then answers for any
//! agent. Real git, real daemon, a real sandboxed job.

use std::fs;

use crate::support::*;

#[test]
fn the_files_a_job_changed_in_its_checkout_are_recorded_without_its_help() {
    let sb = Sandbox::new();
    let repo = sb.base.join("repo");
    fs::create_dir_all(&repo).expect("repo");
    git(&repo, &["init", "-q", "-b", "main"]);
    for (name, text) in [
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("c.txt", "c\n"),
        ("d.txt", "d\n"),
        (".gitignore", "*.log\n"),
    ] {
        fs::write(repo.join(name), text).expect("file");
    }
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "start"]);
    // Changed before the job: c left alone by it, d changed again.
    fs::write(repo.join("c.txt"), "c before the job\n").expect("dirt");
    fs::write(repo.join("d.txt"), "d before the job\n").expect("dirt");
    let job = sb.script(
        "edit",
        r#"cat >/dev/null
echo more >> a.txt
rm b.txt
echo new > new.txt
echo junk > x.log
echo again >> d.txt
echo e > e.txt
git add e.txt && git -c user.name=j -c user.email=j@j commit -qm e
echo done"#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &job])
            .profile("workdir", &q(&repo.display().to_string()))
            .profile("max_attempts", "1"),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "edit", "x\n");
    let done = sb.wait_done("p", "edit", secs(30));
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    let event = done
        .events()
        .into_iter()
        .find(|e| e["op"] == "changed_files")
        .expect("a changed_files event");
    assert_eq!(event["files"], 5, "a, b, new, d and e: {event}");
    assert_eq!(event["cut"], false);

    let touched = |name: &str| {
        let path = repo.join(name).display().to_string();
        let out = sb.run(&["history", "who-touched", &path]);
        out.stdout.contains(&done.id[done.id.len() - 8..])
    };
    for changed in ["a.txt", "b.txt", "new.txt", "d.txt", "e.txt"] {
        assert!(touched(changed), "{changed} is recorded as changed");
    }
    for left in ["c.txt", "x.log"] {
        assert!(!touched(left), "{left} is not");
    }
}
