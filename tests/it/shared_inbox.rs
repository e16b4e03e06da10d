//! One inbox shared by two daemons, each on its own root (the same machine
//! stands in for two hosts): the shared folder is bind-mounted at each
//! root's `inbox/`, as an operator mounts a network filesystem there, so a
//! prompt crosses a mount on its way to the archive, as it would between
//! hosts. Mounting needs root: without it the tests say SKIPPED, and in CI
//! they fail.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::*;

/// A bind mount, undone on drop.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Two roots whose inboxes are one folder, and where each job leaves its
/// line (`<prompt body> <host>`).
struct Hosts {
    // Unmounted before the sandboxes are removed (fields drop in order).
    _mounts: Vec<Mount>,
    alpha: Sandbox,
    beta: Sandbox,
    shared: PathBuf,
    ran: PathBuf,
}

impl Hosts {
    /// Both roots mounted on one shared folder and configured; `None` (said)
    /// where this process may not mount, a failure in CI.
    fn up_or_skip(lease: &str) -> Option<Hosts> {
        let alpha = Sandbox::new();
        let beta = Sandbox::new();
        let shared = alpha.base.join("shared-inbox");
        fs::create_dir_all(&shared).expect("create the shared folder");
        let mut mounts = Vec::new();
        for sb in [&alpha, &beta] {
            fs::create_dir_all(sb.inbox()).expect("create the inbox mount point");
            let out = Command::new("mount")
                .arg("--bind")
                .arg(&shared)
                .arg(sb.inbox())
                .output();
            match out {
                Ok(o) if o.status.success() => mounts.push(Mount(sb.inbox())),
                other => {
                    let why = match other {
                        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_owned(),
                        Err(e) => e.to_string(),
                    };
                    if std::env::var("CI").is_ok_and(|v| v == "true") {
                        panic!("a bind mount is needed in CI: {why}");
                    }
                    say(&format!(
                        "SKIPPED: cannot bind-mount a shared inbox here: {why}"
                    ));
                    return None;
                }
            }
        }
        let ran = alpha.base.join("ran");
        let script = alpha.base.join("bin").join("job.sh");
        fs::write(
            &script,
            format!(
                "#!/bin/sh\nread line\necho \"$line $HOST_NAME\" >> {}\ncase \"$line\" in slow*) while [ ! -e {} ]; do sleep 0.05; done;; esac\n",
                q(&ran.to_string_lossy()),
                q(&alpha.base.join("go").to_string_lossy())
            ),
        )
        .expect("write the job script");
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
        for (sb, host) in [(&alpha, "alpha"), (&beta, "beta")] {
            let cfg = ConfigToml::new(&["/bin/sh", &script.to_string_lossy()])
                .global("max_jobs", "6")
                .global("settle", "\"50ms\"")
                .global("rescan_interval", "\"500ms\"")
                .env("HOST_NAME", host)
                .extra(&format!(
                    "[shared_inbox]\nhost = \"{host}\"\nlease = \"{lease}\"\n"
                ));
            sb.configure(&cfg);
        }
        Some(Hosts {
            _mounts: mounts,
            alpha,
            beta,
            shared,
            ran,
        })
    }

    /// Drop `n` prompts into the shared inbox, as tools do (a dotfile
    /// renamed into place); prompt `i` says `p<i>`.
    fn drop_burst(&self, n: usize) {
        for i in 0..n {
            let tmp = self.shared.join(format!(".p{i}.tmp"));
            fs::write(&tmp, format!("p{i}\n")).expect("write a prompt");
            fs::rename(&tmp, self.shared.join(format!("p{i}.prompt.md"))).expect("drop a prompt");
        }
    }

    /// How many times each prompt ran, and on which hosts.
    fn runs(&self) -> BTreeMap<String, Vec<String>> {
        let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in fs::read_to_string(&self.ran).unwrap_or_default().lines() {
            let mut words = line.split_whitespace();
            if let (Some(prompt), Some(host)) = (words.next(), words.next()) {
                runs.entry(prompt.to_owned())
                    .or_default()
                    .push(host.to_owned());
            }
        }
        runs
    }

    fn ran_on(&self, host: &str) -> usize {
        self.runs()
            .values()
            .flatten()
            .filter(|h| *h == host)
            .count()
    }

    /// What is left in the shared inbox: prompts waiting or claimed.
    fn left(&self) -> usize {
        fs::read_dir(&self.shared)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        name.ends_with(".prompt.md") || name.ends_with(".running.md")
                    })
                    .count()
            })
            .unwrap_or(0)
    }
}

/// Every prompt of `0..n` ran exactly once.
fn assert_each_ran_once(hosts: &Hosts, n: usize) {
    let runs = hosts.runs();
    let twice: Vec<_> = runs.iter().filter(|(_, h)| h.len() > 1).take(10).collect();
    assert!(twice.is_empty(), "prompts run more than once: {twice:?}");
    let missing: Vec<_> = (0..n)
        .map(|i| format!("p{i}"))
        .filter(|p| !runs.contains_key(p))
        .take(10)
        .collect();
    assert!(missing.is_empty(), "prompts never run: {missing:?}");
    assert_eq!(runs.len(), n, "unexpected lines in the job output");
}

/// Archived prompts under a root's `archive/<state>/`.
fn archived(sb: &Sandbox, state: &str) -> usize {
    sb.files_under(&sb.root.join("archive").join(state))
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".md"))
        .count()
}

fn claim_records(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".claim.json"))
                .collect()
        })
        .unwrap_or_default()
}

/// Claimed prompts whose claim record says their job ended.
fn ended_claims(dir: &Path) -> usize {
    claim_records(dir)
        .iter()
        .filter(|name| {
            let prompt = name.trim_start_matches('.').trim_end_matches(".claim.json");
            dir.join(format!("{prompt}.running.md")).exists()
        })
        .filter(|name| {
            fs::read(dir.join(name))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .is_some_and(|v| v["ended"] == true)
        })
        .count()
}

const BURST: usize = 2000;

#[test]
fn two_daemons_sharing_one_inbox_run_each_prompt_of_a_burst_exactly_once() {
    let Some(hosts) = Hosts::up_or_skip("5s") else {
        return;
    };
    let _alpha = Daemon::start(&hosts.alpha);
    let _beta = Daemon::start(&hosts.beta);
    hosts.drop_burst(BURST);
    wait_until(
        "every prompt of the burst to run and move on",
        secs(300),
        || (hosts.runs().len() >= BURST && hosts.left() == 0).then_some(()),
    );
    assert_each_ran_once(&hosts, BURST);
    let (a, b) = (hosts.ran_on("alpha"), hosts.ran_on("beta"));
    assert!(
        a > 0 && b > 0,
        "both hosts claim from the shared inbox: alpha ran {a}, beta {b}"
    );
    // Each host archived what it ran, across the mount, into its own root.
    wait_until("each host's archive to hold what it ran", secs(30), || {
        (archived(&hosts.alpha, "succeeded") == a && archived(&hosts.beta, "succeeded") == b)
            .then_some(())
    });
    assert_eq!(
        claim_records(&hosts.shared),
        Vec::<String>::new(),
        "claim records left behind"
    );
    // Each host's ledger holds its own runs.
    for (sb, n) in [(&hosts.alpha, a), (&hosts.beta, b)] {
        let out = sb.run(&["history", "list", "--json", "--limit", "10000"]);
        assert_eq!(out.code(), 0, "history list: {}", out.stderr);
        let rows: serde_json::Value =
            serde_json::from_str(&out.stdout).expect("history list --json");
        let rows = rows.as_array().map_or(0, Vec::len);
        assert_eq!(rows, n, "each host's ledger holds the runs it made");
    }
}

#[test]
fn a_daemon_killed_mid_burst_has_its_claims_requeued_by_the_other_after_its_lease_and_none_runs_twice()
 {
    let Some(hosts) = Hosts::up_or_skip("2s") else {
        return;
    };
    let mut alpha = Daemon::start(&hosts.alpha);
    let beta = Daemon::start(&hosts.beta);
    hosts.drop_burst(BURST);
    wait_until("alpha to have run 100 jobs", secs(120), || {
        (hosts.ran_on("alpha") >= 100).then_some(())
    });
    kill(Pid::from_raw(alpha.pid), Signal::SIGKILL).expect("kill -9 alpha's daemon");
    alpha.wait_exit(secs(10));
    // What alpha had claimed and not started stays claimed for a lease, then
    // beta takes it. What alpha's jobs ran stays claimed, its claim record
    // saying the job ended, for alpha alone to move on.
    wait_until(
        "every prompt to run, alpha's orphans on beta",
        secs(300),
        || {
            (hosts.runs().len() >= BURST && hosts.left() == ended_claims(&hosts.shared))
                .then_some(())
        },
    );
    assert_each_ran_once(&hosts, BURST);
    let requeued = beta.stderr().matches("lease has not been renewed").count();
    assert!(
        requeued > 0,
        "beta requeued alpha's claims after its lease:\n{}",
        tail(&beta.stderr(), 40)
    );

    // Alpha comes back: its jobs whose claims were taken end without
    // running, and nothing runs twice.
    let ran_before = hosts.runs().values().map(Vec::len).sum::<usize>();
    let _alpha = Daemon::start(&hosts.alpha);
    wait_until("alpha's jobs to have all ended", secs(60), || {
        let jobs = hosts.alpha.jobs();
        jobs.iter().all(|j| j.is_terminal()).then_some(jobs)
    });
    let taken: Vec<Job> = hosts
        .alpha
        .jobs()
        .into_iter()
        .filter(|j| {
            j.str_field("archive_error")
                .is_some_and(|e| e.contains("was taken after this host's lease ran out"))
        })
        .collect();
    assert!(
        !taken.is_empty(),
        "alpha ended the jobs whose claims beta took, saying why"
    );
    for job in &taken {
        assert_eq!(
            job.state(),
            "interrupted",
            "job {} whose claim was taken",
            job.id
        );
        assert!(
            !job.log().contains('p'),
            "job {} whose claim was taken ran nothing",
            job.id
        );
    }
    wait_until(
        "alpha to move on the prompts its jobs ran",
        secs(30),
        || (hosts.left() == 0).then_some(()),
    );
    assert_never("a prompt to run again once alpha is back", secs(2), || {
        hosts.runs().values().map(Vec::len).sum::<usize>() != ran_before
    });
    assert_each_ran_once(&hosts, BURST);
    assert_eq!(
        claim_records(&hosts.shared),
        Vec::<String>::new(),
        "claim records left behind"
    );
}

#[test]
fn a_forged_garbled_or_removed_claim_record_never_takes_a_live_hosts_claim() {
    let Some(hosts) = Hosts::up_or_skip("2s") else {
        return;
    };
    let _alpha = Daemon::start(&hosts.alpha);
    fs::write(hosts.shared.join(".slow0.tmp"), "slow0\n").expect("write a prompt");
    fs::rename(
        hosts.shared.join(".slow0.tmp"),
        hosts.shared.join("slow0.prompt.md"),
    )
    .expect("drop a prompt");
    wait_until("alpha to run slow0", secs(20), || {
        (hosts.ran_on("alpha") == 1).then_some(())
    });
    let beta = Daemon::start(&hosts.beta);
    let record = hosts.shared.join(".slow0.claim.json");
    let untouched = || {
        hosts.runs().values().flatten().count() == 1
            && hosts.shared.join("slow0.running.md").exists()
            && !hosts.shared.join("slow0.prompt.md").exists()
    };
    // A record naming a host nobody has seen: nobody's to take.
    let forged = fs::read_to_string(&record)
        .expect("alpha's claim record")
        .replace("\"alpha\"", "\"ghost\"");
    fs::write(&record, forged).expect("forge the claim record");
    assert_never("a claim naming an unseen host to be taken", secs(6), || {
        !untouched()
    });
    // A record that does not parse: the claim stays its job's.
    fs::write(&record, "{garbage").expect("garble the claim record");
    assert_never("a claim with a garbled record to be taken", secs(6), || {
        !untouched()
    });
    // A record removed: the job's monitor writes it again before any host
    // would take the claim for one without a record.
    fs::remove_file(&record).expect("remove the claim record");
    wait_until(
        "the monitor to write the claim record again",
        secs(5),
        || {
            fs::read_to_string(&record)
                .ok()
                .filter(|t| t.contains("\"alpha\""))
        },
    );
    assert_never(
        "a claim whose record was removed to be taken",
        secs(5),
        || !untouched(),
    );
    assert!(
        !beta.stderr().contains("requeued"),
        "beta took a live host's claim:\n{}",
        tail(&beta.stderr(), 20)
    );
    fs::write(hosts.alpha.base.join("go"), "").expect("let the job end");
    wait_until("slow0 to end and move on", secs(20), || {
        (hosts.left() == 0).then_some(())
    });
    assert_eq!(
        archived(&hosts.alpha, "succeeded"),
        1,
        "alpha archived slow0"
    );
    assert_eq!(hosts.runs().values().flatten().count(), 1, "slow0 ran once");
}

#[test]
fn a_daemon_not_told_its_inbox_is_shared_refuses_to_start_on_one() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/true"]));
    fs::create_dir_all(sb.inbox().join(".hosts")).expect("another host's leases");
    fs::write(sb.inbox().join("p.prompt.md"), "p\n").expect("a prompt");
    let mut daemon = Daemon::spawn(&sb, &[]);
    let status = daemon.wait_exit(secs(10));
    assert!(!status.success(), "the daemon refused to start");
    let err = daemon.stderr();
    assert!(
        err.contains("the inbox is shared by several hosts") && err.contains("[shared_inbox]"),
        "the refusal names the fault and the fix: {err}"
    );
    assert!(
        sb.inbox().join("p.prompt.md").exists(),
        "nothing was claimed"
    );
}
