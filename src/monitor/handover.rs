//! What a daemon and the monitors it started say to each other over the
//! monitor's stdin and stdout, after the config frame
//! (`config/handover.rs`):
//!
//! - daemon → monitor, one line per job: the id of the job to supervise
//!   next. The end of stdin (the daemon retired the monitor, or is gone)
//!   ends a monitor that waits for one.
//! - monitor → daemon, one line per job: `ended <id>` once the job is over
//!   and wholly recorded (its terminal `job.json`, ledger row and prompt
//!   moved) and the monitor holds nothing of it any more, not even its
//!   lock. The monitor is then idle, waiting for its next job.
//!
//! A monitor serves its jobs one after another, so a job's start costs a
//! line on a pipe instead of a fork and an exec. A monitor started for one
//! named job (`monitor <id>`) serves that job alone: its command line names
//! the job it supervises, and must stay true.

use std::io::{BufRead, Write};

/// Longest line read for a job's id, or for a monitor's report.
pub const LINE_MAX: u64 = 1024;

/// The word that starts a monitor's report of a job's end.
const ENDED: &str = "ended ";

/// The next job's id: one line; `None` at the end of the input.
pub fn next_job(input: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    std::io::Read::take(input, LINE_MAX).read_line(&mut line)?;
    Ok(line
        .strip_suffix('\n')
        .filter(|id| !id.is_empty())
        .map(str::to_owned))
}

/// Tell the daemon that job `id` has ended and this monitor is free. False
/// if nobody reads any more (the daemon is gone): the monitor then exits.
pub fn report_ended(out: &mut impl Write, id: &str) -> bool {
    out.write_all(format!("{ENDED}{id}\n").as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// The job id a report line says has ended (its newline removed).
pub fn ended_job(line: &str) -> Option<&str> {
    line.strip_prefix(ENDED).filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_as_the_job_it_names() {
        let mut out = Vec::new();
        assert!(report_ended(&mut out, "01a2-b"));
        let line = String::from_utf8(out).expect("utf-8");
        assert_eq!(ended_job(line.trim_end_matches('\n')), Some("01a2-b"));
        assert_eq!(ended_job("ended "), None);
        assert_eq!(ended_job("started 01a2"), None);
    }

    #[test]
    fn job_lines_end_at_the_end_of_input() {
        let mut input = std::io::Cursor::new(b"one\ntwo\n\nthree".to_vec());
        assert_eq!(next_job(&mut input).expect("read"), Some("one".into()));
        assert_eq!(next_job(&mut input).expect("read"), Some("two".into()));
        // An empty line, and a line cut short by the end of input, are not ids.
        assert_eq!(next_job(&mut input).expect("read"), None);
        assert_eq!(next_job(&mut input).expect("read"), None);
        assert_eq!(next_job(&mut input).expect("read"), None);
    }
}
