//! Input the daemon must refuse without running anything and without losing
//! it: symlinks, oversized prompts, non-UTF-8 content, unusable names.

use std::fs;
use std::os::unix::fs::symlink;

use crate::support::*;

/// A config whose command leaves `$OUT/ran-<name>` behind, so a test can prove
/// the command never ran for a rejected prompt.
fn tattletale(sb: &Sandbox) -> ConfigToml {
    let script = sb.script("tattle", r#"echo ran > "$OUT/ran-$1""#);
    ConfigToml::new(&["/bin/sh", &script, "{name}"])
}

fn assert_rejected(sb: &Sandbox, job: &Job, reason_word: &str) {
    assert_eq!(job.state(), "rejected", "{:#}", job.record);
    let reason = job.str_field("state_reason").unwrap_or_default();
    assert!(
        reason.contains(reason_word),
        "state_reason mentions {reason_word:?}: {:#}",
        job.record
    );
    assert!(job.record["pid"].is_null(), "nothing ran: {:#}", job.record);
    let name = job.str_field("name").expect("name");
    assert!(
        !sb.out().join(format!("ran-{name}")).exists(),
        "the command must not run for a rejected prompt"
    );
    let archive = job.str_field("archive_path").expect("archive_path");
    assert!(
        archive.starts_with("archive/rejected/"),
        "archived under rejected/: {archive}"
    );
    assert!(
        fs::symlink_metadata(sb.root.join(archive)).is_ok(),
        "the rejected file is kept in the archive: {archive}"
    );
}

#[test]
fn symlink_prompt_is_rejected_and_its_target_untouched() {
    let sb = Sandbox::new();
    sb.configure(&tattletale(&sb));
    let target = sb.base.join("secret.txt");
    fs::write(&target, "top secret, outside the inbox\n").expect("write target");
    let _d = Daemon::start(&sb);

    let dir = sb.project_dir("proj");
    fs::create_dir_all(&dir).expect("project dir");
    let tmp = dir.join("link.tmp");
    symlink(&target, &tmp).expect("create symlink");
    fs::rename(&tmp, dir.join("link.prompt.md")).expect("rename symlink into the inbox");

    let job = sb.wait_done("proj", "link", secs(15));
    assert_rejected(&sb, &job, "symlink");
    assert_eq!(
        job.str_field("archive_path"),
        Some(format!("archive/rejected/proj/link.{}.md", job.id).as_str())
    );
    let meta = fs::symlink_metadata(&target).expect("target still exists");
    assert!(meta.file_type().is_file(), "target is still a plain file");
    assert_eq!(
        fs::read_to_string(&target).expect("read target"),
        "top secret, outside the inbox\n",
        "target content untouched"
    );
    assert!(
        !fs::read(job.dir.join("prompt.md"))
            .unwrap_or_default()
            .starts_with(b"top secret"),
        "the symlink was not followed into the run dir"
    );
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
}

#[test]
fn oversized_prompt_is_rejected_and_kept() {
    let sb = Sandbox::new();
    sb.configure(&tattletale(&sb).global("max_prompt_bytes", "\"1KiB\""));
    let _d = Daemon::start(&sb);

    let body = "y".repeat(2000);
    sb.drop_prompt("proj", "big", &body);
    // A prompt exactly at the limit is fine.
    sb.drop_prompt("proj", "limit", "z".repeat(1024));

    let job = sb.wait_done("proj", "big", secs(15));
    assert_rejected(&sb, &job, "max_prompt_bytes");
    let archived = fs::read(sb.root.join(job.str_field("archive_path").expect("path")))
        .expect("archived prompt");
    assert_eq!(
        archived,
        body.as_bytes(),
        "the oversized prompt is never lost"
    );

    let ok = sb.wait_done("proj", "limit", secs(15));
    assert_eq!(
        ok.state(),
        "succeeded",
        "a prompt at the limit runs: {:#}",
        ok.record
    );
}

#[test]
fn non_utf8_prompt_is_rejected_and_kept() {
    let sb = Sandbox::new();
    sb.configure(&tattletale(&sb));
    let _d = Daemon::start(&sb);

    let body: &[u8] = b"valid start \xff\xfe\x80 invalid bytes\n";
    sb.drop_prompt("proj", "binary", body);

    let job = sb.wait_done("proj", "binary", secs(15));
    assert_rejected(&sb, &job, "UTF-8");
    let archived = fs::read(sb.root.join(job.str_field("archive_path").expect("path")))
        .expect("archived prompt");
    assert_eq!(archived, body, "the bytes are kept exactly");
}

#[test]
fn unusable_prompt_name_is_rejected_not_run_and_not_lost() {
    let sb = Sandbox::new();
    sb.configure(&tattletale(&sb));
    let _d = Daemon::start(&sb);

    // A name starting with '-' could be taken for an option by the command.
    sb.drop_prompt("proj", "-rf", "dangerous name\n");

    let job = wait_until("a rejected job for the unusable name", secs(15), || {
        sb.jobs().into_iter().find(|j| j.is_done())
    });
    assert_eq!(job.state(), "rejected", "{:#}", job.record);
    assert!(job.record["pid"].is_null(), "{:#}", job.record);
    let archive = sb
        .root
        .join(job.str_field("archive_path").expect("archive_path"));
    assert_eq!(
        fs::read_to_string(&archive).expect("archived file"),
        "dangerous name\n",
        "the file is kept"
    );
    assert!(sb.inbox_files().is_empty(), "{:?}", sb.inbox_files());
    let ran: Vec<_> = sb.files_under(&sb.out());
    assert!(ran.is_empty(), "the command never ran: {ran:?}");
}

#[test]
fn bad_prompts_do_not_block_good_ones() {
    let sb = Sandbox::new();
    sb.configure(&tattletale(&sb).global("max_prompt_bytes", "\"1KiB\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("mix", "too-big", "q".repeat(5000));
    sb.drop_prompt("mix", "not-utf8", b"\xc3\x28\n");
    sb.drop_prompt("mix", "good", "fine\n");

    let good = sb.wait_done("mix", "good", secs(15));
    assert_eq!(good.state(), "succeeded", "{:#}", good.record);
    assert!(sb.out().join("ran-good").exists());
    for name in ["too-big", "not-utf8"] {
        let job = sb.wait_done("mix", name, secs(15));
        assert_eq!(job.state(), "rejected", "{name}: {:#}", job.record);
    }
}
