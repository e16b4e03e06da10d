//! The exit codes of every command, in one table: [`Exit`]. `docs/exit-codes.md`
//! prints the same table (a test keeps the two in step).
//!
//! Commands that wait for jobs (`wait`, `submit --wait`, `abort --wait`,
//! `logs -f`) end with the code of the jobs' outcome; when several jobs end
//! differently, the worst one decides, in the order of [`PRECEDENCE`].
//! Every other command uses the first four codes only (`status` alone
//! uses 3).
//!
//! The outcome codes keep the conventions a shell user knows: 124 for a
//! timeout (as `timeout(1)`), 130 for a job stopped on request (as Ctrl-C),
//! and the `sysexits.h` values for input refused (65, `EX_DATAERR`), a
//! temporary failure worth retrying (75, `EX_TEMPFAIL`) and a setup to fix
//! (78, `EX_CONFIG`).

use std::process::ExitCode;

use jobwarden_model::job::JobState;

/// What a command's exit status says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Exit {
    /// Done; for the waiting commands: every job succeeded.
    Success = 0,
    /// A clean "no": no such job, nothing matched.
    No = 1,
    /// An error: usage, config, I/O, or a job whose record could not be read.
    Error = 2,
    /// `status`: no daemon runs on the root (as `systemctl is-active`).
    NotRunning = 3,
    /// A job failed (its command's exit code is in its record).
    Failed = 4,
    /// `wait --timeout` ran out with jobs or prompts still waiting.
    Unfinished = 5,
    /// A prompt was rejected before anything ran (bad front matter, …).
    Rejected = 65,
    /// A job's supervisor died (its prompt may have been requeued).
    Interrupted = 75,
    /// A job could not start: program not found, workdir missing, a
    /// `prepare` step that cannot start.
    SetupFailed = 78,
    /// A job ran past its timeout.
    TimedOut = 124,
    /// A job was aborted.
    Aborted = 130,
    /// A job was cancelled: aborted before it started.
    Cancelled = 131,
}

/// Every code, in numeric order.
pub const ALL: [Exit; 12] = [
    Exit::Success,
    Exit::No,
    Exit::Error,
    Exit::NotRunning,
    Exit::Failed,
    Exit::Unfinished,
    Exit::Rejected,
    Exit::Interrupted,
    Exit::SetupFailed,
    Exit::TimedOut,
    Exit::Aborted,
    Exit::Cancelled,
];

/// Which code wins when jobs end differently: the first in this list
/// that any of them has. Input and setup to fix come before a failed run;
/// a deliberate stop (abort, cancel) after every failure; jobs still
/// unfinished at `--timeout` only before success. A job whose record
/// cannot be read (`error`) makes the whole answer unsure, so it comes
/// first.
pub const PRECEDENCE: [Exit; 10] = [
    Exit::Error,
    Exit::Rejected,
    Exit::SetupFailed,
    Exit::Failed,
    Exit::TimedOut,
    Exit::Interrupted,
    Exit::Aborted,
    Exit::Cancelled,
    Exit::Unfinished,
    Exit::Success,
];

impl Exit {
    /// The number the process exits with.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The name `--json` output gives it.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Success => "succeeded",
            Exit::No => "not_found",
            Exit::Error => "error",
            Exit::NotRunning => "not_running",
            Exit::Failed => "failed",
            Exit::Unfinished => "unfinished",
            Exit::Rejected => "rejected",
            Exit::Interrupted => "interrupted",
            Exit::SetupFailed => "setup_failed",
            Exit::TimedOut => "timed_out",
            Exit::Aborted => "aborted",
            Exit::Cancelled => "cancelled",
        }
    }

    /// The code of a job that ended in `state`; `None` while it has not.
    pub fn of_state(state: JobState) -> Option<Exit> {
        Some(match state {
            JobState::Succeeded | JobState::Merged => Exit::Success,
            JobState::Failed => Exit::Failed,
            JobState::TimedOut => Exit::TimedOut,
            JobState::Aborted => Exit::Aborted,
            JobState::Interrupted => Exit::Interrupted,
            JobState::Rejected => Exit::Rejected,
            JobState::Cancelled => Exit::Cancelled,
            JobState::SetupFailed => Exit::SetupFailed,
            JobState::Queued | JobState::Preparing | JobState::Running | JobState::Publishing => {
                return None;
            }
        })
    }

    /// The worse of two codes, by [`PRECEDENCE`].
    pub fn worst(self, other: Exit) -> Exit {
        if rank(other) < rank(self) {
            other
        } else {
            self
        }
    }

    /// The worst of `codes`; [`Exit::Success`] when there are none.
    pub fn worst_of(codes: impl IntoIterator<Item = Exit>) -> Exit {
        codes.into_iter().fold(Exit::Success, Exit::worst)
    }
}

/// Its place in [`PRECEDENCE`]; codes no job ends with come last.
fn rank(exit: Exit) -> usize {
    PRECEDENCE
        .iter()
        .position(|&e| e == exit)
        .unwrap_or(PRECEDENCE.len())
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_every_end_has_a_rank() {
        for pair in ALL.windows(2) {
            assert!(pair[0].code() < pair[1].code(), "{pair:?}");
        }
        for state in JobState::ALL {
            match Exit::of_state(state) {
                Some(exit) => assert!(state.is_terminal() && rank(exit) < PRECEDENCE.len()),
                None => assert!(!state.is_terminal(), "{state}"),
            }
        }
    }

    #[test]
    fn the_worst_outcome_wins_whatever_the_order() {
        let ends = [Exit::Success, Exit::Aborted, Exit::Failed, Exit::TimedOut];
        assert_eq!(Exit::worst_of(ends), Exit::Failed);
        assert_eq!(Exit::worst_of(ends.into_iter().rev()), Exit::Failed);
        assert_eq!(Exit::worst_of([]), Exit::Success);
        assert_eq!(Exit::Unfinished.worst(Exit::Success), Exit::Unfinished);
        assert_eq!(Exit::Unfinished.worst(Exit::Aborted), Exit::Aborted);
        assert_eq!(Exit::Rejected.worst(Exit::Failed), Exit::Rejected);
    }

    /// `docs/exit-codes.md` lists every code with its name, and the
    /// precedence in this order.
    #[test]
    fn the_documented_table_is_this_one() {
        let doc = include_str!("../../docs/exit-codes.md");
        let rows: Vec<(u8, String)> = doc
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let code = cells.get(1)?.parse().ok()?;
                Some((code, cells.get(2)?.trim_matches('`').to_owned()))
            })
            .collect();
        let want: Vec<(u8, String)> = ALL
            .iter()
            .map(|e| (e.code(), e.name().to_owned()))
            .collect();
        assert_eq!(rows, want, "docs/exit-codes.md's table");

        let line = doc
            .lines()
            .find(|l| l.starts_with("Precedence"))
            .expect("a line starting with \"Precedence\"");
        let named: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
        let want: Vec<&str> = PRECEDENCE.iter().map(|e| e.name()).collect();
        assert_eq!(named, want, "docs/exit-codes.md's precedence");
    }
}
