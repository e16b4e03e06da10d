//! Wall-clock timestamps as the records store them: RFC 3339, UTC,
//! milliseconds (DESIGN §5). Monotonic timing stays with `std::time::Instant`.

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

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_rfc3339_weak(&s)
            .map(Timestamp)
            .map_err(|e| serde::de::Error::custom(format!("bad timestamp {s:?}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_millisecond_precision() {
        let t = Timestamp(UNIX_EPOCH + Duration::from_millis(1_767_225_845_678));
        let json = serde_json::to_string(&t).expect("serialise");
        assert_eq!(json, "\"2026-01-01T00:04:05.678Z\"");
        let back: Timestamp = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, t);
        assert_eq!(back.epoch_ms(), 1_767_225_845_678);
    }
}
