//! Property tests for every parser of outside input the model holds:
//! prompt front matter, `job.json`, `events.jsonl` lines, ABORT and pause
//! markers, the config file with its durations and sizes, and the config
//! handover on a monitor's stdin. Whatever the input, no parser panics;
//! what one accepts round-trips through what jobwarden writes.

// Fixtures are written with plain std writes; the persistence rules
// (clippy.toml) are for what jobwarden itself writes.
#![allow(clippy::disallowed_methods)]

use proptest::prelude::*;
use serde_json::{Value, json};

use jobwarden_model::config::{self, ConfigSource};
use jobwarden_model::events::Op;
use jobwarden_model::front_matter;
use jobwarden_model::job::{JobId, JobRecord};

/// Few enough cases that the whole suite stays fast on a small machine
/// (`PROPTEST_CASES` asks for more, for a deeper search); failures are
/// reported, not persisted to files.
fn cases(n: u32) -> ProptestConfig {
    let wanted = std::env::var("PROPTEST_CASES").ok();
    ProptestConfig {
        cases: wanted.and_then(|v| v.parse().ok()).unwrap_or(n),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// -- front matter ---------------------------------------------------------

/// Text shaped like a prompt: an optional fence, `key: value` lines (known
/// keys and others, odd spacing, CRLF), an optional closing fence, a body.
fn prompt_like() -> impl Strategy<Value = String> {
    let right = prop_oneof![
        Just("job_id: 01a2055f-3ed3-751f-8106-eaae830690f4".to_owned()),
        "profile: [a-z]{1,8}",
        "timeout: [0-9]{1,4}(ms|s|m|h)",
        "max_attempts: [0-9]{1,3}",
        "priority: -?[0-9]{1,4}",
        "events: (true|false)",
        Just("# a comment".to_owned()),
        Just(String::new()),
    ];
    let wrong = (
        prop_oneof![
            prop::sample::select(front_matter::KEYS.to_vec()).prop_map(str::to_owned),
            "[a-z_ ]{0,10}",
        ],
        ":[ \t]{0,2}",
        prop_oneof![
            "[0-9]{0,12}(ms|s|h|d)?",
            "-?[0-9]{1,12}",
            "\"[^\"\n]{0,10}\"?",
            "[^\n]{0,24}"
        ],
    )
        .prop_map(|(k, c, v)| format!("{k}{c}{v}"));
    let line = (prop_oneof![4 => right, 1 => wrong], "\r?\n").prop_map(|(l, nl)| l + &nl);
    (
        prop_oneof![4 => Just("---\n"), 1 => Just("---\r\n"), 1 => Just("")],
        prop::collection::vec(line, 0..6),
        prop_oneof![4 => Just("---\n"), 1 => Just("---"), 1 => Just("")],
        "[^\0]{0,40}",
    )
        .prop_map(|(open, lines, close, body)| format!("{open}{}{close}{body}", lines.concat()))
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn front_matter_never_panics(text in "\\PC{0,200}") {
        let _ = front_matter::parse(&text);
    }

    #[test]
    fn front_matter_accepted_keeps_its_body_and_takes_a_job_id(text in prompt_like()) {
        let Ok(parsed) = front_matter::parse(&text) else { return Ok(()) };
        prop_assert!(text.is_char_boundary(parsed.body_start));
        prop_assert!(parsed.body_start <= text.len());
        if parsed.front.job_id.is_some() {
            return Ok(());
        }
        let id = JobId::generate();
        let with_id = front_matter::with_job_id(&text, &parsed, &id);
        let again = front_matter::parse(&with_id).expect("adding a job id keeps the block valid");
        prop_assert_eq!(again.front.job_id.as_ref(), Some(&id));
        prop_assert_eq!(&with_id[again.body_start..], &text[parsed.body_start..]);
        let mut front = again.front.clone();
        front.job_id = None;
        prop_assert_eq!(front, parsed.front);
    }
}

// -- job.json -------------------------------------------------------------

/// Field names of `job.json`, so generated objects get past the first ones.
const RECORD_KEYS: &[&str] = &[
    "schema_version",
    "job_id",
    "attempt",
    "retry_of",
    "project",
    "name",
    "inbox_path",
    "prompt_sha256",
    "profile",
    "state",
    "state_reason",
    "failure_stage",
    "created_at",
    "started_at",
    "finished_at",
    "updated_at",
    "heartbeat_at",
    "timeout_at",
    "command",
    "workdir",
    "monitor_pid",
    "monitor_start_time",
    "pid",
    "pgid",
    "exit_code",
    "signal",
    "abort_requested_at",
    "log_path",
    "log_bytes",
    "log_truncated",
    "last_output_at",
    "result_ref",
    "archive_path",
    "outcome",
    "disposition",
    "host",
    "version",
    "route",
    "captures",
    "priority",
    "overrides",
    "future_field",
];

/// Any JSON value, small.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
        Just(json!("2026-11-22T08:00:00.000Z")),
        Just(json!("01a2055f-3ed3-751f-8106-eaae830690f4")),
        Just(json!("succeeded")),
    ];
    leaf.prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid record as JSON, with some fields replaced by arbitrary values.
fn record_like() -> impl Strategy<Value = Value> {
    let base = serde_json::to_value(sample_record()).unwrap_or(Value::Null);
    prop::collection::vec(
        (prop::sample::select(RECORD_KEYS.to_vec()), json_value()),
        0..4,
    )
    .prop_map(move |edits| {
        let mut v = base.clone();
        for (k, val) in edits {
            v[k] = val;
        }
        v
    })
}

fn sample_record() -> JobRecord {
    let prompt = jobwarden_model::layout::PromptName {
        project: "api/v2".into(),
        name: "fix-login".into(),
    };
    JobRecord::new_queued(
        JobId::generate(),
        &prompt,
        "inbox/api/v2/fix-login.running.md".into(),
        "host",
    )
}

/// A record that parsed serialises to JSON that parses to the same record.
fn assert_round_trips(rec: &JobRecord) -> Result<(), TestCaseError> {
    let first = serde_json::to_value(rec).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back: JobRecord = serde_json::from_value(first.clone())
        .map_err(|e| TestCaseError::fail(format!("{e}: {first}")))?;
    let second = serde_json::to_value(&back).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(first, second);
    Ok(())
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn job_json_from_any_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(rec) = serde_json::from_slice::<JobRecord>(&bytes) {
            assert_round_trips(&rec)?;
        }
    }

    #[test]
    fn job_json_from_any_value_never_panics(v in json_value()) {
        if let Ok(rec) = serde_json::from_value::<JobRecord>(v) {
            assert_round_trips(&rec)?;
        }
    }

    #[test]
    fn job_json_accepted_round_trips_and_loads_checked(v in record_like()) {
        let Ok(rec) = serde_json::from_value::<JobRecord>(v) else { return Ok(()) };
        assert_round_trips(&rec)?;
        // The distrusting load (names, paths, id against its folder) never
        // panics either, whatever the record says.
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let layout = jobwarden_model::layout::Layout::new(dir.path());
        let id = rec.job_id.clone();
        let bytes = serde_json::to_vec(&rec).map_err(|e| TestCaseError::fail(e.to_string()))?;
        std::fs::create_dir_all(layout.run_dir(&id)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        std::fs::write(layout.job_json(&id), &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if let Ok(loaded) = JobRecord::load_job(&layout, &id) {
            assert_round_trips(&loaded)?;
        }
    }
}

// -- events.jsonl ---------------------------------------------------------

/// Lines like an events file's: whole events, torn ones, blanks, noise.
fn events_like() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        (any::<u64>(), "[a-z_]{1,12}")
            .prop_map(|(seq, op)| format!(r#"{{"seq":{seq},"op":"{op}","ts":"x"}}"#).into_bytes()),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..40),
        Just(b"{\"seq\": 3, \"op\": \"tor".to_vec()),
        Just(b"   ".to_vec()),
    ];
    prop::collection::vec(line, 0..8).prop_map(|lines| lines.join(&b'\n'))
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn events_reader_never_panics_and_counts_every_line(bytes in events_like()) {
        let _ = jobwarden_model::events::last_seq(&bytes);
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let read = jobwarden_model::events::read_counted(dir.path(), &path).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let lines = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .count();
        prop_assert_eq!(read.events.len() + read.unreadable, lines);
        prop_assert!(read.events.iter().all(Value::is_object));
    }

    #[test]
    fn events_written_are_read_back_in_order(
        ops in prop::collection::vec((prop::sample::select(Op::ALL), json_value()), 1..6),
        torn in prop::collection::vec(any::<u8>(), 0..20),
    ) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let path = dir.path().join("events.jsonl");
        let mut log = jobwarden_model::events::EventLog::open(dir.path(), &path, true);
        log.append(Op::Claimed, json!({}));
        drop(log);
        // A torn write by a dying writer, then a writer that reopens.
        let mut bytes = std::fs::read(&path).map_err(|e| TestCaseError::fail(e.to_string()))?;
        bytes.extend_from_slice(&torn);
        std::fs::write(&path, &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut log = jobwarden_model::events::EventLog::open(dir.path(), &path, true);
        for (op, fields) in &ops {
            let fields = if fields.is_object() { fields.clone() } else { json!({"value": fields}) };
            log.append(*op, fields);
        }
        let events = jobwarden_model::events::read_all(dir.path(), &path).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let written: Vec<&Value> = events
            .iter()
            .filter(|e| e["op"] != "claimed" || e["seq"] != 1)
            .collect();
        let got_ops: Vec<&str> = written.iter().filter_map(|e| e["op"].as_str()).collect();
        let want_ops: Vec<&str> = ops.iter().map(|(op, _)| op.as_str()).collect();
        prop_assert!(got_ops.ends_with(&want_ops), "{:?} vs {:?}", got_ops, want_ops);
        let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
        prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{:?}", seqs);
    }
}

// -- pause markers ------------------------------------------------------------

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn pause_marker_names_never_panic_and_decode_to_pausable_projects(name in "\\PC{0,60}") {
        if let Some(project) = jobwarden_model::layout::paused_project(&name) {
            prop_assert!(jobwarden_model::layout::validate_project(&project).is_ok());
            let path = jobwarden_model::layout::Layout::new("/r")
                .project_pause(&project)
                .map_err(TestCaseError::fail)?;
            let again = path.file_name().and_then(|n| n.to_str()).and_then(jobwarden_model::layout::paused_project);
            prop_assert_eq!(again, Some(project));
        }
    }

    #[test]
    fn every_project_pauses_as_one_file_that_names_it(segs in prop::collection::vec("[a-z%0-9 ._-]{1,12}", 1..4)) {
        let project = segs.join("/");
        prop_assume!(jobwarden_model::layout::validate_project(&project).is_ok());
        let layout = jobwarden_model::layout::Layout::new("/r");
        let path = layout.project_pause(&project).map_err(TestCaseError::fail)?;
        let folder = layout.project_pauses();
        prop_assert_eq!(path.parent(), Some(folder.as_path()));
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        prop_assert_eq!(jobwarden_model::layout::paused_project(name), Some(project));
    }
}

proptest! {
    // Each case writes a marker file: fewer cases.
    #![proptest_config(cases(64))]

    #[test]
    fn pause_marker_of_any_content_pauses_with_a_clean_reason(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let layout = jobwarden_model::layout::Layout::new(dir.path());
        std::fs::create_dir_all(layout.control()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        std::fs::write(layout.daemon_pause(), &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let pauses = jobwarden_model::control::read(&layout);
        let pause = pauses.daemon.clone();
        prop_assert!(pause.is_some(), "any file pauses");
        if let Some(reason) = pause.and_then(|p| p.reason) {
            prop_assert!(reason.chars().count() <= jobwarden_model::abort::MAX_REASON);
            prop_assert!(!reason.chars().any(char::is_control));
        }
    }
}

// -- ABORT markers --------------------------------------------------------

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn abort_marker_never_panics_and_gives_a_clean_reason(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Some(reason) = jobwarden_model::abort::marker_reason(&bytes) {
            prop_assert!(!reason.is_empty());
            prop_assert!(reason.chars().count() <= jobwarden_model::abort::MAX_REASON);
            prop_assert!(!reason.chars().any(char::is_control));
        }
    }

}

proptest! {
    // Each case writes a marker the way tools do (fsynced): fewer cases.
    #![proptest_config(cases(64))]

    #[test]
    fn abort_reason_written_is_read_back(reason in "\\PC{0,250}") {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let layout = jobwarden_model::layout::Layout::new(dir.path());
        let id = JobId::generate();
        jobwarden_sys::fsio::create_dirs(dir.path(), &layout.run_dir(&id)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        jobwarden_model::abort::write_marker(&layout, &id, Some(&reason)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let clean: String = reason.trim().chars().filter(|c| !c.is_control()).take(jobwarden_model::abort::MAX_REASON).collect();
        let want = if clean.is_empty() {
            "aborted by request (ABORT marker)".to_owned()
        } else {
            format!("aborted by request: {clean}")
        };
        prop_assert_eq!(jobwarden_model::abort::reason(&layout, &id, jobwarden_model::job::JobState::Aborted), want);
    }
}

// -- config, durations and sizes ------------------------------------------

const GLOBAL_KEYS: &[&str] = &[
    "max_jobs",
    "heartbeat_interval",
    "rescan_interval",
    "settle",
    "abort_grace",
    "max_prompt_bytes",
    "max_log_bytes",
    "shutdown",
    "watch",
    "drain_timeout",
    "events",
    "max_interrupts",
    "artifact_tail_bytes",
    "keep_runs",
    "keep_days",
    "keep_artifacts",
    "gc_interval",
    "reconcile_interval",
    "root",
];

/// A duration as an operator would write one.
fn good_duration() -> impl Strategy<Value = String> {
    (
        1u64..10_000,
        prop::sample::select(vec!["ms", "s", "m", "h"]),
    )
        .prop_map(|(n, u)| format!("{n}{u}"))
}

/// A duration as an operator might write one, or not quite.
fn duration_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            0u64..100_000,
            prop::sample::select(vec![
                "ms", "s", "m", "h", "d", "min", "sec", "us", "ns", "w", ""
            ])
        )
            .prop_map(|(n, u)| format!("{n}{u}")),
        (0u64..1000, 0u64..1000).prop_map(|(a, b)| format!("{a}h {b}m")),
        "[0-9]{15,25}(s|h|ms)",
        "\\PC{0,12}",
    ]
}

/// A size as an operator might write one, or not quite.
fn size_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            0u64..5000,
            prop::sample::select(vec![
                "B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "kb", " MiB", ""
            ])
        )
            .prop_map(|(n, u)| format!("\"{n}{u}\"")),
        "\"[0-9]{0,3}\\.[0-9]{0,4} ?(KiB|MiB|GiB|PiB|EiB)\"",
        "\"[0-9]{15,25}(B|KiB|EiB)\"",
        any::<i64>().prop_map(|n| n.to_string()),
        "\"\\PC{0,12}\"",
    ]
}

/// A TOML value for `key`: usually of the right kind, sometimes not.
fn global_value(key: &'static str) -> BoxedStrategy<String> {
    let right: BoxedStrategy<String> = match key {
        "heartbeat_interval" | "rescan_interval" | "settle" | "abort_grace" | "drain_timeout"
        | "gc_interval" | "reconcile_interval" => {
            prop_oneof![3 => good_duration(), 1 => duration_text()]
                .prop_map(|d| format!("{d:?}"))
                .boxed()
        }
        "max_prompt_bytes" | "max_log_bytes" | "artifact_tail_bytes" => size_text().boxed(),
        "shutdown" => "\"(detach|drain|abort|x)\"".boxed(),
        "watch" => "\"(inotify|rescan|poll)\"".boxed(),
        "events" => "true|false".boxed(),
        "root" => "\"/[a-z]{1,8}\"".boxed(),
        _ => prop_oneof![4 => 1i64..100, 1 => -10i64..20_000]
            .prop_map(|n| n.to_string())
            .boxed(),
    };
    prop_oneof![12 => right, 1 => "\"\\PC{0,8}\"|-?[0-9]{1,20}|\\[\\]|\\{\\}".boxed()].boxed()
}

/// Config text: global keys, a default profile with a command and some of
/// its keys, and perhaps a route.
fn config_like() -> impl Strategy<Value = String> {
    let globals = prop::collection::vec(
        prop::sample::select(GLOBAL_KEYS.to_vec()).prop_flat_map(|k| (Just(k), global_value(k))),
        0..5,
    );
    let profile = (
        prop::option::of(good_duration()),
        prop::option::of(duration_text()),
        prop::option::of(0i64..200),
        prop::option::of("\"(stdin|arg|file|pipe)\""),
    );
    let route = prop::option::of((
        prop_oneof![
            "[a-z]{1,6}/\\*\\*",
            "\\{repo\\}/[a-z]{1,4}",
            "[a-z{}*/]{1,12}"
        ],
        "(default|other)",
    ));
    (globals, profile, route).prop_map(|(globals, (timeout, cooldown, attempts, via), route)| {
        let mut text = String::new();
        let mut seen = std::collections::HashSet::new();
        for (k, v) in globals {
            if seen.insert(k) {
                text.push_str(&format!("{k} = {v}\n"));
            }
        }
        text.push_str("[profiles.default]\ncommand = [\"true\", \"{prompt_file}\"]\n");
        if let Some(t) = timeout {
            text.push_str(&format!("timeout = {t:?}\n"));
        }
        if let Some(c) = cooldown {
            text.push_str(&format!("cooldown = {c:?}\n"));
        }
        if let Some(a) = attempts {
            text.push_str(&format!("max_attempts = {a}\n"));
        }
        if let Some(v) = via {
            text.push_str(&format!("prompt_via = {v}\n"));
        }
        if let Some((pattern, profile)) = route {
            text.push_str(&format!(
                "[[route]]\nmatch = {pattern:?}\nprofile = {profile:?}\n"
            ));
        }
        text
    })
}

fn parse_config(text: &str) -> Result<config::Config, config::ConfigError> {
    config::parse(text, ConfigSource::Inherited)
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn config_from_any_text_never_panics(text in "\\PC{0,200}") {
        let _ = parse_config(&text);
    }

    #[test]
    fn config_accepted_round_trips_through_config_show(text in config_like()) {
        let Ok(cfg) = parse_config(&text) else { return Ok(()) };
        let shown = cfg.to_toml();
        let again = parse_config(&shown)
            .map_err(|e| TestCaseError::fail(format!("{e}\n--- shown:\n{shown}\n--- from:\n{text}")))?;
        prop_assert_eq!(again.to_toml(), shown);
        prop_assert_eq!(again.heartbeat_interval, cfg.heartbeat_interval);
        prop_assert_eq!(again.max_log_bytes, cfg.max_log_bytes);
        prop_assert_eq!(again.max_prompt_bytes, cfg.max_prompt_bytes);
        prop_assert_eq!(again.default_profile().timeout, cfg.default_profile().timeout);
        prop_assert_eq!(again.default_profile().cooldown, cfg.default_profile().cooldown);
    }

    #[test]
    fn duration_accepted_round_trips(text in duration_text()) {
        let Ok(cfg) = parse_config(&format!("abort_grace = {text:?}\n")) else { return Ok(()) };
        let shown = humantime::format_duration(cfg.abort_grace).to_string();
        let again = parse_config(&format!("abort_grace = {shown:?}\n"))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(again.abort_grace, cfg.abort_grace);
    }

    #[test]
    fn size_accepted_round_trips(text in size_text()) {
        let Ok(cfg) = parse_config(&format!("max_log_bytes = {text}\n")) else { return Ok(()) };
        let shown = config::format_size(cfg.max_log_bytes);
        let again = parse_config(&format!("max_log_bytes = {shown:?}\n"))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(again.max_log_bytes, cfg.max_log_bytes);
    }

    #[test]
    fn config_handover_never_panics_and_round_trips(
        text in "\\PC{0,100}",
        noise in prop::collection::vec(any::<u8>(), 0..100),
    ) {
        let _ = config::decode_handover(&noise);
        let framed = config::encode_handover(&text);
        prop_assert_eq!(config::decode_handover(&framed), Ok(text.as_str()));
        let cut = &framed[..framed.len().saturating_sub(1)];
        if !text.is_empty() {
            prop_assert!(config::decode_handover(cut).is_err());
        }
    }
}
