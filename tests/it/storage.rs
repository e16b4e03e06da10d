//! A full disk under the root: jobs that end meanwhile are recorded once
//! space returns, the daemon keeps running, and a prompt that arrives while
//! nothing can be written waits in the inbox until it can be claimed.
//! Uses a small tmpfs mounted on the sandbox root (needs root privileges;
//! skipped with a printed reason where mounting is not allowed).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// A tmpfs mounted for the test; lazily unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Write zeros into `path` until the filesystem refuses.
fn fill(path: &Path) {
    let mut f = fs::File::create(path).expect("filler");
    for size in [64 * 1024, 4096, 512, 1] {
        let block = vec![0u8; size];
        while f.write_all(&block).is_ok() {}
    }
}

#[test]
fn a_full_disk_delays_records_and_claims_but_loses_nothing() {
    let sb = Sandbox::new();
    let Some(_mount) = Tmpfs::mount(&sb.root, "4m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root and mount rights)");
        return;
    };
    let gate = sb.script(
        "gate",
        r#"while [ ! -e "$OUT/release" ]; do sleep 0.05; done; echo done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate]));
    let d = Daemon::start(&sb);
    sb.drop_prompt("proj", "full", "x\n");
    let job = sb.wait_state("proj", "full", "running", secs(15));
    let stage = sb.root.join("stage");
    fs::create_dir_all(&stage).expect("stage");
    fs::write(stage.join("late.tmp"), "arrived while full\n").expect("staged prompt");

    fill(&sb.root.join("filler"));
    fs::write(sb.out().join("release"), "").expect("release");
    fs::rename(
        stage.join("late.tmp"),
        sb.inbox().join("proj/late.prompt.md"),
    )
    .expect("drop while full");
    assert_never(
        "the job's end recorded while nothing can be written",
        millis(1500),
        || sb.job(&job.id).is_some_and(|j| j.is_terminal()),
    );
    // Between rescans it waits as `.prompt.md`; a rescan's retry holds it as
    // `.running.md` for an instant before putting it back.
    let waiting = |suffix: &str| sb.inbox().join(format!("proj/late.{suffix}.md")).exists();
    assert!(
        waiting("prompt") || waiting("running"),
        "the late prompt waits in the inbox: {:?}",
        sb.inbox_files()
    );
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.pid), None).is_ok(),
        "the daemon keeps running"
    );

    fs::remove_file(sb.root.join("filler")).expect("free space");
    let ended = wait_until(
        "the job's end recorded once space returns",
        secs(15),
        || sb.job(&job.id).filter(Job::is_done),
    );
    assert_eq!(ended.state(), "succeeded", "{:#}", ended.record);
    let late = sb.wait_done("proj", "late", secs(15));
    assert_eq!(late.state(), "succeeded", "{:#}", late.record);
    let shown = sb.run(&["history", "show", &job.id, "--json"]);
    assert_eq!(shown.code(), 0, "its ledger row exists: {}", shown.stderr);
}
