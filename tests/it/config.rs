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
        assert!(
            !out.stdout.contains("warning"),
            "{}: {}",
            file.display(),
            out.stdout
        );
    }
}
