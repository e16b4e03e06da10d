//! Running as a service: the daemon speaks systemd's notification protocol
//! to a real datagram socket (READY=1 with a STATUS once it is ready,
//! STATUS as counts change, WATCHDOG=1 at half the WATCHDOG_USEC interval,
//! STOPPING=1 on SIGTERM), and writes JSON logs when asked.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::support::*;

/// Every message that arrives within `window`.
fn receive(sock: &UnixDatagram, window: Duration) -> Vec<String> {
    let deadline = Instant::now() + window;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        match sock.recv(&mut buf) {
            Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => break,
        }
    }
    out
}

/// Messages until one satisfies `done` (or the deadline passes: a panic).
pub(crate) fn receive_until(
    sock: &UnixDatagram,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + secs(15);
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| panic!("no {what} within 15s; got {seen:?}"));
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            let hit = done(&msg);
            seen.push(msg);
            if hit {
                return seen;
            }
        }
    }
}

#[test]
fn ready_status_watchdog_and_stopping_reach_the_service_manager() {
    let sb = Sandbox::new();
    let gate = sb.script(
        "gate",
        r#"while [ ! -e "$OUT/release" ]; do sleep 0.05; done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &gate]));
    let path = sb.base.join("notify.sock");
    let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
    let socket = path.display().to_string();
    let mut d = Daemon::start_with_env(
        &sb,
        &[("NOTIFY_SOCKET", &socket), ("WATCHDOG_USEC", "400000")],
    );

    let first = receive_until(&sock, "READY=1", |m| m.contains("READY=1"));
    let ready = first.last().expect("ready");
    assert!(
        ready.contains("STATUS=0 running, 0 queued, 0 deferred"),
        "{ready:?}"
    );
    // At half of 400 ms: several pings in a second.
    let pings = receive(&sock, Duration::from_millis(1200))
        .iter()
        .filter(|m| m.contains("WATCHDOG=1"))
        .count();
    assert!((3..=12).contains(&pings), "{pings} watchdog pings in 1.2 s");

    sb.drop_prompt("proj", "held", "x\n");
    receive_until(&sock, "a status with the running job", |m| {
        m.contains("STATUS=1 running, 0 queued")
    });
    // The protocol's variables never reach the monitors (which would be
    // taken for the daemon) nor the jobs.
    let running = sb.wait_state("proj", "held", "running", secs(15));
    let monitor = running.int_field("monitor_pid").expect("monitor pid");
    let environ = std::fs::read(format!("/proc/{monitor}/environ")).expect("monitor environ");
    let environ = String::from_utf8_lossy(&environ);
    for var in ["NOTIFY_SOCKET=", "WATCHDOG_USEC="] {
        assert!(!environ.contains(var), "the monitor got {var}");
    }
    std::fs::write(sb.out().join("release"), "").expect("release");
    sb.wait_done("proj", "held", secs(15));
    d.sigterm();
    let last = receive_until(&sock, "STOPPING=1", |m| m.contains("STOPPING=1"));
    assert!(
        last.last().is_some_and(|m| m.contains("STATUS=stopping")),
        "{last:?}"
    );
    assert_eq!(d.wait_exit(secs(10)).code(), Some(0));
}

#[test]
fn without_a_notify_socket_nothing_is_sent_and_all_works() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let _d = Daemon::start_with_env(&sb, &[("WATCHDOG_USEC", "100000")]);
    sb.drop_prompt("proj", "plain", "x\n");
    assert_eq!(sb.wait_done("proj", "plain", secs(15)).state(), "succeeded");
}

/// `--log-format json` (here through `JOBWARDEN_LOG_FORMAT`): every line
/// the daemon and its monitors write is one JSON object, and what concerns
/// a job carries a `job` span with its id.
#[test]
fn json_logs_are_one_object_per_line_with_a_span_per_job() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let d = Daemon::start_with_env(&sb, &[("JOBWARDEN_LOG_FORMAT", "json")]);
    sb.drop_prompt("proj", "logged", "x\n");
    let job = sb.wait_done("proj", "logged", secs(15));
    let log = wait_until("the monitor's end in the log", secs(10), || {
        let log = d.stderr();
        log.contains("job ended").then_some(log)
    });
    let mut spans = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
        if v["span"]["name"] == "job" {
            assert_eq!(v["span"]["id"], job.id.as_str(), "{line}");
            spans += 1;
        }
    }
    assert!(
        spans >= 2,
        "the claim and the monitor's end are in the job's span:\n{log}"
    );
    assert!(!log.contains('\x1b'), "no colours off a terminal");
}
