//! Wall-clock timestamps as the records store them: RFC 3339, UTC,
//! milliseconds (DESIGN §5), and the one reader of a point in time as an
//! operator types it ([`parse_when`]: a duration ago, a date or an RFC 3339
//! time). Monotonic timing stays with `std::time::Instant`. The
//! machine's local time, for start times and windows, is in `local.rs`.

mod local;

pub use local::{TimeOfDay, Window, next_local, parse_start};

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in wall-clock time, serialised as `2026-01-02T03:04:05.678Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(SystemTime);

impl Timestamp {
    pub fn now() -> Self {
        Timestamp(SystemTime::now())
    }

    pub fn system_time(self) -> SystemTime {
        self.0
    }

    /// Milliseconds since the Unix epoch (0 for times before it).
    pub fn epoch_ms(self) -> u64 {
        self.0
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    /// The time `ms` milliseconds after the Unix epoch.
    pub fn from_epoch_ms(ms: u64) -> Self {
        Timestamp(UNIX_EPOCH + Duration::from_millis(ms))
    }

    pub fn plus(self, d: Duration) -> Self {
        Timestamp(self.0 + d)
    }

    /// How long ago this was (zero if it is in the future).
    pub fn age(self) -> Duration {
        SystemTime::now().duration_since(self.0).unwrap_or_default()
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        Timestamp(t)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_rfc3339_millis(self.0))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::str::FromStr for Timestamp {
    type Err = String;

    /// An RFC 3339 time, as records and events write them.
    fn from_str(s: &str) -> Result<Self, String> {
        humantime::parse_rfc3339_weak(s)
            .map(Timestamp)
            .map_err(|e| format!("bad timestamp {s:?}: {e}"))
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The forms [`parse_when`] accepts, for error messages.
pub const WHEN_FORMS: &str = "a duration ago (\"30m\", \"12h\", \"3d\", \"1h 30m\"), \
     a date (\"2026-11-25\", midnight UTC) or an RFC 3339 time \
     (\"2026-11-25T10:00:00Z\", \"2026-11-25T12:00:00+02:00\")";

/// A point in time as an operator writes it, in epoch ms, `now_ms` being
/// now: a duration back from now (humantime: `"12h"`, `"3d"`, `"1h 30m"`),
/// a date (`"2026-11-25"`: its start, UTC) or an RFC 3339 time, with `Z`,
/// an offset (`+02:00`) or no zone (UTC), `T` or a space between date and
/// time, fractional seconds allowed. The error says why, not which flag.
pub fn parse_when(value: &str, now_ms: u64) -> Result<u64, String> {
    let text = value.trim();
    if text.is_empty() {
        return Err("it is empty".into());
    }
    if let Ok(d) = humantime::parse_duration(text) {
        let back = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        return Ok(now_ms.saturating_sub(back));
    }
    if !text.is_ascii() || !text.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("it is neither a duration nor a date".into());
    }
    // RFC 3339 allows a lower-case `t` and `z`; humantime wants capitals.
    let text = text.to_ascii_uppercase();
    if is_date(&text) {
        return utc_ms(&format!("{text}T00:00:00Z"));
    }
    let (local, offset_min) = split_offset(&text)?;
    let ms = utc_ms(local)?;
    let ms = i128::from(ms) - i128::from(offset_min) * 60_000;
    u64::try_from(ms).map_err(|_| "it is before 1970".to_owned())
}

/// `YYYY-MM-DD` and nothing else.
fn is_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// Epoch ms of a UTC time humantime reads (`Z` or no zone).
fn utc_ms(text: &str) -> Result<u64, String> {
    humantime::parse_rfc3339_weak(text)
        .map(|t| Timestamp(t).epoch_ms())
        .map_err(|e| format!("it is not a valid date and time ({e})"))
}

/// `(time without its zone, minutes east of UTC)` for a time ending in
/// `±HH:MM`; the text as is (UTC) otherwise.
fn split_offset(text: &str) -> Result<(&str, i64), String> {
    let Some(at) = text.len().checked_sub(6).filter(|&i| i > 10) else {
        return Ok((text, 0));
    };
    let (local, tail) = text.split_at(at);
    let sign = match tail.as_bytes() {
        [b'+', _, _, b':', _, _] => 1,
        [b'-', _, _, b':', _, _] => -1,
        _ => return Ok((text, 0)),
    };
    let number = |s: &str| {
        s.parse::<i64>()
            .ok()
            .filter(|_| s.bytes().all(|b| b.is_ascii_digit()))
    };
    match (number(&tail[1..3]), number(&tail[4..6])) {
        (Some(h), Some(m)) if h <= 23 && m <= 59 => Ok((local, sign * (h * 60 + m))),
        _ => Err(format!("its offset {tail:?} is not ±HH:MM")),
    }
}

/// A step of the wall clock smaller than this between two looks is
/// taken for the looks' own jitter, not a step.
pub const STEP_AT_LEAST_MS: i64 = 2_000;

/// Notices steps of the wall clock: between two looks, the wall clock
/// moved more, or less, than the monotonic clock (an NTP correction, a
/// manual `date`, a resume from suspend, which the monotonic clock does
/// not count).
#[derive(Debug)]
pub struct StepWatch {
    wall_ms: i64,
    mono: std::time::Instant,
}

impl StepWatch {
    pub fn new() -> Self {
        StepWatch {
            wall_ms: wall_ms(),
            mono: std::time::Instant::now(),
        }
    }

    /// How far the wall clock stepped since the last look (+ ahead,
    /// - back), if it did by at least [`STEP_AT_LEAST_MS`].
    pub fn look(&mut self) -> Option<i64> {
        let (wall, mono) = (wall_ms(), std::time::Instant::now());
        let moved = wall - self.wall_ms;
        let elapsed = i64::try_from(mono.duration_since(self.mono).as_millis()).unwrap_or(i64::MAX);
        self.wall_ms = wall;
        self.mono = mono;
        let step = moved.saturating_sub(elapsed);
        (step.abs() >= STEP_AT_LEAST_MS).then_some(step)
    }
}

impl Default for StepWatch {
    fn default() -> Self {
        StepWatch::new()
    }
}

/// The wall clock in epoch ms (with the test suite's offset: see
/// `fault.rs`).
fn wall_ms() -> i64 {
    i64::try_from(Timestamp::now().epoch_ms()).unwrap_or(i64::MAX) + crate::fault::clock_offset_ms()
}

/// `just now`, `42s ago`, `3m ago`, `5h ago`, `12d ago`.
pub fn fmt_ago(then_ms: u64, now_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..10 => "just now".into(),
        10..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86_400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn when_reads_durations_dates_and_times_with_offsets() {
        assert_eq!(parse_when("12h", NOW), Ok(NOW - 12 * 3_600_000));
        assert_eq!(parse_when("1h 30m", NOW), Ok(NOW - 90 * 60_000));
        let utc = parse_when("2026-01-02T03:04:05Z", NOW);
        assert_eq!(utc, Ok(1_767_323_045_000));
        assert_eq!(parse_when("2026-01-02T05:04:05+02:00", NOW), utc);
        assert_eq!(parse_when("2026-01-01t22:04:05-05:00", NOW), utc);
        assert_eq!(parse_when("2026-01-02 03:04:05", NOW), utc);
        assert_eq!(
            parse_when("2026-01-02T03:04:05.250z", NOW),
            Ok(1_767_323_045_250)
        );
        assert_eq!(parse_when("2026-01-02", NOW), Ok(1_767_312_000_000));
    }

    #[test]
    fn when_refuses_what_is_not_a_time() {
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-01-02T25:00:00Z",
            "2026-01-02T03:04:05+24:00",
            "2026-01-02T03:04:05+0a:00",
            "1969-12-31T23:59:59Z",
            "12 parsecs",
            "２０２６-01-01",
        ] {
            assert!(parse_when(bad, NOW).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn round_trips_with_millisecond_precision() {
        let t = Timestamp(UNIX_EPOCH + Duration::from_millis(1_767_225_845_678));
        let json = serde_json::to_string(&t).expect("serialise");
        assert_eq!(json, "\"2026-01-01T00:04:05.678Z\"");
        let back: Timestamp = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, t);
        assert_eq!(back.epoch_ms(), 1_767_225_845_678);
    }

    #[test]
    fn a_look_without_a_step_sees_none() {
        let mut watch = StepWatch::new();
        assert_eq!(watch.look(), None);
    }
}
