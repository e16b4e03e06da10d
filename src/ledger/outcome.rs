//! Outcome names as the ledger stores them (DESIGN §3). The database's
//! `outcomes` table is the authority on which names exist; this enum is
//! what this build writes.

use std::fmt;
use std::str::FromStr;

use crate::job::JobState;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Success,
    Failure,
    Timeout,
    RateLimited,
    Aborted,
    Interrupted,
    Rejected,
    /// Stopped by request before anything of it ran (migration 5).
    Cancelled,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Success,
        Outcome::Failure,
        Outcome::Timeout,
        Outcome::RateLimited,
        Outcome::Aborted,
        Outcome::Interrupted,
        Outcome::Rejected,
        Outcome::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Timeout => "timeout",
            Outcome::RateLimited => "rate_limited",
            Outcome::Aborted => "aborted",
            Outcome::Interrupted => "interrupted",
            Outcome::Rejected => "rejected",
            Outcome::Cancelled => "cancelled",
        }
    }

    /// The outcome of a terminal state; `rate_limited` is decided by the
    /// profile's rules on top of `failed`. `None` for non-terminal states.
    pub fn of_state(state: JobState) -> Option<Outcome> {
        Some(match state {
            JobState::Succeeded => Outcome::Success,
            JobState::Failed => Outcome::Failure,
            JobState::TimedOut => Outcome::Timeout,
            JobState::Aborted => Outcome::Aborted,
            JobState::Interrupted => Outcome::Interrupted,
            JobState::Rejected => Outcome::Rejected,
            JobState::Cancelled => Outcome::Cancelled,
            _ => return None,
        })
    }

    /// The terminal state a job with this outcome ended in.
    pub fn state(self) -> JobState {
        match self {
            Outcome::Success => JobState::Succeeded,
            Outcome::Failure | Outcome::RateLimited => JobState::Failed,
            Outcome::Timeout => JobState::TimedOut,
            Outcome::Aborted => JobState::Aborted,
            Outcome::Interrupted => JobState::Interrupted,
            Outcome::Rejected => JobState::Rejected,
            Outcome::Cancelled => JobState::Cancelled,
        }
    }

    /// Does this outcome defer the prompt's next claim?
    pub fn causes_cooldown(self) -> bool {
        matches!(
            self,
            Outcome::Failure | Outcome::Timeout | Outcome::RateLimited
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Outcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| {
                let valid: Vec<_> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
                format!(
                    "unknown outcome {s:?}; valid outcomes: {}",
                    valid.join(", ")
                )
            })
    }
}
