//! `jobwarden events <job> [--seq N | --last N] [--op OP…] [--from-seq N]
//! [--inputs-only] [--summary] [--json]`: a job's lifecycle events from
//! `events.jsonl`.
//!
//! `--seq N` is exactly event N (exit 1 naming the numbers there are when
//! it has none). Other filters combine: `--op`, `--from-seq` and
//! `--inputs-only` select, then `--last` keeps the newest of what is left.
//! A job whose events were off answers with none, says so, and exits 0. `--summary` counts what the filters kept, per
//! op. `--op` takes only the ops of [`jobwarden_model::events::Op`] (clap refuses
//! another, listing them). Lines that cannot be read (a torn last line
//! after a crash) are skipped and counted. Nothing matched: an empty
//! result and exit 1. JSON shapes in `docs/cli-json.md`.

use std::process::ExitCode;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;

use super::output::{
    Column, Table, fmt_ago, fmt_duration, print_json, print_lines as print_lines_out,
};
use super::{EXIT_NO, No};
use crate::cli::{EventsArgs, GlobalArgs};
use jobwarden_engine::lookup::Target;
use jobwarden_model::events::{self, ReadEvents};
use jobwarden_model::job::JobId;
use jobwarden_sys::clock::Timestamp;

/// Width the human output fits into.
const WIDTH: usize = 80;
/// The fields column is never cut narrower than this.
const MIN_FIELDS: usize = 24;

pub fn run(global: &GlobalArgs, args: &EventsArgs) -> anyhow::Result<ExitCode> {
    show(global, args)
}

fn show(global: &GlobalArgs, args: &EventsArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_existing(global)?;
    let id = {
        let ledger = super::open_ledger(&layout)?;
        match super::resolve_target(&layout, ledger.as_ref(), &args.job)? {
            Target::Job(id) => id,
            Target::Waiting { prompt, .. } => {
                let ledger = ledger.as_ref();
                return Err(super::waiting::not_started(
                    &layout, &config, ledger, &prompt, "events",
                ));
            }
        }
    };
    if !layout.run_dir(&id).is_dir() {
        return Err(No(format!(
            "job {id} has no run folder under {} (pruned by retention?)",
            layout.runs().display()
        ))
        .into());
    }
    let read = read_events(layout.root(), &layout.events(&id))?;
    let total = read.events.len();
    let disabled = events_were_off(&layout, &config, &id);
    if let Some(seq) = args.seq
        && !disabled
    {
        check_has(&read.events, seq, &id)?;
    }
    let shown = select(read.events, args);
    let counts = Counts {
        total,
        shown: shown.len(),
        unreadable: read.unreadable,
    };
    let now = Timestamp::now().epoch_ms();
    let note = disabled.then_some(DISABLED_NOTE);
    match (args.summary, args.json) {
        (false, false) => print_lines(&shown, now)?,
        (false, true) => print_json(&EventsJson::new(&id, counts, &shown, note))?,
        (true, false) => print_summary(&Summary::of(&shown), now)?,
        (true, true) => print_json(&SummaryJson::new(&id, counts, Summary::of(&shown)))?,
    }
    if !args.json {
        jobwarden_sys::logging::line(counts.footer());
        if let Some(note) = note {
            jobwarden_sys::logging::line(format_args!("jobwarden: {note}"));
        }
    }
    Ok(if shown.is_empty() && !disabled {
        ExitCode::from(EXIT_NO)
    } else {
        ExitCode::SUCCESS
    })
}

/// The job's events; none if the file does not exist (events are off for
/// the job, or none was written yet), or if it is not a regular file (a
/// FIFO, a symlink: refused with a warning, never read).
fn read_events(root: &std::path::Path, path: &std::path::Path) -> anyhow::Result<ReadEvents> {
    match events::read_counted(root, path) {
        Ok(read) => {
            if read.cut {
                jobwarden_sys::logging::line(format_args!(
                    "warning: {} is larger than {}; only its start is shown",
                    path.display(),
                    super::output::fmt_bytes(events::MAX_READ_BYTES)
                ));
            }
            Ok(read)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ReadEvents::default()),
        Err(e) if jobwarden_sys::fsio::is_refusal(&e) => {
            jobwarden_sys::logging::line(format_args!("warning: {e}"));
            Ok(ReadEvents::default())
        }
        Err(e) => Err(e.into()),
    }
}

/// What a job whose events were off answers.
const DISABLED_NOTE: &str = "events were off for this job (`events = false` in the config or its front matter): only its journal's lines, its record's changes, were written";

/// Were the job's events off (its record says so, or the config does)?
fn events_were_off(
    layout: &jobwarden_model::layout::Layout,
    config: &jobwarden_model::config::Config,
    id: &JobId,
) -> bool {
    jobwarden_model::job::JobRecord::load_job(layout, id).is_ok_and(|rec| !config.events_for(&rec))
}

/// `--seq N` names an event the file has; else a "no" naming those it has.
fn check_has(events: &[Value], seq: u64, id: &JobId) -> anyhow::Result<()> {
    let seqs = || events.iter().filter_map(|e| e["seq"].as_u64());
    if seqs().any(|s| s == seq) {
        return Ok(());
    }
    let range = match (seqs().min(), seqs().max()) {
        (Some(lo), Some(hi)) => format!("its events are {lo} to {hi}"),
        _ => "it has no events".to_owned(),
    };
    Err(No(format!("job {id} has no event {seq}: {range}")).into())
}

/// Apply the filters: `--seq`, `--op`, `--from-seq` and `--inputs-only`,
/// then `--last`.
fn select(events: Vec<Value>, args: &EventsArgs) -> Vec<Value> {
    let inputs: Vec<&str> = events::INPUT_OPS.iter().map(|op| op.as_str()).collect();
    let mut kept: Vec<Value> = events
        .into_iter()
        .filter(|e| args.seq.is_none_or(|n| e["seq"].as_u64() == Some(n)))
        .filter(|e| args.op.is_empty() || args.op.iter().any(|op| op == op_of(e)))
        .filter(|e| {
            args.from_seq
                .is_none_or(|min| e["seq"].as_u64().is_some_and(|s| s >= min))
        })
        .filter(|e| !args.inputs_only || inputs.contains(&op_of(e)))
        .collect();
    if let Some(last) = args.last {
        let keep = usize::try_from(last).unwrap_or(usize::MAX);
        kept.drain(..kept.len().saturating_sub(keep));
    }
    kept
}

fn op_of(event: &Value) -> &str {
    event["op"].as_str().unwrap_or("?")
}

/// An event's `ts` in epoch ms, if it has a readable one.
fn ts_ms(event: &Value) -> Option<u64> {
    let ts = event["ts"].as_str()?;
    humantime::parse_rfc3339_weak(ts)
        .ok()
        .map(|t| Timestamp::from(t).epoch_ms())
}

#[derive(Debug, Clone, Copy, Serialize)]
struct Counts {
    /// Readable events in the file.
    total: usize,
    /// Events the filters kept.
    shown: usize,
    /// Lines that could not be read.
    unreadable: usize,
}

impl Counts {
    fn footer(&self) -> String {
        let mut text = format!("{} of {} events", self.shown, self.total);
        match self.unreadable {
            0 => {}
            1 => text.push_str("; 1 unreadable line skipped"),
            n => text.push_str(&format!("; {n} unreadable lines skipped")),
        }
        text
    }
}

// -- one line per event --------------------------------------------------------

/// `seq  ago  op  fields`, aligned, each line cut to fit 80 columns.
fn print_lines(events: &[Value], now: u64) -> anyhow::Result<()> {
    const COLUMNS: [Column; 4] = [
        Column::right("SEQ", 20).untitled(),
        Column::left("AGE", 12).untitled(),
        Column::left("OP", 24).untitled(),
        Column::left("FIELDS", usize::MAX).untitled(),
    ];
    let mut table = Table::new(&COLUMNS).fit_to(WIDTH, MIN_FIELDS);
    for e in events {
        let seq = e["seq"].as_u64().map_or("?".into(), |s| s.to_string());
        let ago = ts_ms(e).map_or("?".into(), |t| fmt_ago(t, now));
        table.push(vec![
            seq.into(),
            ago.into(),
            op_of(e).into(),
            fields(e).into(),
        ]);
    }
    print_lines_out(&table.lines(false))
}

/// The fields other than `seq`, `op` and `ts`, as compact `key=value`
/// pairs. A string is bare unless it needs quotes to read unambiguously.
fn fields(event: &Value) -> String {
    let Some(obj) = event.as_object() else {
        return String::new();
    };
    obj.iter()
        .filter(|(k, _)| !matches!(k.as_str(), "seq" | "op" | "ts"))
        .map(|(k, v)| format!("{k}={}", compact(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s)
            if !s.is_empty()
                && !s.contains(|c: char| c.is_whitespace() || c == '"' || c == '=') =>
        {
            s.clone()
        }
        other => other.to_string(),
    }
}

// -- summary -------------------------------------------------------------------

/// Per op (in order of first appearance): how many, and the first and
/// last time.
#[derive(Debug, Default)]
struct Summary {
    ops: Vec<(String, OpSummary)>,
    first: Option<Moment>,
    last: Option<Moment>,
}

#[derive(Debug, Serialize)]
struct OpSummary {
    count: usize,
    first: Option<Moment>,
    last: Option<Moment>,
}

/// A time as the event wrote it (exact, for JSON) and in epoch ms.
#[derive(Debug, Clone)]
struct Moment {
    text: String,
    ms: u64,
}

impl Serialize for Moment {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl Moment {
    fn of(event: &Value) -> Option<Moment> {
        Some(Moment {
            text: event["ts"].as_str()?.to_owned(),
            ms: ts_ms(event)?,
        })
    }

    /// The earlier (`earliest`) or later of two optional moments.
    fn pick(a: Option<Moment>, b: Option<Moment>, earliest: bool) -> Option<Moment> {
        match (a, b) {
            (Some(a), Some(b)) => {
                let better = if earliest { b.ms < a.ms } else { b.ms > a.ms };
                Some(if better { b } else { a })
            }
            (a, b) => a.or(b),
        }
    }
}

impl Summary {
    fn of(events: &[Value]) -> Summary {
        let mut summary = Summary::default();
        for event in events {
            let at = Moment::of(event);
            let op = op_of(event);
            let pos = match summary.ops.iter().position(|(o, _)| o == op) {
                Some(pos) => pos,
                None => {
                    let fresh = OpSummary {
                        count: 0,
                        first: None,
                        last: None,
                    };
                    summary.ops.push((op.to_owned(), fresh));
                    summary.ops.len() - 1
                }
            };
            let entry = &mut summary.ops[pos].1;
            entry.count += 1;
            entry.first = Moment::pick(entry.first.take(), at.clone(), true);
            entry.last = Moment::pick(entry.last.take(), at.clone(), false);
            summary.first = Moment::pick(summary.first.take(), at.clone(), true);
            summary.last = Moment::pick(summary.last.take(), at, false);
        }
        summary
    }

    fn count(&self) -> usize {
        self.ops.iter().map(|(_, o)| o.count).sum()
    }

    fn span_ms(&self) -> Option<u64> {
        Some(
            self.last
                .as_ref()?
                .ms
                .saturating_sub(self.first.as_ref()?.ms),
        )
    }
}

/// `op  count  first  last`, then a `total` row with the span.
fn print_summary(summary: &Summary, now: u64) -> anyhow::Result<()> {
    const COLUMNS: [Column; 4] = [
        Column::left("OP", 24),
        Column::right("COUNT", 8),
        Column::left("FIRST", 12),
        Column::left("LAST", 40),
    ];
    if summary.ops.is_empty() {
        return Ok(());
    }
    let ago = |m: &Option<Moment>| m.as_ref().map_or("?".into(), |m| fmt_ago(m.ms, now));
    let mut table = Table::new(&COLUMNS);
    for (op, o) in &summary.ops {
        table.push(vec![
            op.as_str().into(),
            o.count.to_string().into(),
            ago(&o.first).into(),
            ago(&o.last).into(),
        ]);
    }
    let span = summary
        .span_ms()
        .map_or(String::new(), |ms| format!("  (span {})", fmt_duration(ms)));
    table.push(vec![
        "total".into(),
        summary.count().to_string().into(),
        ago(&summary.first).into(),
        format!("{}{span}", ago(&summary.last)).into(),
    ]);
    print_lines_out(&table.lines(false))
}

// -- JSON ----------------------------------------------------------------------

#[derive(Serialize)]
struct EventsJson<'a> {
    job_id: &'a JobId,
    total: usize,
    shown: usize,
    unreadable: usize,
    events: &'a [Value],
    /// Set when the job's events were off: why it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
}

impl<'a> EventsJson<'a> {
    fn new(id: &'a JobId, c: Counts, events: &'a [Value], note: Option<&'static str>) -> Self {
        EventsJson {
            job_id: id,
            total: c.total,
            shown: c.shown,
            unreadable: c.unreadable,
            events,
            note,
        }
    }
}

#[derive(Serialize)]
struct SummaryJson<'a> {
    job_id: &'a JobId,
    total: usize,
    shown: usize,
    unreadable: usize,
    ops: OpsJson,
    first: Option<Moment>,
    last: Option<Moment>,
}

impl<'a> SummaryJson<'a> {
    fn new(id: &'a JobId, c: Counts, summary: Summary) -> Self {
        SummaryJson {
            job_id: id,
            total: c.total,
            shown: c.shown,
            unreadable: c.unreadable,
            ops: OpsJson(summary.ops),
            first: summary.first,
            last: summary.last,
        }
    }
}

/// The ops as a JSON object, keys in order of first appearance.
struct OpsJson(Vec<(String, OpSummary)>);

impl Serialize for OpsJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (op, summary) in &self.0 {
            map.serialize_entry(op, summary)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(last: Option<u32>, op: &[&str], from_seq: Option<u64>) -> EventsArgs {
        EventsArgs {
            job: "x".into(),
            last,
            op: op.iter().map(|s| s.to_string()).collect(),
            seq: None,
            from_seq,
            inputs_only: false,
            summary: false,
            json: false,
        }
    }

    fn sample() -> Vec<Value> {
        let ops = ["claimed", "queued", "started", "signal", "signal", "exited"];
        ops.iter()
            .enumerate()
            .map(|(i, op)| json!({"seq": i + 1, "op": op, "ts": format!("2026-01-01T00:00:0{i}.000Z")}))
            .collect()
    }

    fn seqs(events: &[Value]) -> Vec<u64> {
        events.iter().filter_map(|e| e["seq"].as_u64()).collect()
    }

    #[test]
    fn filters_combine_and_last_applies_after_the_others() {
        let picked = select(sample(), &args(Some(1), &["signal", "claimed"], None));
        assert_eq!(seqs(&picked), vec![5]);
        let picked = select(sample(), &args(None, &["signal", "claimed"], Some(2)));
        assert_eq!(seqs(&picked), vec![4, 5]);
        let picked = select(sample(), &args(Some(10), &[], Some(6)));
        assert_eq!(seqs(&picked), vec![6]);
        assert!(select(sample(), &args(None, &["nope"], None)).is_empty());
        let exact = EventsArgs {
            seq: Some(4),
            ..args(None, &[], None)
        };
        assert_eq!(seqs(&select(sample(), &exact)), vec![4]);
        let inputs = EventsArgs {
            inputs_only: true,
            ..args(None, &[], None)
        };
        assert_eq!(seqs(&select(sample(), &inputs)), vec![1]);
        let range = check_has(&sample(), 9, &JobId::parse("j1").expect("id"))
            .expect_err("no event 9")
            .to_string();
        assert!(range.contains("its events are 1 to 6"), "{range}");
    }

    #[test]
    fn summary_counts_per_op_in_order_of_first_appearance() {
        let s = Summary::of(&sample());
        let ops: Vec<(&str, usize)> = s.ops.iter().map(|(o, x)| (o.as_str(), x.count)).collect();
        assert_eq!(
            ops,
            vec![
                ("claimed", 1),
                ("queued", 1),
                ("started", 1),
                ("signal", 2),
                ("exited", 1)
            ]
        );
        let signal = &s.ops[3].1;
        assert_eq!(
            signal.first.as_ref().map(|m| m.text.as_str()),
            Some("2026-01-01T00:00:03.000Z")
        );
        assert_eq!(
            signal.last.as_ref().map(|m| m.text.as_str()),
            Some("2026-01-01T00:00:04.000Z")
        );
        assert_eq!(s.span_ms(), Some(5000));
    }

    #[test]
    fn fields_are_compact_and_quoted_only_when_needed() {
        let e = json!({"seq": 1, "op": "started", "ts": "t", "pid": 42, "argv": ["a", "b"], "why": "two words", "path": "inbox/p/n.running.md"});
        let f = fields(&e);
        assert!(f.contains("pid=42"), "{f}");
        assert!(f.contains(r#"argv=["a","b"]"#), "{f}");
        assert!(f.contains(r#"why="two words""#), "{f}");
        assert!(f.contains("path=inbox/p/n.running.md"), "{f}");
        assert!(!f.contains("seq=") && !f.contains("ts="), "{f}");
    }
}
