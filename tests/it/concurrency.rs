//! Many prompts at once: each runs exactly once, and never more than
//! `max_jobs` run at the same time.

use std::collections::BTreeSet;
use std::fs;

use crate::support::*;

/// A job script that records how many jobs are active when it starts (a
/// directory per active job under `$OUT/active`, created before counting and
/// removed before exiting, so an entry means a live job) and appends its name
/// to `$OUT/ran`.
const SLOT_COUNTER: &str = r#"name="$1"
mkdir -p "$OUT/active"
mkdir "$OUT/active/$name" || { echo "$name" >> "$OUT/double"; exit 9; }
n=$(ls "$OUT/active" | wc -l)
echo "$n" >> "$OUT/counts"
echo "$name" >> "$OUT/ran"
sleep "$2"
rmdir "$OUT/active/$name"
"#;

/// The largest number of jobs alive at once according to the job scripts.
fn max_observed(sb: &Sandbox) -> usize {
    fs::read_to_string(sb.out().join("counts"))
        .expect("counts file")
        .lines()
        .map(|l| l.trim().parse::<usize>().expect("count line"))
        .max()
        .unwrap_or(0)
}

/// The largest number of jobs whose `[started_at, finished_at)` intervals in
/// job.json overlap (ends sort before starts at equal times).
fn max_overlap_in_records(jobs: &[Job]) -> usize {
    let mut points: Vec<(i64, i32)> = Vec::new();
    for job in jobs {
        points.push((job.time_ms("started_at"), 1));
        points.push((job.time_ms("finished_at"), -1));
    }
    points.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, delta) in points {
        now += delta;
        max = max.max(now);
    }
    max as usize
}

#[test]
fn two_hundred_prompts_run_exactly_once_within_max_jobs() {
    const N: usize = 200;
    let sb = Sandbox::new();
    let script = sb.script("slot", SLOT_COUNTER);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}", "0.02"]).global("max_jobs", "4"));
    let _d = Daemon::start(&sb);

    let names: Vec<String> = (0..N).map(|i| format!("job-{i:03}")).collect();
    for name in &names {
        sb.drop_prompt("bulk", name, format!("prompt {name}\n"));
    }

    let jobs = wait_until_every(
        "200 jobs to finish with their prompts archived",
        secs(120),
        millis(250),
        || {
            let jobs = sb.jobs();
            (jobs.len() >= N && jobs.iter().all(Job::is_done)).then_some(jobs)
        },
    );

    assert_eq!(jobs.len(), N, "exactly one job per prompt");
    let not_ok: Vec<_> = jobs
        .iter()
        .filter(|j| j.state() != "succeeded")
        .map(|j| (j.id.clone(), j.state().to_string()))
        .collect();
    assert!(not_ok.is_empty(), "jobs that did not succeed: {not_ok:?}");
    let job_names: BTreeSet<String> = jobs
        .iter()
        .map(|j| j.str_field("name").expect("name").to_string())
        .collect();
    assert_eq!(job_names.len(), N, "one job per distinct name");

    let ran = fs::read_to_string(sb.out().join("ran")).expect("ran file");
    let lines: Vec<&str> = ran.lines().collect();
    let distinct: BTreeSet<&str> = lines.iter().copied().collect();
    assert_eq!(lines.len(), N, "the command ran exactly {N} times");
    assert_eq!(distinct.len(), N, "every prompt ran once");
    let expected: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(distinct, expected);
    assert!(
        !sb.out().join("double").exists(),
        "no prompt ran twice at the same time"
    );

    let archived = sb.files_under(&sb.root.join("archive/succeeded/bulk"));
    assert_eq!(archived.len(), N, "every prompt archived");
    assert!(
        sb.inbox_files().is_empty(),
        "inbox left: {:?}",
        sb.inbox_files()
    );

    let observed = max_observed(&sb);
    assert!(
        observed <= 4,
        "at most max_jobs=4 at once, scripts saw {observed}"
    );
    assert!(
        observed >= 2,
        "jobs do run in parallel (saw at most {observed})"
    );
    let overlap = max_overlap_in_records(&jobs);
    assert!(overlap <= 4, "job.json intervals overlap {overlap} deep");
}

#[test]
fn queued_jobs_start_as_slots_free_up() {
    let sb = Sandbox::new();
    let script = sb.script("slot", SLOT_COUNTER);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}", "0.4"]).global("max_jobs", "2"));
    let _d = Daemon::start(&sb);
    let names: Vec<String> = (0..6).map(|i| format!("q{i}")).collect();
    for name in &names {
        sb.drop_prompt("slots", name, "wait your turn\n");
    }

    let saw_queued = wait_until(
        "some job to be queued behind the two running",
        secs(15),
        || {
            let jobs = sb.jobs();
            let running = jobs.iter().filter(|j| j.state() == "running").count();
            let queued = jobs.iter().filter(|j| j.state() == "queued").count();
            (queued >= 1 && running >= 1).then_some(queued)
        },
    );
    assert!(saw_queued >= 1);

    for name in &names {
        let job = sb.wait_done("slots", name, secs(20));
        assert_eq!(job.state(), "succeeded", "{name}: {:#}", job.record);
    }
    let observed = max_observed(&sb);
    assert_eq!(
        observed, 2,
        "exactly max_jobs=2 at once at the busiest moment"
    );
    assert!(max_overlap_in_records(&sb.jobs()) <= 2);
}

/// A job that failed and requeued its prompt may be seen ending only after
/// the prompt was claimed again (its monitor is slow to exit, or the
/// daemon's loop is busy). That end must not move the new attempt's
/// claimed prompt: the prompt would be claimed a third time.
#[test]
fn a_requeued_prompt_claimed_again_before_the_old_monitor_exits_runs_exactly_twice() {
    let sb = Sandbox::new();
    let go = sb.out().join("go");
    let script = sb.script(
        "fail-once",
        &format!(
            r#"echo "$JOBWARDEN_ATTEMPT" >> "$OUT/runs.txt"
[ "$JOBWARDEN_ATTEMPT" = 1 ] && exit 3
while [ ! -e {go} ]; do sleep 0.02; done
exit 0"#,
            go = q(&go.display().to_string())
        ),
    );
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .profile("max_attempts", "2")
            .profile("cooldown", "\"50ms\""),
    );
    let held = Paused::start(&sb, "monitor-exit", "release-monitors");
    sb.drop_prompt("proj", "twice", "x\n");

    // The second attempt runs while the first one's monitor, its job
    // ended and its prompt requeued, is held before exiting.
    let second = sb.wait_job_where(
        "the second attempt to run",
        "proj",
        "twice",
        &[],
        secs(20),
        |j| j.int_field("attempt") == Some(2) && j.state() == "running",
    );
    let first = sb
        .jobs()
        .into_iter()
        .find(|j| j.int_field("attempt") == Some(1))
        .expect("the first attempt");
    held.release();
    wait_until("the first monitor's end to be settled", secs(10), || {
        let reported = format!("its monitor reported its end job={}", first.id);
        held.daemon.stderr().contains(&reported).then_some(())
    });
    wait_monitor_released(&sb, &first.id, secs(10));
    fs::write(&go, "").expect("let the second attempt finish");

    let second = sb.wait_id(
        &second.id,
        "the second attempt to end",
        secs(10),
        Job::is_done,
    );
    assert_eq!(second.state(), "succeeded", "{:#}", second.record);
    assert_never("a third attempt", secs(1), || sb.jobs().len() > 2);
    let runs = fs::read_to_string(sb.out().join("runs.txt")).expect("runs");
    assert_eq!(runs, "1\n2\n");
    assert!(
        second.str_field("archive_path").is_some(),
        "{:#}",
        second.record
    );
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
}
