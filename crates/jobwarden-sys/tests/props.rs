//! Property tests for the parsers of outside input the machine layer holds:
//! points in time as an operator types them, compiler and linter
//! diagnostics in a job's output. Whatever the input, no parser panics;
//! what one accepts is read back.

use proptest::prelude::*;

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

// -- points in time (`--since`, `--until`) ------------------------------------

/// Text shaped like what an operator types for a point in time: durations,
/// dates and times in every accepted spelling, and near misses.
fn when_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,6} ?(ms|s|m|h|d|days|w)",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})?",
        "\\PC{0,30}",
    ]
}

/// `epoch_s` as an RFC 3339 time written `offset_min` east of UTC.
fn rfc3339_at(epoch_s: u64, offset_min: i64) -> String {
    let local = epoch_s as i64 + offset_min * 60;
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(local.max(0) as u64);
    let utc = humantime::format_rfc3339_seconds(t).to_string();
    let sign = if offset_min < 0 { '-' } else { '+' };
    let (h, m) = (offset_min.abs() / 60, offset_min.abs() % 60);
    format!("{}{sign}{h:02}:{m:02}", utc.trim_end_matches('Z'))
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn when_never_panics_and_never_goes_past_now_for_durations(text in when_like()) {
        let now = 1_900_000_000_000;
        if let (Ok(ms), Ok(_)) = (jobwarden_sys::clock::parse_when(&text, now), humantime::parse_duration(text.trim())) {
            prop_assert!(ms <= now);
        }
    }

    #[test]
    fn when_reads_any_offset_as_the_same_instant(
        epoch_s in 86_400u64..4_000_000_000,
        offset_min in -(23 * 60 + 59)..=(23 * 60 + 59i64),
    ) {
        let text = rfc3339_at(epoch_s, offset_min);
        prop_assert_eq!(jobwarden_sys::clock::parse_when(&text, 0), Ok(epoch_s * 1000), "{}", text);
    }

    #[test]
    fn when_reads_a_duration_back_from_now(secs in 0u64..1_000_000_000) {
        let now = 2_000_000_000_000;
        prop_assert_eq!(jobwarden_sys::clock::parse_when(&format!("{secs}s"), now), Ok(now - secs * 1000));
    }
}

proptest! {
    #![proptest_config(cases(64))]
    #[test]
    fn diagnostics_any_text_parses_without_panic_and_within_bounds(text in "\\PC{0,400}") {
        let found = jobwarden_sys::diagnostics::parse(&text);
        prop_assert!(found.len() <= jobwarden_sys::diagnostics::MAX_DIAGNOSTICS);
        for d in found {
            prop_assert!(d.message.len() <= jobwarden_sys::diagnostics::MAX_MESSAGE);
            prop_assert!(d.severity == "error" || d.severity == "warning");
        }
    }

    #[test]
    fn diagnostics_a_printed_diagnostic_is_read_back(
        file in "[a-z]{1,8}/[a-z]{1,8}\\.rs",
        line in 1u32..100_000,
        col in 1u32..500,
        code in "E[0-9]{4}",
        msg in "[a-zA-Z`' ]{1,60}",
    ) {
        let msg = msg.trim().to_owned();
        prop_assume!(!msg.is_empty());
        let text = format!("error[{code}]: {msg}\n  --> {file}:{line}:{col}\n");
        let found = jobwarden_sys::diagnostics::parse(&text);
        prop_assert_eq!(found.len(), 1);
        prop_assert_eq!(found[0].code.as_deref(), Some(code.as_str()));
        prop_assert_eq!(found[0].file.as_deref(), Some(file.as_str()));
        prop_assert_eq!(found[0].line, Some(line));
        prop_assert_eq!(found[0].column, Some(col));
        prop_assert_eq!(&found[0].message, &msg);
    }
}
