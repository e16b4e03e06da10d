//! `[shared_inbox]`: several daemons, on several hosts, share one inbox
//! (mounted at each host's `<root>/inbox`). This host's name for the
//! others, and the lease that tells them it is alive (`shared_inbox.rs`).

use std::time::Duration;

use super::raw::RawSharedInbox;
use super::validate::Validator;

/// This daemon's place among the daemons sharing its inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedInbox {
    /// The name its claims carry; unique among the sharing hosts.
    pub host: String,
    /// How long this host's lease lasts unrenewed before another host may
    /// take its claims.
    pub lease: Duration,
}

/// Default lease: six heartbeats at the default heartbeat interval.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How many heartbeats a lease must outlast: a monitor renews the lease
/// at each of its heartbeats, and one late heartbeat must not lose it.
const HEARTBEATS_PER_LEASE: u32 = 3;

pub(super) fn build(
    v: &mut Validator,
    raw: Option<&RawSharedInbox>,
    heartbeat: Duration,
) -> Option<SharedInbox> {
    let raw = raw?;
    let host = match v.take(
        "shared_inbox.host",
        raw.host.clone(),
        "a host name in quotes",
    ) {
        Some(host) => {
            match crate::layout::validate_segment(&host) {
                Ok(()) => host,
                Err(e) => {
                    v.fault(
                    "shared_inbox.host",
                    format!("shared_inbox.host = {host:?}: {e}; give a plain name such as \"build-7\""),
                );
                    this_host()
                }
            }
        }
        None => this_host(),
    };
    let lease = v.duration("shared_inbox.lease", raw.lease.clone(), DEFAULT_LEASE, true);
    if lease < heartbeat * HEARTBEATS_PER_LEASE {
        v.fault(
            "shared_inbox.lease",
            format!(
                "shared_inbox.lease = {:?}: must be at least {HEARTBEATS_PER_LEASE} heartbeats ({}), or a host would lose its claims between two heartbeats; raise it or lower heartbeat_interval",
                humantime::format_duration(lease).to_string(),
                humantime::format_duration(heartbeat * HEARTBEATS_PER_LEASE),
            ),
        );
    }
    Some(SharedInbox { host, lease })
}

/// The machine's host name, as a safe name (anything else replaced by `-`).
fn this_host() -> String {
    let name: String = jobwarden_sys::host::hostname()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_start_matches(['.', '-']).to_owned();
    if name.is_empty() {
        "host".to_owned()
    } else {
        name
    }
}
