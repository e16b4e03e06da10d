//! Config validation against the fixtures in `tests/fixtures/config/`: one
//! file per invalid case, whose first line says what the error must name.

use std::path::{Path, PathBuf};

use super::*;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/config")
}

#[test]
fn every_invalid_fixture_fails_naming_its_fault() {
    let dir = fixtures().join("invalid");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("fixture dir") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("fixture");
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{} lacks an '# expect:' first line", path.display()));
        let err = parse(&text, ConfigSource::File(path.clone()))
            .expect_err(&format!("{} must be rejected", path.display()));
        let msg = err.to_string();
        assert!(
            msg.contains(expect),
            "{}: error {msg:?} does not mention {expect:?}",
            path.display()
        );
        assert!(
            msg.contains(&path.display().to_string()),
            "error must name the file: {msg}"
        );
        seen += 1;
    }
    assert!(seen >= 15, "only {seen} invalid fixtures found");
}

#[test]
fn valid_fixture_gives_typed_values_and_inheritance() {
    let path = fixtures().join("valid.toml");
    let text = std::fs::read_to_string(&path).expect("fixture");
    let c = parse(&text, ConfigSource::File(path)).expect("valid");
    assert_eq!(c.max_jobs, 2);
    assert_eq!(c.heartbeat_interval, Duration::from_millis(250));
    assert_eq!(c.max_log_bytes, 4096);
    assert_eq!(c.max_prompt_bytes, 2 << 20);
    let review = &c.profiles["review"];
    assert_eq!(review.prompt_via, PromptVia::Arg);
    assert_eq!(
        review.timeout,
        Duration::from_secs(30 * 60),
        "inherits default's timeout"
    );
    assert_eq!(review.env_passthrough, vec!["SSH_AUTH_SOCK".to_owned()]);
    assert_eq!(review.workdir.source(), "{root}/work/{project}");
}

#[test]
fn empty_text_is_the_built_in_default() {
    let c = parse("", ConfigSource::BuiltIn).expect("defaults");
    assert_eq!(c.max_jobs, 4);
    assert_eq!(c.heartbeat_interval, Duration::from_secs(5));
    assert_eq!(c.abort_grace, Duration::from_secs(10));
    let p = c.default_profile();
    assert_eq!(p.timeout, Duration::from_secs(2 * 3600));
    assert_eq!(p.command[0].source(), "sh");
    assert_eq!(p.workdir.source(), "{job_workdir}");
}

#[test]
fn shown_config_parses_back_to_the_same_values() {
    let path = fixtures().join("valid.toml");
    let text = std::fs::read_to_string(&path).expect("fixture");
    let c = parse(&text, ConfigSource::File(path)).expect("valid");
    let again = parse(&c.to_toml(), ConfigSource::BuiltIn).expect("shown config is valid");
    assert_eq!(again.to_toml(), c.to_toml());
    assert_eq!(again.max_log_bytes, c.max_log_bytes);
}

#[test]
fn root_resolution_order() {
    let c = parse("root = \"/from/config\"", ConfigSource::BuiltIn).expect("valid");
    let mut env = Env {
        home: Some("/home/u".into()),
        ..Env::default()
    };
    let flag = Choices {
        root: Some("/from/flag".into()),
        ..Choices::default()
    };
    assert_eq!(
        resolve_root(&flag, &env, &c).expect("flag"),
        PathBuf::from("/from/flag")
    );
    env.jobwarden_home = Some("/from/env".into());
    let none = Choices::default();
    assert_eq!(
        resolve_root(&none, &env, &c).expect("env"),
        PathBuf::from("/from/env")
    );
    env.jobwarden_home = None;
    assert_eq!(
        resolve_root(&none, &env, &c).expect("config"),
        PathBuf::from("/from/config")
    );
    let bare = parse("", ConfigSource::BuiltIn).expect("defaults");
    assert_eq!(
        resolve_root(&none, &env, &bare).expect("xdg"),
        PathBuf::from("/home/u/.local/share/jobwarden")
    );
    env.is_root = true;
    assert_eq!(
        resolve_root(&none, &env, &bare).expect("root"),
        PathBuf::from("/var/lib/jobwarden")
    );
}

#[test]
fn explicit_config_must_exist() {
    let g = Choices {
        config: Some("/nonexistent/jobwarden.toml".into()),
        ..Choices::default()
    };
    let err = config_path(&g, &Env::default()).expect_err("missing");
    assert!(
        err.to_string().contains("/nonexistent/jobwarden.toml"),
        "{err}"
    );
}

#[test]
fn handover_round_trips_and_refuses_partial_frames() {
    for text in [
        "",
        "max_jobs = 2\n[profiles.default]\ncommand = [\"true\"]\n",
    ] {
        let framed = encode_handover(text);
        assert_eq!(decode_handover(&framed), Ok(text));
        if !text.is_empty() {
            assert!(
                decode_handover(&framed[..framed.len() - 3]).is_err(),
                "cut frame"
            );
        }
    }
    assert!(
        decode_handover(b"").is_err(),
        "nothing at all is not the built-in config"
    );
    assert!(decode_handover(b"max_jobs = 2\n").is_err(), "unframed text");
}

fn config(text: &str) -> Config {
    parse(text, ConfigSource::BuiltIn).unwrap_or_else(|e| panic!("{text}\n{e}"))
}

#[test]
fn profiles_inherit_phases_from_default_unless_they_set_their_own() {
    let c = config(
        "[profiles.default]\ncommand = [\"a\"]\nprepare = { command = [\"prep\"], timeout = \"1m\" }\n\
         [profiles.same]\n\
         [profiles.own]\nprepare = { command = [\"mine\"] }\npublish = { command = [\"pub\"] }\n",
    );
    let same = &c.profiles["same"];
    assert_eq!(same.command[0].source(), "a");
    let prep = same.prepare.as_ref().expect("inherited prepare");
    assert_eq!(prep.command[0].source(), "prep");
    assert_eq!(prep.timeout, Duration::from_secs(60));
    assert!(same.publish.is_none());
    let own = &c.profiles["own"];
    assert_eq!(
        own.prepare.as_ref().expect("own").command[0].source(),
        "mine"
    );
    assert_eq!(
        own.prepare.as_ref().expect("own").timeout,
        Duration::from_secs(600)
    );
    assert!(own.publish.is_some());
}

#[test]
fn selection_follows_the_first_matching_route_and_front_matter() {
    let c = config(
        "[profiles.default]\ncommand = [\"a\"]\n[profiles.repo]\ncommand = [\"r\", \"{repo}\"]\n\
         [profiles.plain]\ncommand = [\"p\"]\n\
         [[route]]\nmatch = \"docs/**\"\nprofile = \"plain\"\n\
         [[route]]\nmatch = \"{repo}/**\"\nprofile = \"repo\"\n",
    );
    let s = c.select("docs/api", None).expect("docs");
    assert_eq!(s.profile.name, "plain");
    assert_eq!(s.route.map(|(i, _)| i), Some(0));
    let s = c.select("api/main", None).expect("repo");
    assert_eq!(s.profile.name, "repo");
    assert_eq!(s.captures["repo"], "api");
    let s = c.select("", None).expect("top");
    assert_eq!(s.profile.name, "default");
    assert!(s.route.is_none());
    // Front matter may pick another profile, but not one needing captures
    // its route does not give.
    assert_eq!(
        c.select("api", Some("plain")).expect("plain").profile.name,
        "plain"
    );
    let err = c
        .select("", Some("repo"))
        .expect_err("no capture at the top");
    assert!(
        err.contains("{repo}") && err.contains("no route matches"),
        "{err}"
    );
    let err = c.select("api", Some("ghost")).expect_err("unknown profile");
    assert!(err.contains("\"ghost\" is not defined"), "{err}");
}

#[test]
fn every_problem_of_a_file_is_reported_once_with_its_key() {
    let text = r#"max_jbos = 4
heartbeat_interval = "soon"
max_jobs = "four"
[profiles.default]
command = []
timeout = "0s"
[profiles.review]
prompt_via = "pigeon"
limits = { memory = "1KiB" }
[[route]]
match = "{repo}/**"
profile = "ghost"
workdir = "/srv/{nope}"
[[route]]
match = "docs/**"
"#;
    let err = parse(text, ConfigSource::BuiltIn).expect_err("invalid");
    let mut keys: Vec<&str> = err.problems.iter().map(|p| p.key.as_str()).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "heartbeat_interval",
            "max_jbos",
            "max_jobs",
            "profiles.default.command",
            "profiles.default.timeout",
            "profiles.review.limits.memory",
            "profiles.review.prompt_via",
            "route[0].profile",
            "route[0].workdir",
        ],
        "{err}"
    );
    let shown = err.to_string();
    assert!(shown.contains("9 problems"), "{shown}");
    assert!(
        shown.contains(r#"max_jobs = "four": must be a whole number"#),
        "{shown}"
    );
    assert!(shown.contains(r#"heartbeat_interval = "soon""#), "{shown}");
    assert!(
        shown.contains(r#"profiles.review.prompt_via = "pigeon""#),
        "{shown}"
    );
}

#[test]
fn a_route_without_match_or_with_a_bad_pattern_is_named_by_position() {
    let err = parse(
        "[[route]]\nprofile = \"default\"\n[[route]]\nmatch = \"**/x\"\n",
        ConfigSource::BuiltIn,
    )
    .expect_err("invalid");
    let keys: Vec<&str> = err.problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["route[0]", "route[1].match"], "{err}");
    assert!(
        err.problems[0]
            .message
            .contains("route #1: `match` is missing")
    );
}

#[test]
fn limits_and_shared_workdir_are_typed_inherited_and_shown() {
    let c = config(
        "[profiles.default]\nmax_jobs = 3\n\n[profiles.review]\nshared_workdir = true\n\n[profiles.solo]\nmax_jobs = 1\n\n[[route]]\nmatch = \"{repo}/**\"\nprofile = \"review\"\nmax_jobs = 2\nshared_workdir = false\n",
    );
    assert_eq!(c.profiles["default"].max_jobs, Some(3));
    assert_eq!(c.profiles["review"].max_jobs, Some(3), "inherited");
    assert!(c.profiles["review"].shared_workdir);
    assert!(!c.profiles["default"].shared_workdir);
    assert_eq!(c.profiles["solo"].max_jobs, Some(1));
    assert_eq!(c.routes[0].max_jobs, Some(2));
    assert_eq!(c.routes[0].shared_workdir, Some(false));
    let shown = c.to_toml();
    let again = config(&shown);
    assert_eq!(again.routes[0].max_jobs, Some(2), "{shown}");
    assert_eq!(again.routes[0].shared_workdir, Some(false), "{shown}");
    assert!(again.profiles["review"].shared_workdir, "{shown}");
    assert_eq!(again.profiles["solo"].max_jobs, Some(1), "{shown}");
    assert_eq!(config("").profiles["default"].max_jobs, None);
}

#[test]
fn a_slurm_profile_gets_its_options_and_passes_the_executor_on() {
    let text = r#"
slurm_poll_interval = "500ms"
[profiles.default]
executor = "slurm"
timeout = "2h"
[profiles.default.slurm]
partition = "batch"
cpus = 4
memory = "16G"
time_limit = "3h"
sbatch_args = ["--qos=high"]
batch_dir = "/shared/jw"
[profiles.inherits]
command = ["true"]
[profiles.here]
executor = "local"
"#;
    let c = parse(text, ConfigSource::BuiltIn).expect("valid");
    assert_eq!(c.slurm_poll_interval, Duration::from_millis(500));
    let o = c.profiles["default"]
        .executor
        .slurm()
        .expect("slurm")
        .clone();
    assert_eq!(o.partition.as_deref(), Some("batch"));
    assert_eq!(o.cpus, Some(4));
    assert_eq!(o.memory.as_deref(), Some("16G"));
    assert_eq!(o.time_limit, Some(Duration::from_secs(3 * 3600)));
    assert_eq!(o.sbatch_args, ["--qos=high"]);
    assert_eq!(o.batch_dir.as_deref(), Some(Path::new("/shared/jw")));
    assert_eq!(
        c.profiles["inherits"].executor,
        c.profiles["default"].executor
    );
    assert_eq!(c.profiles["here"].executor, Executor::Local);
    assert!(c.uses_slurm());
    let shown = c.to_toml();
    let again = parse(&shown, ConfigSource::BuiltIn).expect("shown parses");
    assert_eq!(
        again.profiles["default"].executor,
        c.profiles["default"].executor
    );
    assert_eq!(again.slurm_poll_interval, c.slurm_poll_interval);
}
