//! The per-user service: a user's own systemd manager (brought up as a
//! login would bring it: D-Bus, logind, `user@<uid>.service`), then
//! `install.sh --user` and `systemctl --user enable --now jobwarden` as
//! that user, as the README gives them. The service is ready when it says
//! so, runs prompts, keeps running jobs through `systemctl --user restart`,
//! logs to the user's journal, and `loginctl enable-linger` keeps it for
//! when the user logs out.

use serde_json::Value;

use crate::support::system::{System, boot_or_skip};
use crate::support::*;

const USER: &str = "alice";

/// `script` as the user, in a login-like environment of theirs.
fn as_user(sys: &System, uid: &str, script: &str) -> std::process::Output {
    sys.run(&[
        "runuser",
        "-u",
        USER,
        "--",
        "env",
        "-i",
        &format!("HOME=/home/{USER}"),
        &format!("PATH=/home/{USER}/.local/bin:/usr/local/bin:/usr/bin:/bin"),
        &format!("XDG_RUNTIME_DIR=/run/user/{uid}"),
        "LANG=C.UTF-8",
        "/bin/sh",
        "-c",
        script,
    ])
}

fn ok_as_user(sys: &System, uid: &str, script: &str) -> String {
    let out = as_user(sys, uid, script);
    assert!(
        out.status.success(),
        "as {USER}: {script}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The user's manager, started as a login starts it; `Err` says why not.
fn user_manager(sys: &System) -> Result<String, String> {
    let out = sys.sh(&format!(
        "useradd -m {USER} && systemctl start dbus.socket systemd-logind && \
         systemctl start user@$(id -u {USER}).service && id -u {USER}"
    ));
    if !out.status.success() {
        return Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn install_user_then_enable_now_runs_prompts_and_keeps_jobs_through_a_restart() {
    let Some(sys) = boot_or_skip() else { return };
    let uid = match user_manager(&sys) {
        Ok(uid) => uid,
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("no user manager could be started in CI: {why}")
        }
        Err(why) => {
            say(&format!(
                "SKIPPED: no systemd user manager could be started here: {why}"
            ));
            return;
        }
    };
    // The user's own copy of the sources and of the built binary: the
    // checkout may be in a folder only root can enter.
    sys.ok(&format!(
        "mkdir -p /var/tmp/src && tar -C {} --exclude=./target --exclude=./.git -cf - . | tar -C /var/tmp/src -xf - && \
         cp {BIN} /var/tmp/src/jobwarden && chown -R {USER} /var/tmp/src",
        env!("CARGO_MANIFEST_DIR")
    ));
    let said = ok_as_user(
        &sys,
        &uid,
        "cd /var/tmp/src && ./install.sh --user --binary /var/tmp/src/jobwarden",
    );
    assert!(
        said.contains("systemctl --user enable --now jobwarden"),
        "{said}"
    );
    // A job that waits for its release, so that it runs through a restart.
    ok_as_user(
        &sys,
        &uid,
        r#"cat > ~/.config/jobwarden/config.toml <<EOF
root = "$HOME/.local/share/jobwarden"
settle = "100ms"
heartbeat_interval = "1s"
[profiles.default]
command = ["/bin/sh", "-c", "echo ran as \$(id -un); while [ ! -e \$HOME/release ]; do sleep 0.05; done"]
cooldown = "0s"
EOF"#,
    );
    ok_as_user(&sys, &uid, "systemctl --user enable --now jobwarden");
    let show = ok_as_user(
        &sys,
        &uid,
        "systemctl --user show -p ActiveState,SubState,StatusText jobwarden",
    );
    assert!(show.contains("ActiveState=active"), "{show}");
    assert!(show.contains("StatusText=0 running"), "{show}");

    let id = ok_as_user(
        &sys,
        &uid,
        "echo hello | jobwarden submit - --project mine --name first",
    );
    let id = id.trim();
    let state = |sys: &System| -> String {
        let out = as_user(sys, &uid, &format!("jobwarden show {id} --json"));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["job"]["state"].as_str().unwrap_or("").to_string()
    };
    wait_until("the user's job to run", secs(20), || {
        (state(&sys) == "running").then_some(())
    });
    let before = ok_as_user(
        &sys,
        &uid,
        "systemctl --user show -p MainPID --value jobwarden",
    );
    ok_as_user(&sys, &uid, "systemctl --user restart jobwarden");
    let after = ok_as_user(
        &sys,
        &uid,
        "systemctl --user show -p MainPID --value jobwarden",
    );
    assert_ne!(before, after, "a new daemon");
    assert_eq!(state(&sys), "running", "the job went on");
    ok_as_user(&sys, &uid, "touch ~/release");
    wait_until("the user's job to succeed", secs(20), || {
        (state(&sys) == "succeeded").then_some(())
    });
    let log = ok_as_user(&sys, &uid, &format!("jobwarden logs {id}"));
    assert_eq!(log.trim(), format!("ran as {USER}"));
    let events = ok_as_user(&sys, &uid, &format!("jobwarden events {id} --json"));
    assert_eq!(
        super::sandbox::sandbox_of(&events),
        "namespaces",
        "the user's job ran in its sandbox: {events}"
    );
    let rows = ok_as_user(&sys, &uid, "jobwarden history list --json");
    let rows: Vec<Value> = serde_json::from_str(&rows).expect("history list --json");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "success");

    // The README's way to read its log.
    wait_until("the job's end in the user's journal", secs(10), || {
        let out = as_user(
            &sys,
            &uid,
            "journalctl --user -u jobwarden --no-pager -o cat",
        );
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("job ended job={id}"))
            .then_some(())
    });

    // The README's way to keep it running while logged out.
    sys.ok(&format!("loginctl enable-linger {USER}"));
    sys.ok(&format!("test -e /var/lib/systemd/linger/{USER}"));
}
