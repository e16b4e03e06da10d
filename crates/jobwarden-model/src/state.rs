//! Job states and the one table of valid transitions (DESIGN §3). Every
//! state change of a record goes through [`JobState::check_transition`].
//!
//! `aborted` is the end of a job stopped after it started; a job stopped
//! before anything of it ran (still `queued`) is `cancelled`
//! ([`JobState::stopped_by_request`] says which).
//! `setup_failed` is the end of a job whose command could not be started
//! for a reason that waiting will not fix (program not found or not
//! executable, workdir missing, a `prepare` or `publish` that cannot
//! start): the monitor finds it before or instead of a spawn, while the job
//! is `queued` (the first command), `preparing` (the main command after
//! `prepare`) or `running` (`publish` after the main command).
//!
//! `merged` is the end of a job whose published work is merged into its
//! target: straight from `publishing` when the publish itself merged, or
//! later from `succeeded` when the reconcile finds the published branch
//! merged. The ended states are a fixed list ([`TERMINAL`]): `succeeded →
//! merged` is the one edge out of an ended state, and it changes nothing
//! else: an ended job never runs again, whatever its state.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Preparing,
    Running,
    Publishing,
    Succeeded,
    Failed,
    TimedOut,
    Aborted,
    Interrupted,
    Rejected,
    Cancelled,
    SetupFailed,
    Merged,
}

use JobState::*;

/// Where a job may go from each state. Of the ended states only
/// `succeeded` has a row: its work may be merged later.
const TRANSITIONS: &[(JobState, &[JobState])] = &[
    (
        Queued,
        &[
            Preparing,
            Running,
            Failed,
            TimedOut,
            Interrupted,
            Rejected,
            Cancelled,
            SetupFailed,
        ],
    ),
    (
        Preparing,
        &[Running, Failed, TimedOut, Aborted, Interrupted, SetupFailed],
    ),
    (
        Running,
        &[
            Publishing,
            Succeeded,
            Failed,
            TimedOut,
            Aborted,
            Interrupted,
            SetupFailed,
        ],
    ),
    (
        Publishing,
        &[Succeeded, Merged, Failed, TimedOut, Aborted, Interrupted],
    ),
    (Succeeded, &[Merged]),
];

/// The terminal (ended) states: a job in one never runs again, and a record
/// found lying may be restored to one (see [`JobState::check_restore`]).
const TERMINAL: &[JobState] = &[
    Succeeded,
    Failed,
    TimedOut,
    Aborted,
    Interrupted,
    Rejected,
    Cancelled,
    SetupFailed,
    Merged,
];

/// An attempt to move a job where the table does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid job state transition {from} -> {to}; valid targets from {from}: {}", valid_list(.valid))]
pub struct InvalidTransition {
    pub from: JobState,
    pub to: JobState,
    pub valid: &'static [JobState],
}

fn valid_list(valid: &[JobState]) -> String {
    if valid.is_empty() {
        return "none (terminal state)".into();
    }
    valid
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl JobState {
    pub const ALL: [JobState; 13] = [
        Queued,
        Preparing,
        Running,
        Publishing,
        Succeeded,
        Failed,
        TimedOut,
        Aborted,
        Interrupted,
        Rejected,
        Cancelled,
        SetupFailed,
        Merged,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Queued => "queued",
            Preparing => "preparing",
            Running => "running",
            Publishing => "publishing",
            Succeeded => "succeeded",
            Failed => "failed",
            TimedOut => "timed_out",
            Aborted => "aborted",
            Interrupted => "interrupted",
            Rejected => "rejected",
            Cancelled => "cancelled",
            SetupFailed => "setup_failed",
            Merged => "merged",
        }
    }

    /// The end of a job in this state that is stopped by request (an ABORT
    /// marker): `cancelled` while nothing of it has run (`queued`), else
    /// `aborted`.
    pub fn stopped_by_request(self) -> JobState {
        if self == Queued { Cancelled } else { Aborted }
    }

    /// States this one may move to.
    pub fn valid_targets(self) -> &'static [JobState] {
        TRANSITIONS
            .iter()
            .find(|(from, _)| *from == self)
            .map(|(_, to)| *to)
            .unwrap_or(&[])
    }

    /// Has a job in this state ended (it never runs again)?
    pub fn is_terminal(self) -> bool {
        TERMINAL.contains(&self)
    }

    pub fn check_transition(self, to: JobState) -> Result<(), InvalidTransition> {
        let valid = self.valid_targets();
        if valid.contains(&to) {
            Ok(())
        } else {
            Err(InvalidTransition {
                from: self,
                to,
                valid,
            })
        }
    }
}

impl JobState {
    /// May a record in this state be restored to `to`, the end a second
    /// witness (the ledger) holds for its attempt? Only a record that is
    /// not terminal, and only to a terminal state: an attempt that ended
    /// never runs again, and a terminal record is never changed.
    pub fn check_restore(self, to: JobState) -> Result<(), InvalidTransition> {
        if !self.is_terminal() && to.is_terminal() {
            Ok(())
        } else {
            let valid = if self.is_terminal() { &[] } else { TERMINAL };
            Err(InvalidTransition {
                from: self,
                to,
                valid,
            })
        }
    }
}

impl std::str::FromStr for JobState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown job state {s:?}; valid: {}",
                    valid_list(&JobState::ALL)
                )
            })
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse_from_their_names_only() {
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>(), Ok(s));
        }
        assert!("Running".parse::<JobState>().is_err());
    }

    #[test]
    fn an_ended_job_only_ever_moves_from_succeeded_to_merged() {
        for s in TERMINAL.iter().copied() {
            assert!(s.is_terminal());
            for to in JobState::ALL {
                let may = s == Succeeded && to == Merged;
                assert_eq!(s.check_transition(to).is_ok(), may, "{s} -> {to}");
            }
        }
    }

    #[test]
    fn merged_is_reached_from_publishing_and_succeeded_only() {
        for s in JobState::ALL {
            let may = matches!(s, Publishing | Succeeded);
            assert_eq!(s.check_transition(Merged).is_ok(), may, "{s}");
        }
        assert!(Merged.valid_targets().is_empty());
    }

    #[test]
    fn nothing_goes_backwards_to_queued() {
        for s in JobState::ALL {
            assert!(s.check_transition(Queued).is_err(), "{s} -> queued");
        }
    }

    #[test]
    fn rejected_only_from_queued() {
        for s in JobState::ALL {
            assert_eq!(s.check_transition(Rejected).is_ok(), s == Queued, "{s}");
        }
    }

    #[test]
    fn a_job_that_never_started_is_cancelled_not_aborted() {
        assert_eq!(Queued.stopped_by_request(), Cancelled);
        assert!(Queued.check_transition(Cancelled).is_ok());
        assert!(Queued.check_transition(Aborted).is_err());
        for s in [Preparing, Running, Publishing] {
            assert_eq!(s.stopped_by_request(), Aborted);
            assert!(s.check_transition(Aborted).is_ok(), "{s}");
            assert!(s.check_transition(Cancelled).is_err(), "{s}");
        }
    }

    #[test]
    fn every_state_without_a_way_out_is_terminal() {
        for s in JobState::ALL {
            if s.valid_targets().is_empty() {
                assert!(s.is_terminal(), "{s}");
            }
        }
    }

    #[test]
    fn setup_failures_are_found_before_publishing() {
        for s in JobState::ALL {
            let may = matches!(s, Queued | Preparing | Running);
            assert_eq!(s.check_transition(SetupFailed).is_ok(), may, "{s}");
        }
    }

    #[test]
    fn error_names_the_valid_targets() {
        let err = Running.check_transition(Queued).expect_err("backwards");
        let msg = err.to_string();
        assert!(msg.contains("running -> queued"), "{msg}");
        assert!(msg.contains("publishing, succeeded"), "{msg}");
        let msg = Failed
            .check_transition(Succeeded)
            .expect_err("terminal")
            .to_string();
        assert!(msg.contains("terminal"), "{msg}");
        let msg = Succeeded
            .check_transition(Failed)
            .expect_err("ended")
            .to_string();
        assert!(
            msg.contains("valid targets from succeeded: merged"),
            "{msg}"
        );
    }

    #[test]
    fn only_an_unended_record_is_restored_and_only_to_an_end() {
        assert!(Running.check_restore(Succeeded).is_ok());
        assert!(Queued.check_restore(Succeeded).is_ok());
        assert!(Running.check_restore(Queued).is_err());
        assert!(Failed.check_restore(Succeeded).is_err());
        assert!(Succeeded.check_restore(Merged).is_err());
    }

    #[test]
    fn names_match_serde() {
        for s in JobState::ALL {
            let json = serde_json::to_string(&s).expect("serialise");
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
    }
}
