//! Outcome names as the ledger stores them (DESIGN §3). The database's
//! `outcomes` table is the authority on which names exist; this enum is
//! what this build writes.
//!
//! The mapping between job states (`jobs`, `job.json`) and outcomes
//! (`history`) lives here, in [`Outcome::of_state`] and [`Outcome::state`];
//! [`Outcome::vocabulary`] prints it for `jobs --help`, `history list --help` and
//! the docs.

use std::fmt;
use std::str::FromStr;

use jobwarden_model::job::JobState;

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
    /// Could not start for a reason waiting will not fix (migration 6).
    SetupFailed,
}

impl Outcome {
    pub const ALL: [Outcome; 9] = [
        Outcome::Success,
        Outcome::Failure,
        Outcome::Timeout,
        Outcome::RateLimited,
        Outcome::Aborted,
        Outcome::Interrupted,
        Outcome::Rejected,
        Outcome::Cancelled,
        Outcome::SetupFailed,
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
            Outcome::SetupFailed => "setup_failed",
        }
    }

    /// The outcome of a terminal state; `rate_limited` is decided by the
    /// profile's rules on top of `failed`. `None` for non-terminal states.
    ///
    /// `merged` is a `success` whose work was merged: the merge is a fact
    /// of its own in the ledger (`published`), since a row is never
    /// changed and a merge is usually learned after the row was written.
    pub fn of_state(state: JobState) -> Option<Outcome> {
        Some(match state {
            JobState::Succeeded | JobState::Merged => Outcome::Success,
            JobState::Failed => Outcome::Failure,
            JobState::TimedOut => Outcome::Timeout,
            JobState::Aborted => Outcome::Aborted,
            JobState::Interrupted => Outcome::Interrupted,
            JobState::Rejected => Outcome::Rejected,
            JobState::Cancelled => Outcome::Cancelled,
            JobState::SetupFailed => Outcome::SetupFailed,
            JobState::Queued | JobState::Preparing | JobState::Running | JobState::Publishing => {
                return None;
            }
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
            Outcome::SetupFailed => JobState::SetupFailed,
        }
    }

    /// When a job that ended in [`Outcome::state`] gets this outcome
    /// rather than the state's own (see [`Outcome::of_state`]).
    fn when(self) -> Option<&'static str> {
        match self {
            Outcome::RateLimited => Some("when the profile's rate-limit rules match its output"),
            _ => None,
        }
    }

    /// Does a prompt whose newest run ended so need the operator's
    /// attention (until acknowledged)? Failures that waiting may fix and
    /// those it will not; never an end the operator chose (abort) or a
    /// success.
    pub fn needs_attention(self) -> bool {
        matches!(
            self,
            Outcome::Failure | Outcome::Timeout | Outcome::RateLimited | Outcome::SetupFailed
        )
    }

    /// Does this outcome defer the prompt's next claim?
    pub fn causes_cooldown(self) -> bool {
        matches!(
            self,
            Outcome::Failure | Outcome::Timeout | Outcome::RateLimited
        )
    }

    /// The mapping between job states and ledger outcomes, one line per
    /// terminal state, as `jobs --help`, `history list --help` and the docs
    /// print it.
    pub fn vocabulary() -> String {
        let mut text = String::from(
            "Job states (jobs, show, job.json) and the ledger outcomes they end as (history):\n",
        );
        for state in JobState::ALL {
            let Some(own) = Outcome::of_state(state) else {
                continue;
            };
            text.push_str(&format!("  {:<13} -> {own}", state.as_str()));
            if own.state() != state {
                text.push_str(", its merge recorded beside it (history stats: merged)\n");
                continue;
            }
            for other in Outcome::ALL
                .into_iter()
                .filter(|o| *o != own && o.state() == state)
            {
                let when = other.when().unwrap_or("in some cases");
                text.push_str(&format!(", or {other} {when}"));
            }
            text.push('\n');
        }
        let live: Vec<&str> = JobState::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .map(JobState::as_str)
            .collect();
        text.push_str(&format!(
            "  {}: not ended yet, no outcome\n",
            live.join(", ")
        ));
        text
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ledger;

    fn ledger() -> (tempfile::TempDir, Ledger) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().join("ledger.db")).expect("ledger");
        (dir, ledger)
    }

    #[test]
    fn every_terminal_state_maps_to_an_outcome_of_the_ledgers_table() {
        let (_d, ledger) = ledger();
        let names = ledger.outcome_names().expect("outcomes");
        for state in JobState::ALL {
            match Outcome::of_state(state) {
                Some(o) => {
                    assert!(state.is_terminal(), "{state} is not terminal");
                    assert!(
                        names.iter().any(|n| n == o.as_str()),
                        "{o} not in {names:?}"
                    );
                    if state == JobState::Merged {
                        assert_eq!(o.state(), JobState::Succeeded, "a merged success");
                    } else {
                        assert_eq!(o.state(), state, "{o} maps back");
                    }
                }
                None => assert!(!state.is_terminal(), "terminal {state} has no outcome"),
            }
        }
        for o in Outcome::ALL {
            assert!(
                names.iter().any(|n| n == o.as_str()),
                "{o} not in {names:?}"
            );
        }
    }

    #[test]
    fn the_ledgers_cooldown_column_agrees_with_the_code() {
        let (_d, ledger) = ledger();
        for o in Outcome::ALL {
            let causes: bool = ledger
                .conn
                .query_row(
                    "SELECT causes_cooldown FROM outcomes WHERE name = ?1",
                    [o.as_str()],
                    |r| r.get(0),
                )
                .expect("row");
            assert_eq!(causes, o.causes_cooldown(), "{o}");
        }
        assert!(!Outcome::SetupFailed.causes_cooldown());
    }

    #[test]
    fn the_vocabulary_names_every_terminal_state_and_outcome() {
        let text = Outcome::vocabulary();
        for state in JobState::ALL.into_iter() {
            assert!(text.contains(state.as_str()), "{state} missing:\n{text}");
        }
        for o in Outcome::ALL {
            assert!(text.contains(o.as_str()), "{o} missing:\n{text}");
        }
        assert!(
            text.contains("  failed        -> failure, or rate_limited when"),
            "{text}"
        );
        assert!(text.contains("  setup_failed  -> setup_failed\n"), "{text}");
    }

    #[test]
    fn the_docs_print_the_vocabulary_as_the_code_has_it() {
        let docs = include_str!("../../../docs/cli-json.md");
        let block = format!("```\n{}```\n", Outcome::vocabulary());
        assert!(
            docs.contains(&block),
            "docs/cli-json.md (\"States and outcomes\") must show exactly:\n{block}"
        );
    }
}
