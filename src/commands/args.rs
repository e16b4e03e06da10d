//! Argument values shared by several commands, parsed into what the
//! queries take.

use anyhow::Context;

use crate::clock::Timestamp;

/// `--since`: a duration back from now ("12h", "30m", "7days") or an RFC
/// 3339 time ("2026-01-02T03:04:05Z", "…+02:00"); as epoch ms.
pub fn parse_since(value: Option<&str>) -> anyhow::Result<Option<u64>> {
    let Some(value) = value else {
        return Ok(None);
    };
    if let Ok(d) = humantime::parse_duration(value) {
        let back = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        return Ok(Some(Timestamp::now().epoch_ms().saturating_sub(back)));
    }
    rfc3339_ms(value).map(Some).with_context(|| {
        format!(
            "--since {value:?} is neither a duration (like \"12h\", \"30m\", \"7days\") \
             nor an RFC 3339 time (like \"2026-01-02T03:04:05Z\" or \"2026-01-02T05:04:05+02:00\")"
        )
    })
}

/// Epoch ms of an RFC 3339 time. humantime reads `Z` (and no zone, as
/// UTC) but not numeric offsets, so a `±HH:MM` suffix is applied here.
fn rfc3339_ms(value: &str) -> anyhow::Result<u64> {
    let (local, offset_min) = split_offset(value);
    let t = humantime::parse_rfc3339_weak(local)?;
    let ms = Timestamp::from(t).epoch_ms() as i64 - offset_min * 60_000;
    u64::try_from(ms).context("before 1970")
}

/// `("…", minutes east of UTC)` when `value` ends with `±HH:MM`.
fn split_offset(value: &str) -> (&str, i64) {
    let split = value
        .len()
        .checked_sub(6)
        .filter(|&i| value.is_char_boundary(i));
    let Some((local, tail)) = split.map(|i| value.split_at(i)) else {
        return (value, 0);
    };
    let sign = match tail.as_bytes() {
        [b'+', _, _, b':', _, _] => 1,
        [b'-', _, _, b':', _, _] => -1,
        _ => return (value, 0),
    };
    match (tail[1..3].parse::<i64>(), tail[4..6].parse::<i64>()) {
        (Ok(h), Ok(m)) if local.len() > 10 => (local, sign * (h * 60 + m)),
        _ => (value, 0),
    }
}
