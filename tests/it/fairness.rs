//! Who starts when: jobs on one repository checkout never overlap unless
//! `shared_workdir` says they may; a profile's and a route's `max_jobs`
//! hold; a job held back steps aside for the jobs behind it; start order
//! is fair across projects; `jobs` says why a queued job waits. Overlaps
//! are judged from timestamps the job scripts write.

use std::fs;

use serde_json::Value;

use crate::support::*;

/// A job that appends `start <ns>` and `end <ns>` to `$OUT/<name>.times`,
/// its name to `$OUT/order` when it starts, and sleeps `$2` seconds.
const TIMED: &str = r#"echo "$1" >> "$OUT/order"
echo "start $(date +%s%N)" >> "$OUT/$1.times"
sleep "$2"
echo "end $(date +%s%N)" >> "$OUT/$1.times"
"#;

/// `[start, end]` of the job named `name`, in nanoseconds.
fn interval(sb: &Sandbox, name: &str) -> (u128, u128) {
    let text = fs::read_to_string(sb.out().join(format!("{name}.times"))).expect("times file");
    let at = |what: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(what))
            .and_then(|n| n.trim().parse::<u128>().ok())
            .unwrap_or_else(|| panic!("{name}: no {what:?} in {text:?}"))
    };
    (at("start "), at("end "))
}

fn overlap(a: (u128, u128), b: (u128, u128)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// No two of these jobs ran at the same time.
fn assert_one_at_a_time(sb: &Sandbox, names: &[&str]) {
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            let (ia, ib) = (interval(sb, a), interval(sb, b));
            assert!(!overlap(ia, ib), "{a} {ia:?} and {b} {ib:?} overlapped");
        }
    }
}

fn order(sb: &Sandbox) -> Vec<String> {
    fs::read_to_string(sb.out().join("order"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A sandbox whose default profile runs [`TIMED`] for `secs` seconds
/// (at most `max_jobs` at once), configured further by `adjust`. The
/// inbox folders `projects` exist before the daemon starts, so prompts
/// dropped into them are claimed in the order they are dropped.
fn timed(
    max_jobs: &str,
    secs: &str,
    projects: &[&str],
    adjust: impl FnOnce(&Sandbox, ConfigToml) -> ConfigToml,
) -> Sandbox {
    let sb = Sandbox::new();
    for p in projects {
        fs::create_dir_all(sb.project_dir(p)).expect("project folder");
    }
    let script = sb.script("timed", TIMED);
    let cfg = ConfigToml::new(&["/bin/sh", &script, "{name}", secs]).global("max_jobs", max_jobs);
    sb.configure(&adjust(&sb, cfg));
    sb
}

/// A route sending `inbox/<repo>/…` to the default profile, working in
/// `workdir` (a template under the sandbox), with `keys` added.
fn repo_route(sb: &Sandbox, workdir: &str, keys: &str) -> String {
    format!(
        "[[route]]\nmatch = \"{{repo}}/**\"\nworkdir = {}\n{keys}\n",
        q(&format!("{}/{workdir}", sb.base.display()))
    )
}

/// The checkouts `repos/api` and `repos/web`, and a route to them.
fn checkouts(sb: &Sandbox, keys: &str) -> String {
    for repo in ["api", "web"] {
        fs::create_dir_all(sb.base.join("repos").join(repo)).expect("checkout");
    }
    repo_route(sb, "repos/{repo}", keys)
}

/// `jobs --json`'s `waiting` of job `id`.
fn waiting_of(sb: &Sandbox, id: &str) -> Option<String> {
    let jobs: Value = serde_json::from_str(&sb.run(&["jobs", "--json"]).stdout).ok()?;
    let job = jobs.as_array()?.iter().find(|j| j["id"] == id)?;
    job["waits"].as_str().map(str::to_owned)
}

fn all_done(sb: &Sandbox, prompts: &[(&str, &str)]) {
    for (project, name) in prompts {
        let job = sb.wait_done(project, name, secs(20));
        assert_eq!(
            job.state(),
            "succeeded",
            "{project}/{name}: {:#}",
            job.record
        );
    }
}

#[test]
fn jobs_on_one_repository_checkout_never_overlap_but_other_checkouts_run_beside() {
    let sb = timed("4", "1", &["api", "api/main", "web"], |sb, cfg| {
        cfg.extra(&checkouts(sb, ""))
    });
    let _d = Daemon::start(&sb);
    sb.drop_prompt("api", "one", "x\n");
    sb.drop_prompt("api/main", "two", "x\n");
    sb.drop_prompt("web", "three", "x\n");

    let waiting = sb.wait_state("api/main", "two", "queued", secs(10));
    let running = sb.wait_state("api", "one", "running", secs(10));
    let short = &running.id[running.id.len() - 8..];
    let expected = format!(
        "repository {} busy with job {short}",
        sb.base.join("repos/api").display()
    );
    // Both views are read while the first job runs (it lasts a second):
    // read one after the other, they could straddle its end.
    wait_until("jobs to say the repository is busy", secs(10), || {
        let json = waiting_of(&sb, &waiting.id);
        let table = sb.run(&["jobs"]).stdout;
        (json.as_deref() == Some(expected.as_str())
            && table.contains(&format!("waits: {expected}")))
        .then_some(())
    });

    all_done(
        &sb,
        &[("api", "one"), ("api/main", "two"), ("web", "three")],
    );
    assert_one_at_a_time(&sb, &["one", "two"]);
    assert!(
        overlap(interval(&sb, "one"), interval(&sb, "three")),
        "another checkout's job ran beside: {:?} {:?}",
        interval(&sb, "one"),
        interval(&sb, "three")
    );
}

#[test]
fn jobs_on_one_checkout_overlap_when_the_route_allows_it() {
    let sb = timed("4", "1", &["api", "api/main"], |sb, cfg| {
        cfg.extra(&checkouts(sb, "shared_workdir = true"))
    });
    let _d = Daemon::start(&sb);
    sb.drop_prompt("api", "one", "x\n");
    sb.drop_prompt("api/main", "two", "x\n");
    all_done(&sb, &[("api", "one"), ("api/main", "two")]);
    assert!(
        overlap(interval(&sb, "one"), interval(&sb, "two")),
        "shared_workdir lets them run together: {:?} {:?}",
        interval(&sb, "one"),
        interval(&sb, "two")
    );
}

#[test]
fn a_worktree_per_job_is_never_held_back() {
    let sb = timed("4", "1", &["api", "api/main"], |sb, cfg| {
        cfg.profile(
            "prepare",
            "{ command = [\"mkdir\", \"-p\", \"{workdir}\"] }",
        )
        .extra(&repo_route(sb, "trees/{repo}/{job_id}", ""))
    });
    let _d = Daemon::start(&sb);
    sb.drop_prompt("api", "one", "x\n");
    sb.drop_prompt("api/main", "two", "x\n");
    all_done(&sb, &[("api", "one"), ("api/main", "two")]);
    assert!(
        overlap(interval(&sb, "one"), interval(&sb, "two")),
        "each job has its own worktree: {:?} {:?}",
        interval(&sb, "one"),
        interval(&sb, "two")
    );
}

#[test]
fn a_profiles_max_jobs_holds_and_its_waiting_jobs_do_not_block_others() {
    let sb = timed("4", "0.5", &["rev", "free"], |_, cfg| {
        cfg.extra("[profiles.review]\nmax_jobs = 1\n\n[[route]]\nmatch = \"rev/**\"\nprofile = \"review\"\n")
    });
    let _d = Daemon::start(&sb);
    for name in ["r1", "r2", "r3"] {
        sb.drop_prompt("rev", name, "x\n");
    }
    sb.drop_prompt("free", "f1", "x\n");
    let waiting = sb.wait_state("rev", "r3", "queued", secs(10));
    wait_until("jobs to name the profile's limit", secs(10), || {
        (waiting_of(&sb, &waiting.id).as_deref() == Some("limit of profile review: 1 running"))
            .then_some(())
    });
    let free = sb.wait_done("free", "f1", secs(10));
    assert_eq!(free.state(), "succeeded");
    all_done(&sb, &[("rev", "r1"), ("rev", "r2"), ("rev", "r3")]);
    assert_one_at_a_time(&sb, &["r1", "r2", "r3"]);
    let order = order(&sb);
    let pos = |n: &str| order.iter().position(|o| o == n).expect("ran");
    assert!(
        pos("f1") < pos("r2"),
        "the free job did not wait behind the held-back ones: {order:?}"
    );
}

/// [`TIMED`], but each job runs until `$OUT/release` exists: a test that
/// must see a job wait behind it holds the place as long as it looks.
const GATED: &str = r#"echo "$1" >> "$OUT/order"
echo "start $(date +%s%N)" >> "$OUT/$1.times"
while [ ! -e "$OUT/release" ]; do sleep 0.05; done
echo "end $(date +%s%N)" >> "$OUT/$1.times"
"#;

#[test]
fn a_routes_max_jobs_holds() {
    let sb = timed("4", "0", &["lim/a", "lim/b"], |sb, _| {
        let gated = sb.script("gated", GATED);
        ConfigToml::new(&["/bin/sh", &gated, "{name}"])
            .global("max_jobs", "4")
            .extra("[[route]]\nmatch = \"lim/**\"\nmax_jobs = 1\n")
    });
    let _d = Daemon::start(&sb);
    sb.drop_prompt("lim/a", "l1", "x\n");
    sb.drop_prompt("lim/b", "l2", "x\n");
    let waiting = sb.wait_state("lim/b", "l2", "queued", secs(10));
    // The daemon says why at its next heartbeat; l1 runs until then.
    wait_until("jobs to name the route's limit", secs(10), || {
        (waiting_of(&sb, &waiting.id).as_deref() == Some("limit of route lim/**: 1 running"))
            .then_some(())
    });
    fs::write(sb.out().join("release"), "").expect("release");
    all_done(&sb, &[("lim/a", "l1"), ("lim/b", "l2")]);
    assert_one_at_a_time(&sb, &["l1", "l2"]);
}

#[test]
fn a_busy_project_does_not_starve_another() {
    let sb = timed("1", "0.5", &["a", "b"], |_, cfg| cfg);
    let _d = Daemon::start(&sb);
    for n in 1..=5 {
        sb.drop_prompt("a", &format!("a{n}"), "x\n");
    }
    sb.drop_prompt("b", "b1", "x\n");
    let mut prompts: Vec<(&str, String)> = (1..=5).map(|n| ("a", format!("a{n}"))).collect();
    prompts.push(("b", "b1".into()));
    for (project, name) in &prompts {
        sb.wait_done(project, name, secs(20));
    }
    let order = order(&sb);
    assert_eq!(
        order,
        ["a1", "b1", "a2", "a3", "a4", "a5"],
        "B runs second, not sixth"
    );
}
