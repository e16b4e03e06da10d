//! The retry policy (DESIGN §3): which ended jobs give their prompt another
//! attempt, and how long a prompt cools down before it may be claimed
//! again. The numbers come from the ledger, never from memory, so they
//! survive daemon restarts. Manual retries (`jobwarden retry`) reach the
//! daemon through a [`request`] beside the prompt.

pub mod by_hand;
pub mod request;

use std::time::Duration;

use jobwarden_ledger::{Cooldowns, LastRun, Ledger, Outcome};
use jobwarden_model::config::{Config, Profile};
use jobwarden_model::job::{JobId, JobRecord};
use request::Request;

/// The profile a record ran (or would run) under.
pub fn profile_of<'a>(config: &'a Config, rec: &JobRecord) -> &'a Profile {
    rec.profile
        .as_deref()
        .and_then(|p| config.profiles.get(p))
        .unwrap_or_else(|| config.default_profile())
}

/// Whether an end with `outcome` may be retried at all (the ledger then
/// says whether it is): a failure, a timeout, a rate limit, an interruption.
pub fn may_retry(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Failure | Outcome::Timeout | Outcome::RateLimited | Outcome::Interrupted
    )
}

/// Does a job that ended with `outcome` send its prompt back to the inbox?
///
/// - `failure`, `timeout`, `rate_limited`: while attempts are left
///   (`max_attempts`, interrupted attempts not counted); the cooldown then
///   spaces the retries.
/// - `interrupted`: at once, unless this makes `max_interrupts` in a row
///   within the current retry chain.
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
    if !may_retry(outcome) {
        return false;
    }
    let chain = match ledger.retry_chain(&rec.project, &rec.name) {
        Ok(chain) => chain,
        Err(e) => {
            tracing::warn!(job = %rec.job_id, "{e}; not requeued");
            return false;
        }
    };
    if outcome == Outcome::Interrupted {
        let in_a_row = chain
            .iter()
            .take_while(|o| **o == Outcome::Interrupted)
            .count() as u32;
        return in_a_row + 1 < config.max_interrupts;
    }
    // Interruptions are not the job's failures: they do not use up attempts.
    let interrupted = chain.iter().filter(|o| **o == Outcome::Interrupted).count() as u32;
    let max_attempts = rec
        .overrides
        .max_attempts
        .unwrap_or(profile_of(config, rec).max_attempts);
    rec.attempt.saturating_sub(interrupted) < max_attempts
}

/// The cooldowns of a profile.
pub fn cooldowns(profile: &Profile) -> Cooldowns {
    Cooldowns {
        failure: profile.cooldown,
        rate_limited: profile.rate_limit.cooldown,
    }
}

/// Why a prompt waiting in the inbox is not claimed yet: the cooldown its
/// last run started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferral {
    /// When the cooldown ends (epoch ms).
    pub until_ms: u64,
    /// The last run, whose outcome started it.
    pub after_job: String,
    pub outcome: Outcome,
    /// The profile whose cooldown applies, and its length.
    pub profile: String,
    pub cooldown: Duration,
}

impl Deferral {
    /// Why, in words: `cooldown of 2h after failure of job 1a2b3c4d
    /// (profile default)`.
    pub fn reason(&self) -> String {
        format!(
            "cooldown of {} after {} of job {} (profile {})",
            humantime::format_duration(self.cooldown),
            self.outcome,
            jobwarden_ledger::short_id(&self.after_job),
            self.profile
        )
    }
}

/// Whether the prompt whose newest finished attempt is `last` waits for a
/// cooldown at `now_ms`, and until when. The cooldowns are those of the
/// profile the last run used (the default's, if that profile is gone from
/// the config). A retry `request` with `now` skips the cooldown.
///
/// The daemon decides its claims with this, and the CLI shows what it
/// decides (`jobs`, `show`): one computation, so they agree.
pub fn deferral(
    config: &Config,
    last: Option<&LastRun>,
    request: Option<&Request>,
    now_ms: u64,
) -> Option<Deferral> {
    let last = last.filter(|_| !request.is_some_and(|r| r.now))?;
    let profile = last
        .profile
        .as_deref()
        .and_then(|p| config.profiles.get(p))
        .unwrap_or_else(|| config.default_profile());
    let cooldowns = cooldowns(profile);
    let until_ms = last.cooldown_end(cooldowns, now_ms)?;
    let cooldown = if last.outcome == Outcome::RateLimited {
        cooldowns.rate_limited
    } else {
        cooldowns.failure
    };
    Some(Deferral {
        until_ms,
        after_job: last.id.clone(),
        outcome: last.outcome,
        profile: profile.name.clone(),
        cooldown,
    })
}

/// The attempt a claim of the prompt continues, `(previous job, its
/// attempt)`: the one a retry `request` names, else the last run if it
/// requeued the prompt; `None` for a fresh start (attempt 1).
pub fn continues(last: Option<&LastRun>, request: Option<&Request>) -> Option<(JobId, u32)> {
    match request {
        Some(request) => Some(request.prior()),
        None => last.and_then(|last| {
            JobId::parse(&last.id)
                .ok()
                .filter(|_| last.requeued)
                .map(|id| (id, last.attempt))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobwarden_ledger::{Execution, Source};
    use jobwarden_model::config::{ConfigSource, parse};
    use jobwarden_model::job::JobId;
    use jobwarden_model::layout::PromptName;

    fn setup() -> (tempfile::TempDir, Config, Ledger) {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = "max_interrupts = 3\n[profiles.default]\nmax_attempts = 2\n";
        let config = parse(text, ConfigSource::BuiltIn).expect("config");
        let ledger = Ledger::open(&dir.path().join("ledger.db")).expect("ledger");
        (dir, config, ledger)
    }

    fn job(attempt: u32) -> JobRecord {
        let prompt = PromptName {
            project: "p".into(),
            name: "n".into(),
        };
        let mut rec = JobRecord::new_queued(
            JobId::generate(),
            &prompt,
            "inbox/p/n.running.md".into(),
            "h",
        );
        rec.attempt = attempt;
        rec
    }

    /// A time rows are written at (2023-11-14): the ledger refuses times
    /// before 2020.
    const T0: u64 = 1_700_000_000_000;

    fn requeued(ledger: &mut Ledger, outcome: Outcome, at: u64) {
        let mut e = Execution::new(
            JobId::generate().to_string(),
            "p",
            "n",
            outcome,
            T0 + at,
            "h",
            Source::Daemon,
        );
        e.disposition = Some("requeued".into());
        ledger.record(&e, &[], &[]).expect("record");
    }

    #[test]
    fn failures_are_retried_until_max_attempts() {
        let (_d, config, mut ledger) = setup();
        assert!(should_requeue(
            &config,
            &job(1),
            Outcome::Failure,
            Some(&ledger)
        ));
        requeued(&mut ledger, Outcome::Failure, 1);
        assert!(!should_requeue(
            &config,
            &job(2),
            Outcome::Timeout,
            Some(&ledger)
        ));
    }

    #[test]
    fn interruptions_do_not_use_up_attempts() {
        let (_d, config, mut ledger) = setup();
        requeued(&mut ledger, Outcome::Interrupted, 1);
        // Attempt 2 is the first real failure of the chain: one retry left.
        assert!(should_requeue(
            &config,
            &job(2),
            Outcome::Failure,
            Some(&ledger)
        ));
    }

    #[test]
    fn interruptions_stop_at_max_interrupts_in_a_row() {
        let (_d, config, mut ledger) = setup();
        assert!(should_requeue(
            &config,
            &job(1),
            Outcome::Interrupted,
            Some(&ledger)
        ));
        requeued(&mut ledger, Outcome::Interrupted, 1);
        assert!(should_requeue(
            &config,
            &job(2),
            Outcome::Interrupted,
            Some(&ledger)
        ));
        requeued(&mut ledger, Outcome::Interrupted, 2);
        assert!(
            !should_requeue(&config, &job(3), Outcome::Interrupted, Some(&ledger)),
            "third in a row"
        );
    }

    #[test]
    fn never_for_success_abort_rejection_or_without_a_ledger() {
        let (_d, config, ledger) = setup();
        for o in [Outcome::Success, Outcome::Aborted, Outcome::Rejected] {
            assert!(!should_requeue(&config, &job(1), o, Some(&ledger)), "{o}");
        }
        assert!(!should_requeue(&config, &job(1), Outcome::Failure, None));
    }
}
