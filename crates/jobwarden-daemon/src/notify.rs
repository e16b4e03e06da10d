//! systemd's notification protocol (`sd_notify`): `READY=1` once recovery
//! and the first rescan are done, `STATUS=` with the counts when they
//! change, `WATCHDOG=1` from the main loop at half the `WATCHDOG_USEC`
//! interval (a wedged loop stops pinging and gets restarted),
//! `RELOADING=1` … `READY=1` around a config reload, and `STOPPING=1` on
//! shutdown. Without `NOTIFY_SOCKET` every call does
//! nothing. Failures to send are logged once; they never stop the daemon.

use std::time::Duration;

use sd_notify::NotifyState;

/// The daemon's link to its service manager.
#[derive(Debug, Default)]
pub struct Notifier {
    enabled: bool,
    watchdog: Option<Duration>,
    last_status: String,
    failing: bool,
}

impl Notifier {
    /// From the environment the service manager set (`NOTIFY_SOCKET`,
    /// `WATCHDOG_USEC`, `WATCHDOG_PID`). Read at the CLI edge.
    pub fn from_env() -> Self {
        Notifier {
            enabled: std::env::var_os("NOTIFY_SOCKET").is_some(),
            watchdog: sd_notify::watchdog_enabled(),
            ..Notifier::default()
        }
    }

    /// A notifier that never sends (tests, no service manager).
    pub fn disabled() -> Self {
        Notifier::default()
    }

    /// How often to ping the watchdog: half its timeout, if one is set.
    pub fn watchdog_period(&self) -> Option<Duration> {
        self.watchdog
            .filter(|_| self.enabled)
            .map(|d| (d / 2).max(Duration::from_millis(10)))
    }

    pub fn ready(&mut self, status: &str) {
        self.last_status = status.to_owned();
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// Send `STATUS=` if it differs from the last one sent.
    pub fn status(&mut self, status: &str) {
        if self.last_status != status {
            self.last_status = status.to_owned();
            self.send(&[NotifyState::Status(status)]);
        }
    }

    /// `RELOADING=1`, with the `MONOTONIC_USEC=` newer systemd wants
    /// beside it; [`Notifier::ready`] says the reload is over.
    pub fn reloading(&mut self) {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now]),
            Err(_) => self.send(&[NotifyState::Reloading]),
        }
    }

    pub fn watchdog(&mut self) {
        self.send(&[NotifyState::Watchdog]);
    }

    pub fn stopping(&mut self, status: &str) {
        self.send(&[NotifyState::Stopping, NotifyState::Status(status)]);
    }

    fn send(&mut self, states: &[NotifyState<'_>]) {
        if !self.enabled {
            return;
        }
        match sd_notify::notify(states) {
            Ok(()) => self.failing = false,
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!("notifying the service manager: {e}");
            }
            Err(_) => {}
        }
    }
}

/// Variables of the service manager's protocol that must not reach the
/// daemon's children (monitors would otherwise be taken for the daemon).
pub const PROTOCOL_ENV: &[&str] = &["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];
