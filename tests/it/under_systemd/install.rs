//! Install and first start: `install.sh`, then `systemctl enable --now`.

use super::install;
use crate::support::system::{System, boot_or_skip};

/// Owner, group, mode and inode of everything `install.sh` made, one line
/// each, then the files' contents' digests (the daemon's own writes into
/// the root change only its folders' times, which are left out).
fn installed(sys: &System) -> String {
    sys.ok(
        "stat -c '%n %U %G %a %i' /usr/local/bin/jobwarden /etc/systemd/system/jobwarden.service \
         /etc/jobwarden /etc/jobwarden/config.toml /var/lib/jobwarden /var/lib/jobwarden/inbox \
         /var/lib/jobwarden/runs /var/lib/jobwarden/archive && \
         sha256sum /usr/local/bin/jobwarden /etc/systemd/system/jobwarden.service /etc/jobwarden/config.toml",
    )
}

#[test]
fn install_then_enable_now_gives_a_ready_service_and_a_second_install_changes_nothing() {
    let Some(sys) = boot_or_skip() else { return };
    install(&sys);
    sys.ok("systemctl enable --now jobwarden");

    // Type=notify: `enable --now` returned once the daemon said READY=1,
    // and what it says with STATUS= is shown.
    let show =
        sys.ok("systemctl show -p Type,ActiveState,SubState,StatusText,NotifyAccess jobwarden");
    assert!(show.contains("Type=notify"), "{show}");
    assert!(show.contains("ActiveState=active"), "{show}");
    assert!(show.contains("SubState=running"), "{show}");
    assert!(show.contains("NotifyAccess=main"), "{show}");
    let status = show
        .lines()
        .find_map(|l| l.strip_prefix("StatusText="))
        .unwrap_or_default();
    assert!(!status.is_empty(), "the daemon reports its counts: {show}");
    let text = sys.ok("systemctl status jobwarden --no-pager || true");
    assert!(text.contains(status), "status shows STATUS=: {text}");

    // The dedicated user and group, and the root with the documented modes.
    let user = sys.ok("getent passwd jobwarden");
    assert!(user.starts_with("jobwarden:"), "{user}");
    sys.ok("getent group jobwarden");
    let files = installed(&sys);
    let root = files
        .lines()
        .find(|l| l.starts_with("/var/lib/jobwarden "))
        .unwrap_or_default();
    assert!(root.contains(" jobwarden jobwarden 2770 "), "{files}");
    let pid = sys.ok("systemctl show -p MainPID --value jobwarden");
    let owner = sys.ok(&format!("ps -o user= -p {}", pid.trim()));
    assert_eq!(owner.trim(), "jobwarden", "the daemon runs as its user");

    // A second run changes nothing, and the service goes on as it was.
    let again = install(&sys);
    assert_eq!(installed(&sys), files, "second install.sh run:\n{again}");
    let pid_after = sys.ok("systemctl show -p MainPID --value jobwarden");
    assert_eq!(pid_after, pid, "the service was not restarted");
}
