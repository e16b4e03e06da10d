//! `jobwarden config check` and `config show` as whole processes.

use std::fs;
use std::path::Path;

use crate::support::*;

fn check(sb: &Sandbox, toml: &str) -> CliOutput {
    sb.write_config(toml);
    sb.run(&["config", "check"])
}

#[test]
fn config_check_accepts_a_complete_valid_config() {
    let sb = Sandbox::new();
    let out = check(
        &sb,
        r#"max_jobs = 3
heartbeat_interval = "200ms"
rescan_interval = "1s"
settle = "200ms"
abort_grace = "5s"
max_prompt_bytes = "1MiB"
max_log_bytes = 4096
shutdown = "detach"
events = true

[profiles.default]
command = ["codex", "exec", "--cd", "{workdir}", "{job_id}", "{run_dir}", "{prompt_file}", "{project}", "{name}", "{attempt}", "{root}", "-"]
prompt_via = "stdin"
workdir = "/srv/work"
timeout = "30m"
env = { CODEX_HOME = "/srv/codex" }
env_passthrough = ["SSH_AUTH_SOCK"]

[profiles.file]
command = ["cat", "{prompt_file}"]
prompt_via = "file"

[profiles.arg]
command = ["claude", "-p"]
prompt_via = "arg"
"#,
    );
    assert_eq!(out.code(), 0, "valid config: {out:?}");
}

#[test]
fn config_check_names_an_unknown_top_level_key() {
    let sb = Sandbox::new();
    let out = check(&sb, "max_jbos = 4\n");
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("max_jbos"),
        "names the key: {}",
        out.stderr
    );
}

#[test]
fn config_check_names_an_unknown_profile_key() {
    let sb = Sandbox::new();
    let out = check(&sb, "[profiles.default]\ncomand = [\"true\"]\n");
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("comand"),
        "names the key: {}",
        out.stderr
    );
}

#[test]
fn config_check_names_a_bad_duration() {
    let sb = Sandbox::new();
    let out = check(&sb, "abort_grace = \"5 parsecs\"\n");
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("abort_grace") || out.stderr.contains("5 parsecs"),
        "names the key or value: {}",
        out.stderr
    );
}

#[test]
fn config_check_names_a_bad_size() {
    let sb = Sandbox::new();
    let out = check(&sb, "max_log_bytes = \"lots\"\n");
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("max_log_bytes") || out.stderr.contains("lots"),
        "{}",
        out.stderr
    );
}

#[test]
fn config_check_names_a_bad_prompt_via() {
    let sb = Sandbox::new();
    let out = check(
        &sb,
        "[profiles.default]\ncommand = [\"true\"]\nprompt_via = \"carrier-pigeon\"\n",
    );
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("carrier-pigeon") || out.stderr.contains("prompt_via"),
        "{}",
        out.stderr
    );
}

#[test]
fn config_check_reports_a_missing_explicit_config_file() {
    let sb = Sandbox::new();
    // No config written: --config points at a file that does not exist.
    let out = sb.run(&["config", "check"]);
    assert_eq!(
        out.code(),
        2,
        "an explicit --config that is missing is an error: {out:?}"
    );
    assert!(
        out.stderr.contains(&*sb.config.to_string_lossy()),
        "names the path: {}",
        out.stderr
    );
}

/// Every invalid fixture of the project fails `config check` with exit 2 and
/// the text its `# expect:` line promises.
#[test]
fn config_check_rejects_every_invalid_fixture() {
    let sb = Sandbox::new();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config/invalid");
    let Ok(entries) = fs::read_dir(&dir) else {
        panic!("no fixtures at {}", dir.display());
    };
    let mut failures = Vec::new();
    let mut count = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let text = fs::read_to_string(&path).expect("read fixture");
        let expect = text
            .lines()
            .find_map(|l| l.strip_prefix("# expect:"))
            .map(str::trim)
            .unwrap_or("");
        count += 1;
        let out = check(&sb, &text);
        if out.status.code() != Some(2) || !out.stderr.contains(expect) {
            failures.push(format!(
                "{}: exit {:?}, expected stderr to contain {expect:?}, got {:?}",
                path.display(),
                out.status.code(),
                out.stderr
            ));
        }
    }
    assert!(count > 0, "fixtures found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Limits are validated, inherited as a table, and shown as they were
/// meant (sizes and durations in human units), in a config that checks.
#[test]
fn config_show_prints_profile_limits_which_check_again() {
    let sb = Sandbox::new();
    sb.write_config(
        "[profiles.default]\ncommand = [\"true\"]\nlimits = { memory = \"2048MiB\", cpu_time = \"1500ms\", open_files = 1024 }\n\n[profiles.other]\ncommand = [\"true\"]\n",
    );
    let out = sb.run(&["config", "show"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let shown: toml::Value = toml::from_str(&out.stdout).expect("show prints TOML");
    for profile in ["default", "other"] {
        let limits = &shown["profiles"][profile]["limits"];
        assert_eq!(
            limits["memory"].as_str(),
            Some("2GiB"),
            "{profile}: {limits}"
        );
        assert_eq!(
            limits["cpu_time"].as_str(),
            Some("2s"),
            "rounded up: {limits}"
        );
        assert_eq!(limits["open_files"].as_integer(), Some(1024), "{limits}");
        assert!(
            limits.get("processes").is_none(),
            "unset stays unset: {limits}"
        );
    }
    let again = check(&sb, &out.stdout);
    assert_eq!(again.code(), 0, "{again:?}");
}

#[test]
fn config_check_accepts_the_valid_fixture() {
    let sb = Sandbox::new();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config/valid.toml");
    let text = fs::read_to_string(&path).expect("valid fixture");
    let out = check(&sb, &text);
    assert_eq!(out.code(), 0, "{out:?}");
}

#[test]
fn config_show_prints_the_effective_config_which_checks_clean() {
    let sb = Sandbox::new();
    sb.write_config("max_jobs = 3\n\n[profiles.default]\ncommand = [\"true\"]\n");
    let out = sb.run(&["config", "show"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let has_line = |key: &str, value: &str| {
        out.stdout.lines().any(|l| {
            let l = l.trim();
            l.starts_with(key) && l[key.len()..].trim_start().starts_with('=') && l.contains(value)
        })
    };
    assert!(
        has_line("max_jobs", "3"),
        "max_jobs = 3 in:\n{}",
        out.stdout
    );
    for key in [
        "heartbeat_interval",
        "abort_grace",
        "max_log_bytes",
        "max_prompt_bytes",
    ] {
        assert!(
            out.stdout.lines().any(|l| l.trim_start().starts_with(key)),
            "default for {key} filled in:\n{}",
            out.stdout
        );
    }

    // What `show` prints is itself a valid config.
    let again = check(&sb, &out.stdout);
    assert_eq!(
        again.code(),
        0,
        "config show output must pass config check: {}\n{}",
        again.stderr,
        out.stdout
    );
}

/// The ready-made examples operators copy must load as they are.
#[test]
fn config_check_accepts_every_shipped_example() {
    let sb = Sandbox::new();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut files = vec![dir.join("config.toml")];
    for entry in std::fs::read_dir(dir.join("examples")).expect("config/examples") {
        files.push(entry.expect("entry").path());
    }
    assert!(files.len() >= 3, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("example");
        sb.write_config(&text);
        let out = sb.run(&["config", "check"]);
        assert_eq!(out.code(), 0, "{}: {}", file.display(), out.stderr);
        // Programs and folders this machine lacks are warned about; the
        // config itself must draw no warning (overlapping routes).
        assert!(
            !out.stderr.contains("overlaps"),
            "{}: {}",
            file.display(),
            out.stderr
        );
    }
}

/// Three faults of different kinds in one file: all three are named, each
/// with its key and value, in one run.
#[test]
fn config_check_reports_every_problem_at_once() {
    let sb = Sandbox::new();
    let out = check(
        &sb,
        "max_jbos = 4\nabort_grace = \"5 parsecs\"\n\n[profiles.default]\ncommand = [\"true\"]\n\n\
         [[route]]\nmatch = \"{repo}/**\"\nprofile = \"ghost\"\n",
    );
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stdout.is_empty(), "nothing on stdout: {out:?}");
    for expected in [
        "3 problems",
        "max_jbos: unknown key \"max_jbos\"; did you mean \"max_jobs\"?",
        "abort_grace = \"5 parsecs\": not a duration",
        "route #1 (match = \"{repo}/**\"): profile \"ghost\" is not defined",
    ] {
        assert!(
            out.stderr.contains(expected),
            "stderr lacks {expected:?}:\n{}",
            out.stderr
        );
    }
}

/// The daemon refuses the same config with the same list, before it
/// touches the root.
#[test]
fn daemon_refuses_an_invalid_config_naming_every_problem() {
    let sb = Sandbox::new();
    sb.write_config("max_jobs = 0\nsettle = 3\n[profiles.default]\ncommand = []\n");
    let out = sb.run(&["daemon"]);
    assert_eq!(out.code(), 2, "{out:?}");
    for expected in [
        "3 problems",
        "max_jobs = 0: must be between 1 and 4096",
        "settle = 3: must be a duration",
        "profiles.default.command: must name a program",
    ] {
        assert!(
            out.stderr.contains(expected),
            "{expected:?}:\n{}",
            out.stderr
        );
    }
    assert!(
        !sb.root.join("daemon.json").exists(),
        "a refused daemon wrote daemon.json"
    );
}

/// A valid config naming a program that is not on PATH and folders that
/// do not exist passes (exit 0) with a warning for each, on stderr; once
/// they exist, the warnings are gone.
#[test]
fn config_check_warns_about_missing_programs_and_workdirs() {
    let sb = Sandbox::new();
    let program = sb.base.join("bin/jw-agent");
    let workdir = sb.base.join("work");
    let repos = sb.base.join("repos");
    sb.write_config(&format!(
        "[profiles.default]\ncommand = [\"jw-agent\", \"-\"]\nworkdir = {}\nenv = {{ PATH = {} }}\n\n\
         [profiles.repo]\ncommand = [{}]\n\n\
         [[route]]\nmatch = \"{{repo}}/**\"\nprofile = \"repo\"\nworkdir = {}\n",
        q(&workdir.display().to_string()),
        q(&sb.base.join("bin").display().to_string()),
        q(&program.display().to_string()),
        q(&format!("{}/{{repo}}", repos.display())),
    ));
    let out = sb.run(&["config", "check"]);
    assert_eq!(out.code(), 0, "warnings do not fail the check: {out:?}");
    assert!(out.stdout.starts_with("config OK"), "{out:?}");
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    for expected in [
        "warning: profiles.default.command: program \"jw-agent\" not found on PATH",
        &format!(
            "warning: profiles.repo.command: program {} does not exist",
            program.display()
        ),
        &format!(
            "warning: profiles.default.workdir: workdir {} does not exist",
            workdir.display()
        ),
        &format!(
            "warning: route[0].workdir: {}/ does not exist",
            repos.display()
        ),
    ] {
        assert!(
            warnings.iter().any(|w| w.starts_with(expected)),
            "no warning {expected:?} in:\n{}",
            out.stderr
        );
    }
    assert!(
        !out.stdout.contains("warning"),
        "warnings go to stderr: {}",
        out.stdout
    );

    fs::write(&program, "#!/bin/sh\n").expect("write program");
    fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    fs::create_dir_all(&workdir).expect("workdir");
    fs::create_dir_all(&repos).expect("repos");
    let out = sb.run(&["config", "check"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
}

/// `config check --json`: the problems, or the warnings, as data on stdout.
#[test]
fn config_check_json_lists_problems_and_warnings_by_key() {
    let sb = Sandbox::new();
    sb.write_config("max_jobs = -1\nevents = \"yes\"\n");
    let out = sb.run(&["config", "check", "--json"]);
    assert_eq!(out.code(), 2, "{out:?}");
    let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON on stdout");
    assert_eq!(report["valid"], false);
    assert_eq!(report["source"], sb.config.display().to_string());
    let keys: Vec<&str> = report["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["key"].as_str())
        .collect();
    assert_eq!(keys, ["max_jobs", "events"], "{report}");
    assert!(
        report["errors"][1]["message"]
            .as_str()
            .is_some_and(|m| m.contains("events = \"yes\": must be true or false")),
        "{report}"
    );

    sb.write_config("[profiles.default]\ncommand = [\"jw-no-such-agent\"]\n");
    let out = sb.run(&["config", "check", "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON on stdout");
    assert_eq!(report["valid"], true);
    assert_eq!(report["root"], sb.root.display().to_string());
    assert_eq!(report["errors"], serde_json::json!([]));
    assert_eq!(
        report["warnings"][0]["key"], "profiles.default.command",
        "{report}"
    );
    assert!(
        out.stderr.is_empty(),
        "--json says it all on stdout: {}",
        out.stderr
    );
}
