//! The promises of the tools jobwarden replaces (their requirement
//! documents), kept: the night-watch script interface with absolute
//! project paths, cooldowns as `retry --now` and the profiles leave them.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// Runs `args`, expects exit `code`, returns stdout parsed as JSON.
fn json(sb: &Sandbox, args: &[&str], code: i32) -> Value {
    let out = sb.run(args);
    assert_eq!(out.code(), code, "{args:?}: {out:?}");
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?} printed invalid JSON ({e}): {}", out.stdout))
}

fn array(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}"))
}

/// The original's own shell idiom (its cron helper and runner), with an
/// absolute project folder as scripts pass it: `check` exits 0 in
/// cooldown and 1 when eligible, `record` records; projects are apart.
#[test]
fn the_original_scripts_cooldown_idiom_works_with_absolute_project_paths() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/true"]));
    let project = sb.base.join("test-project");
    fs::create_dir_all(&project).expect("project folder");
    let bin_dir = Path::new(BIN).parent().expect("binary folder");
    // `night-watch` was the original's command; the scripts call it so.
    fs::create_dir_all(sb.base.join("bin")).expect("bin");
    std::os::unix::fs::symlink(BIN, sb.base.join("bin/night-watch")).expect("symlink");
    let script = r#"
set -u
max_runtime=7200
find_eligible_prd() {
  for prd_file in first.md second.md; do
    if night-watch history check "${PROJECT_DIR}" "${prd_file}" --cooldown "${max_runtime}" 2>/dev/null; then
      echo "SKIP-PRD: ${prd_file}"
      continue
    fi
    echo "ELIGIBLE: ${prd_file}"
    return 0
  done
  echo "NONE"
}
find_eligible_prd
night-watch history record "${PROJECT_DIR}" "first.md" failure --exit-code 1 && echo "recorded"
find_eligible_prd
night-watch history record "${PROJECT_DIR}" "second.md" timeout --exit-code 124
find_eligible_prd
night-watch history record "${PROJECT_DIR}" "first.md" success --exit-code 0
find_eligible_prd
night-watch history check "${OTHER_DIR}" "second.md" --cooldown "${max_runtime}"; echo "other: $?"
night-watch history check "${PROJECT_DIR}" "second.md"; echo "profile's cooldown: $?"
night-watch history check "relative/../x" "second.md" 2>/dev/null; echo "bad: $?"
"#;
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .env(
            "PATH",
            format!(
                "{}:{}:/usr/bin:/bin",
                sb.base.join("bin").display(),
                bin_dir.display()
            ),
        )
        .env("PROJECT_DIR", &project)
        .env("OTHER_DIR", sb.base.join("other-project"))
        .env("JOBWARDEN_HOME", &sb.root)
        .env("JOBWARDEN_CONFIG", &sb.config)
        .env_remove("RUST_LOG")
        .output()
        .expect("bash");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines,
        [
            "ELIGIBLE: first.md",
            "recorded",
            "SKIP-PRD: first.md",
            "ELIGIBLE: second.md",
            "SKIP-PRD: first.md",
            "SKIP-PRD: second.md",
            "NONE",
            "ELIGIBLE: first.md",
            "other: 1",
            // The default profile's cooldown (2 h) holds it too.
            "profile's cooldown: 0",
            "bad: 2",
        ],
        "{said}"
    );
    // Kept under the path as given, and listed so.
    let rows = json(
        &sb,
        &[
            "history",
            "list",
            "--project",
            project.to_str().expect("utf-8"),
            "--json",
        ],
        0,
    );
    assert_eq!(array(&rows).len(), 3, "{rows:#}");
    assert!(
        array(&rows)
            .iter()
            .all(|r| r["project"] == project.to_str().expect("utf-8"))
    );
}

/// After `retry --now` the prompt runs at once and is archived, and
/// nothing says it still waits for the old cooldown: not `status`, not
/// `jobs`, not `history check`.
#[test]
fn retry_now_leaves_no_trace_of_the_old_cooldown_once_the_prompt_ran() {
    let sb = Sandbox::new();
    // Fails on its first attempt, succeeds after.
    sb.configure(
        &ConfigToml::new(&["/bin/sh", "-c", "test \"$JOBWARDEN_ATTEMPT\" != 1"])
            .profile("cooldown", "\"1h\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "x", "first\n");
    let failed = sb.wait_done("proj", "x", secs(15));
    assert_eq!(failed.state(), "failed");
    // Dropped again within the cooldown: it waits.
    sb.drop_prompt("proj", "x", "again\n");
    wait_until("the new drop to be deferred", secs(10), || {
        let status = json(&sb, &["status", "--json"], 0);
        (array(&status["deferred"]).len() == 1).then_some(())
    });
    assert_eq!(sb.run(&["history", "check", "proj", "x"]).code(), 0);

    let out = sb.run(&["retry", "proj/x", "--now"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let retried = sb.wait_done_excluding("proj", "x", &[failed.id.clone()], secs(15));
    assert_eq!(retried.state(), "succeeded", "{:#}", retried.record);
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
    let status = json(&sb, &["status", "--json"], 0);
    assert!(array(&status["deferred"]).is_empty(), "{status:#}");
    let deferred = json(&sb, &["jobs", "--state", "deferred", "--json"], 1);
    assert!(array(&deferred).is_empty(), "{deferred:#}");
    assert_eq!(
        sb.run(&["history", "check", "proj", "x"]).code(),
        1,
        "eligible after a success"
    );
}
