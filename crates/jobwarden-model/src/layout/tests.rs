//! Tests of the layout's names and their validation.

use super::*;

#[test]
fn absolute_project_paths_are_history_keys_as_given() {
    for ok in ["/tmp/test-project", "/srv/repos/a b/", "proj/sub", ""] {
        assert_eq!(validate_history_project(ok), Ok(()), "{ok}");
    }
    assert!(validate_history_project("/tmp/x\nrm").is_err());
    assert!(validate_history_project(&format!("/{}", "a".repeat(5000))).is_err());
    assert!(validate_history_project("../up").is_err());
    assert!(is_external_project("/tmp/p") && !is_external_project("p"));
}

fn classify(rel: &str) -> InboxEntry {
    classify_inbox_path(Path::new("/r/inbox"), &Path::new("/r/inbox").join(rel))
}

#[test]
fn a_monitor_lock_names_its_job_only_under_this_root() {
    let layout = Layout::new(PathBuf::from("/nonexistent-root"));
    let id = JobId::parse("j1").expect("id");
    assert_eq!(
        layout.job_of_run_dir(&layout.monitor_lock(&id)),
        Some(id.clone())
    );
    let elsewhere = Path::new("/other/runs/j1");
    assert_eq!(layout.job_of_run_dir(elsewhere), None);
    assert_eq!(layout.job_of_run_dir(&layout.job_json(&id)), None);
    assert_eq!(layout.job_of_run_dir(&layout.job_workdir(&id)), None);
}

#[test]
fn only_a_cancel_or_an_unusable_name_claims_a_prompt_into_the_archive() {
    let layout = Layout::new(PathBuf::from("/r"));
    let prompt = PromptName {
        project: "p".into(),
        name: "n".into(),
    };
    let id = JobId::parse("j1").expect("id");
    for state in [JobState::Cancelled, JobState::Rejected] {
        let place = layout.archived_prompt(state, &prompt, &id);
        assert_eq!(
            layout.claimed_into_archive(&prompt, &place),
            Some(id.clone())
        );
    }
    let other = PromptName {
        project: "p".into(),
        name: "other".into(),
    };
    for not_a_claim in [
        layout.archived_prompt(JobState::Succeeded, &prompt, &id),
        layout.archived_prompt(JobState::Cancelled, &other, &id),
        layout.archived_prompt_alt(JobState::Cancelled, &prompt, &id, 2),
        layout.running_prompt(&prompt),
        PathBuf::from("/r/archive/cancelled/p/sub/n.j1.md"),
        PathBuf::from("/elsewhere/archive/cancelled/p/n.j1.md"),
    ] {
        assert_eq!(
            layout.claimed_into_archive(&prompt, &not_a_claim),
            None,
            "{}",
            not_a_claim.display()
        );
    }
}

#[test]
fn prompt_at_top_and_nested() {
    assert_eq!(
        classify("hello.prompt.md"),
        InboxEntry::Prompt(PromptName {
            project: "".into(),
            name: "hello".into()
        })
    );
    assert_eq!(
        classify("acme/api/fix bug.prompt.md"),
        InboxEntry::Prompt(PromptName {
            project: "acme/api".into(),
            name: "fix bug".into()
        })
    );
}

#[test]
fn ignores_non_candidates() {
    for rel in [
        "x.running.md",
        "x.prompt.md.tmp",
        ".x.prompt.md",
        ".git/x.prompt.md",
        "x.md",
        ".prompt.md",
    ] {
        assert_eq!(classify(rel), InboxEntry::Ignored, "{rel}");
    }
}

#[test]
fn invalid_names_are_reported_not_ignored() {
    for rel in ["bad\nname.prompt.md", "-rf.prompt.md", " x.prompt.md"] {
        assert!(
            matches!(classify(rel), InboxEntry::InvalidName { .. }),
            "{rel:?}"
        );
    }
}

#[test]
fn segment_rules() {
    assert!(validate_segment("ok-name_1.v2").is_ok());
    for bad in ["", ".", "..", "a/b", "a\0b", "x\n", "-x", &"a".repeat(201)] {
        assert!(validate_segment(bad).is_err(), "{bad:?}");
    }
    assert!(validate_project("a/b").is_ok());
    assert!(validate_project("a/../b").is_err());
    assert!(validate_project("/abs").is_err());
}

#[test]
fn record_paths_stay_under_inbox_or_archive() {
    assert!(validate_record_path("inbox/p/n.running.md").is_ok());
    assert!(validate_record_path("archive/failed/n.x.md").is_ok());
    for bad in [
        "/etc/passwd",
        "runs/x/job.json",
        "inbox/../../etc",
        "../inbox/x",
        "",
    ] {
        assert!(validate_record_path(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn submit_temporary_files_are_never_candidates() {
    let l = Layout::new("/r");
    let prompt = PromptName {
        project: "a/b".into(),
        name: "fix".into(),
    };
    let tmp = l.incoming_prompt(&prompt, 42);
    assert_eq!(classify_inbox_path(&l.inbox(), &tmp), InboxEntry::Ignored);
    assert_eq!(tmp.parent(), l.waiting_prompt(&prompt).parent());
}

#[test]
#[allow(clippy::disallowed_methods)] // fixtures
fn only_what_a_claim_writes_before_the_record_is_a_leftover() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = Layout::new(dir.path());
    let id = JobId::parse("left-1").expect("valid id");
    assert!(l.is_claim_leftover(&id).is_err(), "no folder at all");
    std::fs::create_dir_all(l.run_dir(&id)).expect("run dir");
    assert!(l.is_claim_leftover(&id).expect("empty"));
    for f in [l.prompt_copy(&id), l.prompt_body(&id), l.events(&id)] {
        std::fs::write(f, "x").expect("write");
    }
    std::fs::write(l.run_dir(&id).join(".job.json.1.0.tmp"), "{").expect("write");
    assert!(l.is_claim_leftover(&id).expect("early files only"));
    std::fs::write(
        l.events(&id),
        "{\"seq\":1,\"op\":\"queued\",\"record\":{}}\n",
    )
    .expect("write");
    assert!(
        !l.is_claim_leftover(&id)
            .expect("a journal line is a job's record")
    );
    std::fs::write(l.events(&id), "x").expect("write");
    std::fs::write(l.corrupt_record(&id, 1), "{").expect("write");
    assert!(
        !l.is_claim_leftover(&id)
            .expect("a set-aside record is a job's")
    );
    std::fs::remove_file(l.corrupt_record(&id, 1)).expect("rm");
    std::fs::write(l.job_json(&id), "{}").expect("write");
    assert!(!l.is_claim_leftover(&id).expect("a record is a job's"));
}

#[test]
fn retry_files_are_ignored_by_the_inbox() {
    let l = Layout::new("/r");
    let prompt = PromptName {
        project: "p".into(),
        name: "n".into(),
    };
    for path in [l.retry_request(&prompt), l.retry_temp(&prompt, "1-2")] {
        assert_eq!(classify_inbox_path(&l.inbox(), &path), InboxEntry::Ignored);
        assert_eq!(path.parent(), l.waiting_prompt(&prompt).parent());
    }
}

#[test]
fn a_retry_request_names_the_prompt_it_is_for() {
    let l = Layout::new("/r");
    let prompt = PromptName {
        project: "p/q".into(),
        name: "n".into(),
    };
    let request = l.retry_request(&prompt);
    assert_eq!(
        l.prompt_of_retry_request(&request),
        Some(l.waiting_prompt(&prompt))
    );
    for other in [
        l.retry_temp(&prompt, "1-2"),
        l.waiting_prompt(&prompt),
        l.inbox().join("p/..retry.json"),
        PathBuf::from("/elsewhere/.n.retry.json"),
    ] {
        assert_eq!(l.prompt_of_retry_request(&other), None, "{other:?}");
    }
}

#[test]
fn abort_marker_is_recognised_only_in_a_run_dir() {
    let l = Layout::new("/r");
    let id = JobId::parse("0190b6a0-0000-7000-8000-000000000000").expect("valid id");
    assert_eq!(l.abort_marker_job(&l.abort_marker(&id)), Some(id.clone()));
    assert_eq!(l.abort_marker_job(&l.inbox().join("ABORT")), None);
    assert_eq!(l.abort_marker_job(&l.job_json(&id)), None);
}

#[test]
fn a_sandboxed_workdir_may_be_the_jobs_own_or_outside_the_roots_records() {
    let l = Layout::new("/r");
    let id = JobId::parse("j1").expect("id");
    let own = l.job_workdir(&id);
    assert_eq!(l.sandbox_workdir(&id, &own), Ok(Some(own.clone())));
    assert_eq!(l.sandbox_workdir(&id, &own.join("sub")), Ok(Some(own)));
    assert_eq!(
        l.sandbox_workdir(&id, Path::new("/r/worktrees/p/j1")),
        Ok(Some(PathBuf::from("/r/worktrees/p")))
    );
    assert_eq!(
        l.sandbox_workdir(&id, Path::new("/r/scratch")),
        Ok(Some(PathBuf::from("/r/scratch")))
    );
    assert_eq!(l.sandbox_workdir(&id, Path::new("/srv/repo")), Ok(None));
    for refused in [
        "/r",
        "/r/archive/x",
        "/r/runs/j2/work",
        "/r/ledger.db-wal",
        "/r/inbox/p",
        "/r/a/../runs",
    ] {
        assert!(
            l.sandbox_workdir(&id, Path::new(refused)).is_err(),
            "{refused}"
        );
    }
}
