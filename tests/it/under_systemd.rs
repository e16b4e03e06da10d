//! The service under a real systemd (`support/system.rs` boots one per
//! test, throw-away, as PID 1 of fresh namespaces): `install.sh` as the
//! README gives it, then `systemctl`, as an operator would.
//!
//! [`Service`] is a booted system with jobwarden installed, configured to
//! run `job.sh` below for every prompt, and started with `systemctl enable
//! --now`. A job says it ran by adding a line to `ran-<name>`, and waits
//! for `release-<name>` (the test's go) before it ends, all in [`JW`]
//! (`/var/tmp` stays writable to the service, and is not hidden when
//! starting the service mounts a fresh `/tmp`).

use std::time::Duration;

use serde_json::Value;

use crate::support::system::{System, boot_or_skip};
use crate::support::*;

mod cgroups;
mod install;
mod logs;
mod operator;
mod per_user;
mod reload;
mod restart;
mod sandbox;
mod upgrade;
mod watchdog;
mod web;

/// The tests' own folder inside a booted system.
const JW: &str = "/var/tmp/jw";

/// Every job runs this with its prompt's name.
const JOB: &str = r#"#!/bin/sh
echo "start $1 $$"
echo $$ >> /var/tmp/jw/ran-$1
while [ ! -e /var/tmp/jw/release-$1 ]; do sleep 0.05; done
echo "done $1"
"#;

/// A booted system running the installed service.
pub struct Service {
    pub sys: System,
}

impl Service {
    /// Boot, install, configure (`globals`: extra top-level TOML lines) and
    /// `systemctl enable --now`; `None` where no systemd can be booted.
    pub fn up(globals: &str) -> Option<Service> {
        let sys = boot_or_skip()?;
        install(&sys);
        sys.ok(&format!(
            "mkdir -p -m 1777 {JW} && cat > {JW}/job.sh <<'EOF'\n{JOB}EOF"
        ));
        let svc = Service { sys };
        svc.configure(globals);
        svc.sys.ok("systemctl enable --now jobwarden");
        Some(svc)
    }

    /// Replace the config (its owner and mode stay those `install.sh` set).
    pub fn configure(&self, globals: &str) {
        self.sys.ok(&format!(
            "cat > /etc/jobwarden/config.toml <<'EOF'\n{}EOF",
            config(globals)
        ));
    }

    /// `jobwarden submit` as root, with the umask the README asks of
    /// operators; the new job's id.
    pub fn submit(&self, project: &str, name: &str) -> String {
        let out = self.sys.ok(&format!(
            "umask 007 && echo 'prompt {name}' | jobwarden submit - --project {project} --name {name}"
        ));
        out.trim().to_string()
    }

    /// Let job `name` end.
    pub fn release(&self, name: &str) {
        self.sys.ok(&format!("touch {JW}/release-{name}"));
    }

    /// How many times a job for prompt `name` started.
    pub fn runs(&self, name: &str) -> usize {
        let out = self
            .sys
            .ok(&format!("cat {JW}/ran-{name} 2>/dev/null || true"));
        out.lines().count()
    }

    /// Job `id`'s `job.json`, as `jobwarden show <id> --json` gives it;
    /// null while no job of that id is known (a prompt not yet claimed).
    pub fn show(&self, id: &str) -> Value {
        let out = self.sys.sh(&format!("jobwarden show {id} --json"));
        if !out.status.success() {
            return Value::Null;
        }
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "show {id} --json: {e}\n{}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        shown["job"].clone()
    }

    /// Wait until job `id`'s record satisfies `cond`; the record.
    pub fn wait_job(
        &self,
        id: &str,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut last = Value::Null;
        let found = poll_until(timeout, millis(100), || {
            last = self.show(id);
            cond(&last).then(|| last.clone())
        });
        found.unwrap_or_else(|| {
            panic!(
                "{what}: not within {timeout:?}\nlast record: {last:#}\njournal:\n{}",
                self.journal()
            )
        })
    }

    /// Wait until job `id` is in `state`.
    pub fn wait_state(&self, id: &str, state: &str, timeout: Duration) -> Value {
        self.wait_job(id, &format!("job {id} {state}"), timeout, |r| {
            state_of(r) == state
        })
    }

    /// The ledger's executions, newest first (`history list --json`).
    pub fn executions(&self) -> Vec<Value> {
        let out = self.sys.sh("jobwarden history list --limit 10000 --json");
        assert!(
            out.status.success(),
            "history list: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("history list --json: {e}"))
    }

    /// The ledger's rows for prompt `project/name`.
    pub fn executions_of(&self, project: &str, name: &str) -> Vec<Value> {
        self.executions()
            .into_iter()
            .filter(|r| r["project"] == project && r["name"] == name)
            .collect()
    }

    /// The ledger's rows that `pick` keeps, once there are at least `n`.
    /// A job's terminal `job.json` is written before its row (DESIGN §7:
    /// the row follows, and a crash between the two is backfilled), so a
    /// test that saw the end waits for the row.
    pub fn recorded(&self, n: usize, pick: impl Fn(&Value) -> bool) -> Vec<Value> {
        wait_until(&format!("{n} ledger row(s)"), secs(20), || {
            let rows: Vec<Value> = self.executions().into_iter().filter(|r| pick(r)).collect();
            (rows.len() >= n).then_some(rows)
        })
    }

    /// The ledger's rows for prompt `project/name`, once it has one.
    pub fn recorded_of(&self, project: &str, name: &str) -> Vec<Value> {
        self.recorded(1, |r| r["project"] == project && r["name"] == name)
    }

    /// `systemctl show -p <prop> --value jobwarden`.
    pub fn property(&self, prop: &str) -> String {
        self.sys
            .ok(&format!("systemctl show -p {prop} --value jobwarden"))
            .trim()
            .to_string()
    }

    /// The daemon's pid as systemd knows it (0: none).
    pub fn main_pid(&self) -> i64 {
        self.property("MainPID").parse().unwrap_or(0)
    }

    /// Is process `pid` (of the booted system) alive, and not a zombie?
    pub fn alive(&self, pid: i64) -> bool {
        self.sys
            .sh(&format!(
                "s=$(cut -d' ' -f3 /proc/{pid}/stat 2>/dev/null) && [ -n \"$s\" ] && [ \"$s\" != Z ]"
            ))
            .status
            .success()
    }

    /// Wait until the unit's journal (`journalctl` `args` added) has a
    /// line holding `needle`: journald stores what the service wrote a
    /// moment later, not at once.
    pub fn wait_journal(&self, args: &str, needle: &str) -> String {
        let mut last = String::new();
        let found = poll_until(secs(15), millis(100), || {
            let out = self.sys.sh(&format!(
                "journalctl -u jobwarden --no-pager -o cat {args} 2>&1"
            ));
            last = String::from_utf8_lossy(&out.stdout).into_owned();
            last.contains(needle).then(|| last.clone())
        });
        found.unwrap_or_else(|| panic!("no {needle:?} in the journal within 15 s:\n{last}"))
    }

    /// The unit's journal so far (its last 200 lines).
    pub fn journal(&self) -> String {
        let out = self
            .sys
            .sh("journalctl -u jobwarden --no-pager -o cat 2>&1 | tail -n 200");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The config every test starts from, with `globals` added.
fn config(globals: &str) -> String {
    format!(
        r#"root = "/var/lib/jobwarden"
heartbeat_interval = "1s"
settle = "100ms"
abort_grace = "1s"
{globals}
[profiles.default]
command = ["/bin/sh", "{JW}/job.sh", "{{name}}"]
cooldown = "0s"
"#
    )
}

/// `install.sh --binary <the tested binary>`, run inside from the checkout.
pub fn install(sys: &System) -> String {
    install_binary(sys, BIN)
}

/// `install.sh --binary <binary>`, run inside from the checkout.
pub fn install_binary(sys: &System, binary: &str) -> String {
    sys.ok(&format!(
        "cd {} && ./install.sh --binary {binary}",
        env!("CARGO_MANIFEST_DIR"),
    ))
}

/// A record's `state`.
pub fn state_of(record: &Value) -> &str {
    record["state"].as_str().unwrap_or("")
}
