//! The machine's local time, for what operators write in it: a start time
//! `HH:MM` (the next one to come) and a window `22:00-06:00` (the hours a
//! profile's jobs may start in). The zone is the system's (`TZ`, else
//! `/etc/localtime`), read by `jiff`; a day that skips or repeats an hour
//! (daylight saving) takes the later of two instants and the hour after a
//! gap, as jiff's "compatible" rule does.

use std::fmt;
use std::str::FromStr;

use jiff::tz::TimeZone;
use jiff::{Timestamp as JTimestamp, Zoned};

/// A time of day, `HH:MM` (00:00 to 23:59).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimeOfDay {
    /// Minutes after midnight.
    minutes: u16,
}

impl TimeOfDay {
    fn hour(self) -> i8 {
        (self.minutes / 60) as i8
    }

    fn minute(self) -> i8 {
        (self.minutes % 60) as i8
    }
}

impl FromStr for TimeOfDay {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a time of day; write HH:MM, 00:00 to 23:59");
        let (h, m) = s.trim().split_once(':').ok_or_else(bad)?;
        let digits =
            |t: &str| !t.is_empty() && t.len() <= 2 && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(h) || m.len() != 2 || !digits(m) {
            return Err(bad());
        }
        let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
        if h > 23 || m > 59 {
            return Err(bad());
        }
        Ok(TimeOfDay {
            minutes: h * 60 + m,
        })
    }
}

impl fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.hour(), self.minute())
    }
}

fn zoned(ms: u64) -> Zoned {
    let ts = JTimestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or(JTimestamp::MAX);
    ts.to_zoned(TimeZone::system())
}

/// The minutes after local midnight of the instant `ms`.
fn local_minutes(ms: u64) -> u16 {
    let z = zoned(ms);
    (z.hour() as u16) * 60 + z.minute() as u16
}

/// The first instant at or after `now_ms` whose local time is `t`: today,
/// or tomorrow when today's is past (epoch ms).
pub fn next_local(t: TimeOfDay, now_ms: u64) -> u64 {
    let now = zoned(now_ms);
    let at = |day: &Zoned| {
        day.with()
            .hour(t.hour())
            .minute(t.minute())
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .ok()
            .map(|z| u64::try_from(z.timestamp().as_millisecond()).unwrap_or(0))
    };
    match at(&now) {
        Some(ms) if ms >= now_ms => ms,
        _ => now
            .tomorrow()
            .ok()
            .and_then(|d| at(&d))
            .unwrap_or(now_ms + 86_400_000),
    }
}

/// The hours a profile's jobs may start in, local time: `22:00-06:00`
/// (across midnight) or `09:00-17:00`; from the first time up to, not
/// including, the second. Equal times are the whole day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: TimeOfDay,
    pub end: TimeOfDay,
}

impl Window {
    /// Is the instant `ms` inside the window?
    pub fn contains(&self, ms: u64) -> bool {
        let now = local_minutes(ms);
        let (s, e) = (self.start.minutes, self.end.minutes);
        match s.cmp(&e) {
            std::cmp::Ordering::Less => s <= now && now < e,
            std::cmp::Ordering::Greater => now >= s || now < e,
            std::cmp::Ordering::Equal => true,
        }
    }

    /// When it next opens at or after `now_ms` (epoch ms).
    pub fn next_opening(&self, now_ms: u64) -> u64 {
        next_local(self.start, now_ms)
    }
}

impl FromStr for Window {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s.split_once('-').ok_or_else(|| {
            format!(
                "{s:?} is not a window; write two local times, HH:MM-HH:MM, e.g. \"22:00-06:00\""
            )
        })?;
        Ok(Window {
            start: a.parse()?,
            end: b.parse()?,
        })
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// A start time as an operator writes it, in epoch ms, `now_ms` being now:
/// a local time of day `HH:MM` (today, or tomorrow if past), a duration
/// from now (`"2h"`, `"90m"`), a date (its start, UTC) or an RFC 3339 time.
pub fn parse_start(value: &str, now_ms: u64) -> Result<u64, String> {
    let text = value.trim();
    if let Ok(t) = text.parse::<TimeOfDay>() {
        return Ok(next_local(t, now_ms));
    }
    if let Ok(d) = humantime::parse_duration(text) {
        return Ok(now_ms.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)));
    }
    super::parse_when(text, now_ms).map_err(|why| {
        format!("{value:?}: {why}; write a local time (\"22:30\"), a duration from now (\"2h\") or an RFC 3339 time")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_day_and_windows_read_as_written() {
        assert_eq!(
            "22:00".parse::<TimeOfDay>().map(|t| t.to_string()),
            Ok("22:00".into())
        );
        assert_eq!(
            "6:05".parse::<TimeOfDay>().map(|t| t.to_string()),
            Ok("06:05".into())
        );
        for bad in ["24:00", "12:60", "12", "ab:cd", "1:5", "-1:00", ""] {
            assert!(bad.parse::<TimeOfDay>().is_err(), "{bad}");
        }
        let w: Window = "22:00-06:00".parse().expect("window");
        assert_eq!(w.to_string(), "22:00-06:00");
        assert!("22:00".parse::<Window>().is_err());
    }

    #[test]
    fn a_window_across_midnight_holds_the_night_and_opens_next_at_its_start() {
        // Whatever the zone: the instants are made from local times.
        let now = crate::clock::Timestamp::now().epoch_ms();
        let at = |hhmm: &str| next_local(hhmm.parse().expect("time"), now);
        let night: Window = "22:00-06:00".parse().expect("window");
        assert!(night.contains(at("23:30")) && night.contains(at("05:59")));
        assert!(!night.contains(at("06:00")) && !night.contains(at("12:00")));
        let day: Window = "09:00-17:00".parse().expect("window");
        assert!(day.contains(at("09:00")) && !day.contains(at("17:00")));
        let noon = at("12:00");
        let opening = night.next_opening(noon);
        assert!(
            opening > noon && opening - noon <= 13 * 3_600_000,
            "{opening} {noon}"
        );
        assert_eq!(local_minutes(opening), 22 * 60);
    }

    #[test]
    fn a_start_is_a_local_time_a_duration_or_a_date() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_start("2h", now), Ok(now + 7_200_000));
        let at = parse_start("03:30", now).expect("local");
        assert!(at >= now && at < now + 86_400_000);
        assert_eq!(local_minutes(at), 3 * 60 + 30);
        assert_eq!(
            parse_start("2027-01-15T10:00:00Z", now),
            Ok(1_800_007_200_000)
        );
        assert!(parse_start("tomorrowish", now).is_err());
    }
}
