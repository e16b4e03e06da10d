//! Shell completion by the binary itself (`COMPLETE=SHELL jobwarden -- <words>`):
//! a `<job>` argument is completed with the root's jobs, by the short ids
//! tables show, and its prompt names; the root is the one the line names,
//! or the environment's; a root that is not there gives no candidates and
//! no noise.

use std::process::Command;

use crate::support::*;

/// `ok` succeeds at once; anything else runs until `$OUT/release` exists.
const GATED: &str = r#"case "$1" in
  ok) exit 0 ;;
esac
while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#;

/// What the shell would get for `words` (the line being completed, the
/// word under the cursor last), asked the way fish asks: value, tab, help.
fn complete(words: &[&str], env: &[(&str, &str)]) -> (Vec<String>, CliOutput) {
    let mut cmd = Command::new(BIN);
    cmd.arg("--")
        .arg("jobwarden")
        .args(words)
        .env("COMPLETE", "fish")
        .env_remove("JOBWARDEN_HOME")
        .env_remove("JOBWARDEN_CONFIG")
        .envs(env.iter().copied());
    let out = cmd.output().expect("run jobwarden");
    let out = CliOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    let values = out
        .stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap_or("").to_owned())
        .collect();
    (values, out)
}

fn short(id: &str) -> &str {
    &id[id.len() - 8..]
}

#[test]
fn a_job_argument_is_completed_with_the_roots_jobs_and_prompt_names() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "ok", "x\n");
    let ok = sb.wait_done("proj", "ok", secs(15));
    sb.drop_prompt("proj", "gated", "x\n");
    let live = sb.wait_state("proj", "gated", "running", secs(15));
    let root = sb.root.display().to_string();
    let config = sb.config.display().to_string();

    let (values, out) = complete(&["--root", &root, "--config", &config, "show", ""], &[]);
    assert!(out.status.success(), "{out:?}");
    for want in [short(&live.id), short(&ok.id), "proj/gated", "proj/ok"] {
        assert!(values.iter().any(|v| v == want), "{want} in {values:?}");
    }
    let first = values.iter().position(|v| v == short(&live.id));
    assert_eq!(first, Some(0), "the live job first: {values:?}");
    assert!(out.stdout.contains("\tproj/gated, live\n"), "{out:?}");
    assert!(out.stdout.contains("\tproj/ok, succeeded\n"), "{out:?}");

    // What is typed so far narrows them; every command taking a job does it.
    let (values, _) = complete(&["--root", &root, "abort", "proj/g"], &[]);
    assert_eq!(values, ["proj/gated"]);
    let (values, _) = complete(
        &["logs", "--follow", "proj/o"],
        &[("JOBWARDEN_HOME", &root)],
    );
    assert_eq!(values, ["proj/ok"], "the root from the environment");
    let (values, _) = complete(&[&format!("--root={root}"), "wait", short(&ok.id)], &[]);
    assert_eq!(values, [short(&ok.id)]);
    std::fs::write(sb.out().join("release"), "").expect("release");
}

#[test]
fn prompts_waiting_in_the_inbox_are_offered_before_any_daemon_ran() {
    let sb = Sandbox::new();
    sb.drop_prompt("acme/api", "fix-login", "x\n");
    let root = sb.root.display().to_string();

    let (values, out) = complete(&["--root", &root, "show", "acme/"], &[]);

    assert!(out.status.success(), "{out:?}");
    assert_eq!(values, ["acme/api/fix-login"], "{out:?}");
    assert!(
        !sb.root.join("ledger.db").exists(),
        "completing writes nothing"
    );
}

#[test]
fn a_root_that_is_not_there_gives_no_candidates_and_no_noise() {
    let sb = Sandbox::new();
    let missing = sb.base.join("no-such-root").display().to_string();

    let (values, out) = complete(&["--root", &missing, "show", ""], &[]);

    assert!(out.status.success(), "{out:?}");
    assert!(
        values.iter().all(|v| v.starts_with("--")),
        "only the flags: {values:?}"
    );
    assert_eq!(out.stderr, "", "{out:?}");
    assert!(!sb.base.join("no-such-root").exists(), "nothing created");
}

#[test]
fn bash_completes_a_job_through_the_installed_registration() {
    let sb = Sandbox::new();
    sb.drop_prompt("proj", "nightly", "x\n");
    let (code, script, stderr) = {
        let out = Command::new(BIN)
            .args(["completions", "bash"])
            .output()
            .expect("run jobwarden");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{stderr}");
    let registration = sb.base.join("jobwarden.bash");
    std::fs::write(&registration, script).expect("write the registration");
    // What bash does at a Tab after `jobwarden --root R show proj/n`.
    let line = format!(
        "source {reg}; COMP_WORDS=(jobwarden --root {root} show proj/n); COMP_CWORD=4; \
         _clap_complete_jobwarden jobwarden proj/n show; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        reg = registration.display(),
        root = sb.root.display(),
    );
    let bin_dir = std::path::Path::new(BIN).parent().expect("bin dir");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["--norc", "-c", &line])
        .env("PATH", path)
        .env_remove("JOBWARDEN_HOME")
        .output()
        .expect("run bash");
    let offered = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        offered.trim(),
        "proj/nightly",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
