//! A prompt dropped into a project folder created the same instant: its
//! event may come before the new folder is watched, so the folder's own
//! scan finds it. Complete (nobody writing it), it is claimed at once, not
//! after `settle`; still being written, it waits for its writer's close.

use std::fs;
use std::io::Write;

use crate::support::*;

fn slow_settle(sb: &Sandbox) {
    sb.configure(&ConfigToml::new(&["cat"]).global("settle", "\"60s\""));
}

#[test]
fn a_prompt_renamed_into_a_new_project_folder_is_claimed_without_waiting_to_settle() {
    let sb = Sandbox::new();
    slow_settle(&sb);
    let _d = Daemon::start(&sb);
    let staging = sb.base.join("staging");
    fs::create_dir_all(&staging).expect("staging");
    for i in 0..5 {
        let project = format!("fresh{i}");
        let staged = staging.join(format!("p{i}.tmp"));
        fs::write(&staged, format!("prompt {i}\n")).expect("stage");
        let dir = sb.project_dir(&project);
        fs::create_dir_all(&dir).expect("new project folder");
        fs::rename(&staged, dir.join("p.prompt.md")).expect("drop");
        let job = sb.wait_done(&project, "p", secs(10));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    }
}

#[test]
fn a_prompt_still_being_written_in_a_new_project_folder_waits_for_its_close() {
    let sb = Sandbox::new();
    slow_settle(&sb);
    let _d = Daemon::start(&sb);
    let dir = sb.project_dir("late");
    fs::create_dir_all(&dir).expect("new project folder");
    let path = dir.join("p.prompt.md");
    let mut writer = fs::File::create(&path).expect("create");
    writer.write_all(b"first half, ").expect("write");
    assert_never("a claim while the writer has it open", millis(1500), || {
        !sb.jobs_for("late", "p").is_empty()
    });
    writer.write_all(b"second half\n").expect("write");
    drop(writer);
    let job = sb.wait_done("late", "p", secs(10));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert!(
        job.log().contains("first half, second half"),
        "{}",
        job.log()
    );
}
