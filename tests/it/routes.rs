//! Profiles, routes and front matter: prompts routed by their folder with
//! captures into a profile's argv and workdir, `config check` catching
//! unknown placeholders and unreachable routes (and naming overlaps),
//! `jobwarden route` showing what a path would get, front matter
//! overriding the profile and its settings (or rejecting the prompt), and
//! priorities ordering the queue.

use std::fs;

use serde_json::Value;

use crate::support::*;

/// `[profiles.<name>]` running a shell script body, with raw TOML extras.
fn profile(name: &str, script: &str, extra: &str) -> String {
    format!(
        "[profiles.{name}]\ncommand = {}\n{extra}\n",
        q_argv(&["/bin/sh", script, "{name}"])
    )
}

fn check(sb: &Sandbox, toml: &str) -> CliOutput {
    sb.write_config(toml);
    sb.run(&["config", "check"])
}

#[test]
fn prompts_are_routed_by_folder_with_captures_in_argv_and_workdir() {
    let sb = Sandbox::new();
    let tell = sb.script(
        "tell",
        r#"echo "profile=$1 args=$2,$3 pwd=$(pwd) branch=$WANTED_BRANCH""#,
    );
    let work = sb.base.join("work/api");
    fs::create_dir_all(&work).expect("workdir");
    let cfg = ConfigToml::new(&["cat"]).extra(&format!(
        "[profiles.review]\ncommand = {}\n\n[[route]]\nmatch = \"{{repo}}/{{branch}}/**\"\nprofile = \"review\"\nworkdir = {}\nenv = {{ WANTED_BRANCH = \"{{branch}}\" }}\n",
        q_argv(&["/bin/sh", &tell, "review", "{repo}", "{branch}"]),
        q(&format!("{}/work/{{repo}}", sb.base.display()))
    ));
    sb.configure(&cfg);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("api/main", "fix", "routed\n");
    sb.drop_prompt("", "top", "not routed\n");
    let routed = sb.wait_done("api/main", "fix", secs(15));
    assert_eq!(routed.state(), "succeeded", "{:#}", routed.record);
    assert_eq!(routed.str_field("profile"), Some("review"));
    assert_eq!(routed.str_field("route"), Some("{repo}/{branch}/**"));
    assert_eq!(routed.record["captures"]["repo"], "api");
    assert_eq!(routed.record["captures"]["branch"], "main");
    assert_eq!(
        routed.log().trim(),
        format!(
            "profile=review args=api,main pwd={} branch=main",
            work.display()
        )
    );
    let top = sb.wait_done("", "top", secs(15));
    assert_eq!(top.str_field("profile"), Some("default"));
    assert_eq!(top.record["route"], Value::Null);
    assert_eq!(top.log(), "not routed\n", "the default profile ran `cat`");
}

#[test]
fn config_check_catches_unknown_placeholders_and_unreachable_routes_and_names_overlaps() {
    let sb = Sandbox::new();
    let base = ConfigToml::new(&["cat"]).render(&sb.base);
    let cases = [
        (
            "[profiles.x]\ncommand = [\"echo\", \"{repo}\"]\n",
            "unknown placeholder {repo}",
        ),
        (
            "[profiles.x]\ncommand = [\"echo\", \"{repo}\"]\n[[route]]\nmatch = \"{owner}/**\"\nprofile = \"x\"\n",
            "does not capture",
        ),
        (
            "[[route]]\nmatch = \"{repo}/**\"\n[[route]]\nmatch = \"{repo}/main/**\"\n",
            "can never match",
        ),
        (
            "[[route]]\nmatch = \"a/**\"\nprofile = \"nope\"\n",
            "\"nope\" is not defined",
        ),
        ("[[route]]\nmatch = \"**/a\"\n", "'**' may only come last"),
        (
            "[[route]]\nmatch = \"{repo}\"\nworkdir = \"/srv/{branch}\"\n",
            "{branch}",
        ),
        (
            "[profiles.x]\nprepare = { command = [] }\n",
            "prepare.command: must name a program",
        ),
        (
            "[profiles.x]\npublish = { command = [\"p\"], timeout = \"soon\" }\n",
            "publish.timeout",
        ),
    ];
    for (extra, needle) in cases {
        let out = check(&sb, &format!("{base}\n{extra}"));
        assert_eq!(out.code(), 2, "{extra}: {}", out.stdout);
        assert!(out.stderr.contains(needle), "{extra}: {}", out.stderr);
    }
    let out = check(
        &sb,
        &format!("{base}\n[[route]]\nmatch = \"api/**\"\n[[route]]\nmatch = \"{{repo}}/main\"\n"),
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    // A warning, on stderr: stdout has only the summary.
    assert!(
        out.stderr.contains("warning: route #2") && out.stderr.contains("overlaps route #1"),
        "{}",
        out.stderr
    );
    assert!(!out.stdout.contains("warning"), "{}", out.stdout);
}

#[test]
fn route_shows_route_profile_and_every_stage_without_running_anything() {
    let sb = Sandbox::new();
    let cfg = ConfigToml::new(&["cat"]).extra(
        "[profiles.wt]\ncommand = [\"agent\", \"--repo\", \"{repo}\"]\nprepare = { command = [\"prep\", \"{workdir}\", \"{branch}\"], timeout = \"5m\" }\npublish = { command = [\"pub\", \"{job_id}\"] }\n\n[[route]]\nmatch = \"{repo}/{branch}/**\"\nprofile = \"wt\"\nworkdir = \"{root}/wt/{repo}/{job_id}\"\n",
    );
    sb.configure(&cfg);
    let out = sb.run(&["route", "api/main/fix.prompt.md", "--json"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v["route"]["number"], 1);
    assert_eq!(v["profile"], "wt");
    assert_eq!(v["captures"]["branch"], "main");
    let workdir = format!("{}/wt/api/JOB_ID", sb.root.display());
    assert_eq!(v["workdir"], workdir.as_str());
    let stages: Vec<&str> = v["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|s| s["stage"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(stages, ["prepare", "run", "publish"]);
    assert_eq!(
        v["stages"][0]["argv"],
        serde_json::json!(["prep", workdir, "main"])
    );
    assert_eq!(
        v["stages"][1]["argv"],
        serde_json::json!(["agent", "--repo", "api"])
    );
    assert_eq!(v["stages"][0]["timeout"], "5m");
    let human = sb.run(&["route", "notes"]);
    assert_eq!(human.code(), 0, "{}", human.stderr);
    assert!(human.stdout.contains("none matches"), "{}", human.stdout);
    assert!(!sb.root.join("runs").exists(), "nothing ran or was written");
    let bad = sb.run(&["route", "../etc/x.prompt.md"]);
    assert_eq!(bad.code(), 2, "{}", bad.stdout);
}

#[test]
fn front_matter_overrides_the_profile_and_its_settings_or_rejects_the_prompt() {
    let sb = Sandbox::new();
    let slow = sb.script("slow", "echo \"slow profile for $1\"; sleep 30");
    let cfg = ConfigToml::new(&["cat"]).extra(&profile("slow", &slow, "timeout = \"1h\""));
    sb.configure(&cfg);
    let _d = Daemon::start(&sb);

    sb.drop_prompt(
        "p",
        "quick",
        "---\nprofile: slow\ntimeout: 1s\nevents: false\n---\nbody\n",
    );
    let quick = sb.wait_done("p", "quick", secs(20));
    assert_eq!(
        quick.state(),
        "timed_out",
        "the front matter's 1s won: {:#}",
        quick.record
    );
    assert_eq!(quick.str_field("profile"), Some("slow"));
    assert_eq!(quick.record["overrides"]["timeout_ms"], 1000);
    assert!(
        quick.log().contains("slow profile for quick"),
        "{}",
        quick.log()
    );
    let ops = quick.ops();
    assert!(
        ops.iter().all(|op| JOURNAL_OPS.contains(&op.as_str())),
        "events: false writes the journal's lines alone: {ops:?}"
    );

    for (name, front, needle) in [
        (
            "ghost",
            "profile: ghost",
            "profile \"ghost\" is not defined",
        ),
        (
            "soon",
            "timeout: soon",
            "timeout \"soon\" is not a duration",
        ),
        ("many", "max_attempts: 0", "max_attempts"),
    ] {
        sb.drop_prompt("p", name, format!("---\n{front}\n---\nbody\n"));
        let job = sb.wait_done("p", name, secs(15));
        assert_eq!(job.state(), "rejected", "{name}: {:#}", job.record);
        let reason = job.str_field("state_reason").unwrap_or_default();
        assert!(reason.contains(needle), "{name}: {reason}");
    }
}

#[test]
fn front_matter_max_attempts_retries_beyond_the_profiles() {
    let sb = Sandbox::new();
    let fail = sb.script(
        "fail",
        r#"echo "attempt $JOBWARDEN_ATTEMPT" >> "$OUT/tries"; exit 1"#,
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &fail])
            .profile("max_attempts", "1")
            .profile("cooldown", "\"100ms\""),
    );
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "stubborn", "---\nmax_attempts: 3\n---\nbody\n");
    wait_until("three attempts", secs(20), || {
        let tries = fs::read_to_string(sb.out().join("tries")).unwrap_or_default();
        (tries.lines().count() == 3).then_some(())
    });
    let last = wait_until("the third attempt archived", secs(15), || {
        sb.jobs_for("p", "stubborn")
            .into_iter()
            .find(|j| j.int_field("attempt") == Some(3) && j.is_done())
    });
    assert_eq!(last.str_field("disposition"), Some("archived"));
    assert_never("a fourth attempt", millis(800), || {
        sb.jobs_for("p", "stubborn").len() > 3
    });
}

#[test]
fn higher_priority_jobs_start_first_and_equal_ones_keep_their_order() {
    let sb = Sandbox::new();
    let script = sb.script(
        "ordered",
        r#"echo "$1" >> "$OUT/order"
if [ "$1" = gate ]; then while [ ! -e "$OUT/release" ]; do sleep 0.05; done; fi"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "1"));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("p", "gate", "first\n");
    sb.wait_state("p", "gate", "running", secs(15));
    for (name, priority) in [
        ("low", 0),
        ("high", 5),
        ("mid", 1),
        ("high2", 5),
        ("neg", -3),
    ] {
        sb.drop_prompt("p", name, format!("---\npriority: {priority}\n---\nbody\n"));
        sb.wait_state("p", name, "queued", secs(15));
    }
    fs::write(sb.out().join("release"), "").expect("release");
    for name in ["low", "high", "mid", "high2", "neg"] {
        sb.wait_done("p", name, secs(15));
    }
    let order = fs::read_to_string(sb.out().join("order")).expect("order");
    let order: Vec<&str> = order.lines().collect();
    assert_eq!(order, ["gate", "high", "high2", "mid", "low", "neg"]);
}
