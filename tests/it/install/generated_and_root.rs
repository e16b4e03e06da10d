//! `install.sh --user`, continued: what it generates with the binary
//! (completions, manual pages) and the root it writes into the config, on
//! which the CLI, the unit and a daemon started by hand agree.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{Scratch, UserLayout, mode, text, unit_env};
use crate::support::{secs, wait_until};

/// Completions for bash, zsh and fish (registrations that ask the binary)
/// and a manual page per command, where
/// the shells and man look; a page of a command that no longer exists goes
/// at the next install, and uninstall removes them all.
#[test]
fn user_install_puts_completions_and_manual_pages_in_place() {
    let sc = Scratch::new();
    sc.user(&[]);
    let at = UserLayout::of(&sc.home);
    for file in &at.completions {
        let script = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // The registration asks the installed `jobwarden` at each Tab.
        assert!(
            script.contains("COMPLETE=")
                && (script.contains("jobwarden\" --") || script.contains("jobwarden --")),
            "{}: {script}",
            file.display()
        );
        assert_eq!(mode(file), 0o644, "{}", file.display());
    }
    let page = fs::read_to_string(at.man.join("jobwarden.1")).expect("jobwarden.1");
    assert!(page.contains(".TH jobwarden 1"), "{page}");
    for name in [
        "jobwarden-submit.1",
        "jobwarden-history-list.1",
        "jobwarden-config-check.1",
    ] {
        assert!(at.man.join(name).is_file(), "{name} missing");
    }
    let obsolete = at.man.join("jobwarden-frobnicate.1");
    fs::write(&obsolete, ".TH jobwarden-frobnicate 1\n").expect("write an old page");
    let out = sc.user(&[]);
    assert!(!obsolete.exists(), "a page of no command survived:\n{out}");

    let out = sc.ok(&["--user", "--uninstall"]);
    for file in &at.completions {
        assert!(
            !file.exists(),
            "{} survived --uninstall:\n{out}",
            file.display()
        );
    }
    let left: Vec<_> = fs::read_dir(&at.man)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "manual pages left: {left:?}");
}

/// After `install.sh --user`, the CLI (with nothing but HOME set, run by
/// root as the tests are in CI, whose default root is /var/lib/jobwarden)
/// and a daemon started by hand use the root the unit names.
#[test]
fn user_install_and_the_daemon_agree_on_the_root() {
    let sc = Scratch::new();
    sc.user(&[]);
    let at = UserLayout::of(&sc.home);
    let unit = fs::read_to_string(&at.unit).expect("unit");
    let unit_root = unit_env(&unit)
        .into_iter()
        .find(|(k, _)| k == "JOBWARDEN_HOME")
        .map(|(_, v)| v)
        .expect("the unit names the root");
    assert_eq!(Path::new(&unit_root), at.root);
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    let cli = |args: &[&str]| {
        Command::new(&at.bin)
            .args(args)
            .env_clear()
            .env("HOME", &sc.home)
            .env("PATH", &path)
            .stdin(Stdio::null())
            .output()
            .expect("run the installed binary")
    };
    let check = cli(&["config", "check"]);
    assert!(
        text(&check.stdout).contains(&format!("root: {unit_root}\n")),
        "the CLI's root is not the unit's ({unit_root}): {}{}",
        text(&check.stdout),
        text(&check.stderr)
    );

    // A daemon started by hand, as the user would without systemd.
    let mut daemon = Command::new(&at.bin)
        .arg("daemon")
        .env_clear()
        .env("HOME", &sc.home)
        .env("PATH", &path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the daemon");
    let alive = wait_until("the daemon to show up in status", secs(20), || {
        if let Ok(Some(status)) = daemon.try_wait() {
            panic!("the daemon exited: {status}");
        }
        let out = cli(&["status", "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (status["daemon"]["alive"] == true).then_some(status)
    });
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = daemon.wait();
    assert!(
        at.root.join("daemon.json").is_file(),
        "the daemon did not run on {}: {alive}",
        at.root.display()
    );
}
