//! What a daemon and the monitors it started say to each other over the
//! monitor's stdin and stdout, after the config frame
//! (`config/handover.rs`):
//!
//! - daemon → monitor, one line per job: the id of the job to supervise
//!   next. The end of stdin (the daemon retired the monitor, or is gone)
//!   ends a monitor that waits for one.
//! - monitor → daemon, one line per job: `ended <id>` once the job is over
//!   and the monitor holds nothing of it any more, not even its lock. The
//!   monitor is then idle, waiting for its next job. Either the end is
//!   wholly recorded (its terminal `job.json`, ledger row, prompt moved),
//!   or only its terminal `job.json` is, and the line goes on with a space
//!   and a JSON object, what the row needs besides ([`Handed`]: output
//!   tails and paths): the daemon writes the row and moves the prompt
//!   (`terminal.rs`). A hand-over longer than [`HANDED_MAX`] is not made:
//!   the monitor records the end wholly itself.
//!
//! - monitor → daemon, once a job has run for a moment (`INDEX_AFTER` in
//!   `monitor/mod.rs`): `running <id>`. The daemon, whose ledger connection
//!   is open, tells the job index; a monitor whose daemon is gone does it
//!   itself. A monitor thus opens no ledger while its job runs.
//!
//! A monitor serves its jobs one after another, so a job's start costs a
//! line on a pipe instead of a fork and an exec. A monitor started for one
//! named job (`monitor <id>`) serves that job alone: its command line names
//! the job it supervises, and must stay true.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

use crate::terminal::Handed;
use jobwarden_ledger::{Artifact, PathRelation};

/// Exit status of a monitor that found its job already supervised by
/// another monitor (it changed nothing). EX_TEMPFAIL.
pub const EXIT_ALREADY_SUPERVISED: i32 = 75;

/// Exit status of a monitor that could not start its job because the
/// root's storage refuses writes (full, read-only): the job is still
/// `queued` and nothing of it ran. EX_IOERR.
pub const EXIT_NO_STORAGE: i32 = 74;

/// Longest line read for a job's id.
pub const LINE_MAX: u64 = 1024;

/// Longest hand-over a monitor makes (its JSON): the output tails are
/// 64 KiB each by default (`artifact_tail_bytes`).
pub const HANDED_MAX: usize = 1 << 20;

/// Longest report line a daemon reads.
pub const REPORT_MAX: u64 = HANDED_MAX as u64 + LINE_MAX;

/// The word that starts a monitor's report of a job's end.
const ENDED: &str = "ended ";

/// The word that starts a monitor's report that its job runs.
const RUNNING: &str = "running ";

/// What a monitor's report line says.
#[derive(Debug)]
pub enum Said<'a> {
    /// Job `id` has run for a moment: the job index may say so.
    Running(&'a str),
    /// Job `id` is over, with what its monitor handed over.
    Ended(&'a str, Option<Handed>),
}

/// The next job's id: one line; `None` at the end of the input.
pub fn next_job(input: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    std::io::Read::take(input, LINE_MAX).read_line(&mut line)?;
    Ok(line
        .strip_suffix('\n')
        .filter(|id| !id.is_empty())
        .map(str::to_owned))
}

/// The report of job `id`'s end, wholly recorded.
pub fn ended_line(id: &str) -> String {
    format!("{ENDED}{id}\n")
}

/// The report that job `id` runs.
pub fn running_line(id: &str) -> String {
    format!("{RUNNING}{id}\n")
}

/// The report of job `id`'s end with what is handed over: `None` when it
/// would be longer than [`HANDED_MAX`].
pub fn handed_line(id: &str, handed: &Handed) -> Option<String> {
    let artifacts: Vec<Value> = handed
        .artifacts
        .iter()
        .map(
            |a| json!({"kind": a.kind, "text": a.text, "truncated": a.truncated, "bytes": a.bytes}),
        )
        .collect();
    let paths: Vec<Value> = handed
        .paths
        .iter()
        .map(|(relation, path)| json!([relation.as_str(), path]))
        .collect();
    let body = json!({
        "artifacts": artifacts,
        "paths": paths,
        "record": handed.record,
        "view_behind": handed.view_behind,
    })
    .to_string();
    (body.len() <= HANDED_MAX).then(|| format!("{ENDED}{id} {body}\n"))
}

/// Tell the daemon a report `line` ([`running_line`], or that a job has
/// ended and this monitor is free: [`ended_line`], [`handed_line`]). False
/// if nobody reads any more (the daemon is gone): the monitor then does
/// the daemon's part itself (the index, the job's end) and, once its job
/// is over, exits.
pub fn report(out: &mut impl Write, line: &str) -> bool {
    out.write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// What a report line says (its newline removed); `None` if the line is
/// not a report. A hand-over that cannot be read is `Ended(id, None)`: the
/// row is then backfilled, as after a crash.
pub fn parse_report(line: &str) -> Option<Said<'_>> {
    if let Some(id) = line.strip_prefix(RUNNING) {
        return (!id.is_empty() && !id.contains(' ')).then_some(Said::Running(id));
    }
    let rest = line.strip_prefix(ENDED)?;
    let (id, body) = match rest.split_once(' ') {
        Some((id, body)) => (id, Some(body)),
        None => (rest, None),
    };
    if id.is_empty() {
        return None;
    }
    Some(Said::Ended(id, body.and_then(handed_from)))
}

fn handed_from(body: &str) -> Option<Handed> {
    let mut value: Value = serde_json::from_str(body).ok()?;
    let artifacts = value["artifacts"]
        .as_array()?
        .iter()
        .map(|a| {
            Some(Artifact {
                kind: Artifact::kind_named(a["kind"].as_str()?)?,
                text: a["text"].as_str()?.to_owned(),
                truncated: a["truncated"].as_bool()?,
                bytes: a["bytes"].as_u64()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let paths = value["paths"]
        .as_array()?
        .iter()
        .map(|p| {
            let relation = PathRelation::named(p[0].as_str()?)?;
            Some((relation, p[1].as_str()?.to_owned()))
        })
        .collect::<Option<Vec<_>>>()?;
    // A record that does not read back is left out: the daemon reads the
    // job's own.
    let record = serde_json::from_value(value["record"].take())
        .ok()
        .map(Box::new);
    Some(Handed {
        artifacts,
        paths,
        record,
        view_behind: value["view_behind"].as_bool().unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Option<(String, Option<Handed>)> {
        match parse_report(line.trim_end_matches('\n'))? {
            Said::Ended(id, h) => Some((id.to_owned(), h)),
            Said::Running(_) => None,
        }
    }

    #[test]
    fn a_report_reads_back_as_the_job_it_names() {
        let line = ended_line("01a2-b");
        let mut out = Vec::new();
        assert!(report(&mut out, &line));
        let (id, handed) = parsed(&String::from_utf8(out).expect("utf-8")).expect("a report");
        assert_eq!(id, "01a2-b");
        assert!(handed.is_none());
        assert!(parse_report("ended ").is_none());
        assert!(parse_report("started 01a2").is_none());
    }

    #[test]
    fn a_running_report_names_one_job() {
        let mut out = Vec::new();
        assert!(report(&mut out, &running_line("01a2-b")));
        let text = String::from_utf8(out).expect("utf-8");
        assert!(matches!(
            parse_report(text.trim_end_matches('\n')),
            Some(Said::Running("01a2-b"))
        ));
        // Not an end: a daemon must not free the monitor for it.
        assert!(parsed(&text).is_none());
        assert!(parse_report("running ").is_none());
        assert!(parse_report("running a b").is_none());
    }

    #[test]
    fn a_hand_over_reads_back_whole_and_a_foreign_one_is_not_trusted() {
        let handed = Handed {
            artifacts: vec![Artifact {
                kind: "stderr_tail",
                text: "line one\n\"quoted\" \u{1b}[31m é\n".into(),
                truncated: true,
                bytes: 70_000,
            }],
            paths: vec![(PathRelation::Affected, "/w/src/a b.rs".into())],
            ..Handed::default()
        };
        let line = handed_line("j1", &handed).expect("short");
        assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
        let (id, back) = parsed(&line).expect("a report");
        assert_eq!(id, "j1");
        let back = back.expect("handed over");
        assert_eq!(back.artifacts[0].kind, "stderr_tail");
        assert_eq!(back.artifacts[0].text, handed.artifacts[0].text);
        assert_eq!(back.artifacts[0].bytes, 70_000);
        assert!(back.artifacts[0].truncated);
        assert_eq!(back.paths, handed.paths);
        // An unknown kind, or no JSON: the end is still reported, with
        // nothing handed over (the row is backfilled).
        let foreign = r#"ended j2 {"artifacts":[{"kind":"x","text":"","truncated":false,"bytes":0}],"paths":[]}"#;
        assert_eq!(
            parsed(foreign).map(|(id, h)| (id, h.is_none())),
            Some(("j2".into(), true))
        );
        assert_eq!(
            parsed("ended j3 {").map(|(id, h)| (id, h.is_none())),
            Some(("j3".into(), true))
        );
    }

    #[test]
    fn a_hand_over_carries_the_terminal_record_and_whether_its_view_is_behind() {
        let prompt = jobwarden_model::layout::PromptName {
            project: "p".into(),
            name: "n".into(),
        };
        let id = jobwarden_model::job::JobId::generate();
        let mut rec =
            jobwarden_model::job::JobRecord::new_queued(id, &prompt, "inbox/p/n.md".into(), "h");
        rec.state = jobwarden_model::job::JobState::Succeeded;
        let handed = Handed {
            record: Some(Box::new(rec.clone())),
            view_behind: true,
            ..Handed::default()
        };
        let line = handed_line("j1", &handed).expect("short");
        assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
        let back = parsed(&line).and_then(|(_, h)| h).expect("handed over");
        let record = back.record.expect("the record");
        assert_eq!(record.job_id, rec.job_id);
        assert_eq!(record.state, rec.state);
        assert!(back.view_behind);
        // A record that does not read back is left out, the rest kept.
        let garbled = r#"ended j2 {"artifacts":[],"paths":[],"record":{"state":7}}"#;
        let back = parsed(garbled).and_then(|(_, h)| h).expect("handed over");
        assert!(back.record.is_none() && !back.view_behind);
    }

    #[test]
    fn a_hand_over_too_long_is_not_made() {
        let handed = Handed {
            artifacts: vec![Artifact {
                kind: "stdout_tail",
                text: "x".repeat(HANDED_MAX),
                truncated: false,
                bytes: HANDED_MAX as u64,
            }],
            paths: vec![],
            ..Handed::default()
        };
        assert!(handed_line("j1", &handed).is_none());
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
