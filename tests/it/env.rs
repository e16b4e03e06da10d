//! What a job's process sees: a clean environment with the JOBWARDEN_*
//! variables, its working directory and how the prompt reaches it.

use std::collections::BTreeMap;
use std::fs;

use crate::support::*;

/// `KEY=value` lines of a job log that printed `env`.
fn env_of(log: &str) -> BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn job_environment_is_clean_but_carries_job_variables() {
    let sb = Sandbox::new();
    let script = sb.script("env", "env");
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .env("PROFILE_VAR", "from-profile")
            .profile("env_passthrough", "[\"PASS_ME\"]"),
    );
    let _d = Daemon::start_with_env(
        &sb,
        &[("SECRET_TOKEN", "x-secret"), ("PASS_ME", "passed-through")],
    );
    sb.drop_prompt("envproj", "show-env", "print the environment\n");

    let job = sb.wait_done("envproj", "show-env", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let log = job.log();
    let env = env_of(&log);
    assert!(
        !env.contains_key("SECRET_TOKEN"),
        "daemon env leaked into the job:\n{log}"
    );
    assert!(
        !log.contains("x-secret"),
        "daemon env leaked into the job:\n{log}"
    );
    assert!(env.contains_key("PATH"), "PATH is set:\n{log}");
    assert_eq!(env.get("JOBWARDEN_JOB_ID"), Some(&job.id), "{log}");
    let run_dir = sb.run_dir(&job.id).to_string_lossy().into_owned();
    assert_eq!(env.get("JOBWARDEN_RUN_DIR"), Some(&run_dir), "{log}");
    let work_dir = format!("{run_dir}/work");
    assert_eq!(
        env.get("JOBWARDEN_ATTEMPT").map(String::as_str),
        Some("1"),
        "{log}"
    );
    assert_eq!(
        env.get("JOBWARDEN_PROJECT").map(String::as_str),
        Some("envproj"),
        "{log}"
    );
    assert!(env.contains_key("JOBWARDEN_PROMPT_FILE"), "{log}");
    assert_eq!(
        env.get("PROFILE_VAR").map(String::as_str),
        Some("from-profile"),
        "{log}"
    );
    assert_eq!(
        env.get("PASS_ME").map(String::as_str),
        Some("passed-through"),
        "{log}"
    );
    for (key, value) in [
        ("GIT_TERMINAL_PROMPT", "0"),
        ("JOBWARDEN_PHASE", "run"),
        ("JOBWARDEN_WORKDIR", work_dir.as_str()),
        ("JOBWARDEN_NAME", "show-env"),
    ] {
        assert_eq!(
            env.get(key).map(String::as_str),
            Some(value),
            "{key}: {log}"
        );
    }
}

#[test]
fn a_job_starts_with_sigpipe_default_nothing_blocked_in_its_own_group_even_without_a_shebang() {
    // In its sandbox (the job's own pid namespace, under its init) and
    // without one, the same start.
    for sandbox in [true, false] {
        starts_clean(sandbox);
    }
}

fn starts_clean(sandbox: bool) {
    let sb = Sandbox::new();
    // No `#!` line: the kernel refuses it and it runs under /bin/sh, as
    // execvp runs it.
    let program = sb.base.join("no-shebang");
    install_program(
        &program,
        // Read with builtins only: a shell blocks every signal while it
        // forks a command, which a `grep` of its status could catch.
        "while read -r key value; do case $key in SigIgn:|SigBlk:) echo \"$key $value\";; esac; done < /proc/$$/status\n\
         echo \"pgrp=$(cut -d' ' -f5 /proc/$$/stat) pid=$$\"\n",
    );
    sb.configure(
        &ConfigToml::new(&[&program.to_string_lossy()]).profile("sandbox", &sandbox.to_string()),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "signals", "x\n");

    let job = sb.wait_done("proj", "signals", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let log = job.log();
    let mask = |name: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {name} line:\n{log}"))
    };
    // SIGPIPE, which the monitor ignores, is the default again (what the
    // daemon was started ignoring stays ignored, as across any exec).
    assert_eq!(
        mask("SigIgn:") & (1 << (13 - 1)),
        0,
        "SIGPIPE ignored:\n{log}"
    );
    assert_eq!(mask("SigBlk:"), 0, "signals blocked:\n{log}");
    let ids = log
        .lines()
        .find_map(|l| l.strip_prefix("pgrp="))
        .and_then(|l| l.split_once(" pid="))
        .unwrap_or_else(|| panic!("no pgrp line:\n{log}"));
    assert_eq!(ids.0, ids.1, "the job leads its own process group:\n{log}");
    if sandbox {
        // The record's pid is its init's, outside the job's namespace.
        assert_ne!(job.record["pid"].as_i64(), Some(2), "{:#}", job.record);
        return;
    }
    assert_eq!(
        job.record["pgid"]
            .as_i64()
            .map(|p| p.to_string())
            .as_deref(),
        Some(ids.1)
    );
}

#[test]
fn workdir_defaults_to_the_jobs_own_folder_inside_the_run_dir() {
    let sb = Sandbox::new();
    let script = sb.script("pwd", "pwd -P");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "where", "where am I\n");
    let job = sb.wait_done("proj", "where", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let expected = sb
        .run_dir(&job.id)
        .join("work")
        .canonicalize()
        .expect("work dir");
    assert_eq!(job.log().trim(), expected.to_string_lossy());
}

#[test]
fn configured_workdir_with_placeholders_is_used() {
    let sb = Sandbox::new();
    let script = sb.script("pwd", "pwd -P");
    let work = sb.base.join("work");
    fs::create_dir_all(work.join("proj")).expect("workdir");
    let workdir = format!("{}/{{project}}", work.display());
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).profile("workdir", &q(&workdir)));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "where", "where am I\n");
    let job = sb.wait_done("proj", "where", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(job.log().trim(), work.join("proj").to_string_lossy());
}

#[test]
fn prompt_via_file_passes_the_path_and_stdin_is_empty() {
    let sb = Sandbox::new();
    let script = sb.script(
        "readfile",
        r#"echo "file:"; cat "$1"; echo; echo "stdin:"; cat; echo "end""#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script, "{prompt_file}"]).profile("prompt_via", "\"file\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "viafile", "the prompt body\n");
    let job = sb.wait_done("proj", "viafile", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    let log = job.log();
    let (file_part, stdin_part) = log.split_once("stdin:").expect("both sections");
    assert!(file_part.contains("the prompt body"), "{log}");
    assert_eq!(
        stdin_part.trim(),
        "end",
        "stdin is empty (/dev/null): {log:?}"
    );
}
