//! The retry policy (DESIGN §3): which ended jobs give their prompt another
//! attempt, and how long a prompt cools down before it may be claimed
//! again. The numbers come from the ledger, never from memory, so they
//! survive daemon restarts.

use crate::config::{Config, Profile};
use crate::job::JobRecord;
use crate::ledger::{Cooldowns, Ledger, Outcome};

/// The profile a record ran (or would run) under.
pub fn profile_of<'a>(config: &'a Config, rec: &JobRecord) -> &'a Profile {
    rec.profile
        .as_deref()
        .and_then(|p| config.profiles.get(p))
        .unwrap_or_else(|| config.default_profile())
}

/// Does a job that ended with `outcome` send its prompt back to the inbox?
///
/// - `failure`, `timeout`, `rate_limited`: while attempts are left
///   (`max_attempts`); the cooldown then spaces the retries.
/// - `interrupted`: at once, unless this makes `max_interrupts` in a row.
/// - never for `success`, `aborted`, `rejected`.
///
/// Without a ledger nothing is requeued (the count could not be kept).
pub fn should_requeue(
    config: &Config,
    rec: &JobRecord,
    outcome: Outcome,
    ledger: Option<&Ledger>,
) -> bool {
    let Some(ledger) = ledger else { return false };
    match outcome {
        Outcome::Failure | Outcome::Timeout | Outcome::RateLimited => {
            rec.attempt < profile_of(config, rec).max_attempts
        }
        Outcome::Interrupted => match ledger.interrupts_in_a_row(&rec.project, &rec.name) {
            Ok(before) => before + 1 < config.max_interrupts,
            Err(e) => {
                tracing::warn!(job = %rec.job_id, "{e}; not requeued");
                false
            }
        },
        Outcome::Success | Outcome::Aborted | Outcome::Rejected => false,
    }
}

/// The cooldowns of a profile.
pub fn cooldowns(profile: &Profile) -> Cooldowns {
    Cooldowns {
        failure: profile.cooldown,
        rate_limited: profile.rate_limit.cooldown,
    }
}
