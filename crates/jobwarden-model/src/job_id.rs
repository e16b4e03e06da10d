//! Job ids: UUIDv7 when generated (time-ordered, unique), and a validated
//! safe path component whatever their origin.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A job's id; always safe to use as a single path component. Shared, not
/// copied, when cloned: the daemon keeps several handles on each waiting
/// job's id (its queue, its claim, its watch), thousands of them in a
/// burst.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(Arc<str>);

const MAX_LEN: usize = 64;

impl JobId {
    /// A new time-ordered id. Two ids minted in the same millisecond still
    /// differ: UUIDv7 carries random bits after the timestamp.
    pub fn generate() -> Self {
        JobId(uuid::Uuid::now_v7().hyphenated().to_string().into())
    }

    /// Accept an id from outside (a CLI argument, a directory name, front
    /// matter): 1–64 ASCII letters, digits, `-` or `_`, starting alphanumeric.
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if s.is_empty() || s.len() > MAX_LEN {
            return Err(format!("job id {s:?} must be 1 to {MAX_LEN} characters"));
        }
        if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) || !s.chars().all(ok_char) {
            return Err(format!(
                "job id {s:?} may hold only ASCII letters, digits, '-' and '_', starting with a letter or digit"
            ));
        }
        Ok(JobId(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id of attempt `attempt` of a prompt whose own id (front matter)
    /// is `self`: `self` for the first, `<self>-r<attempt>` after, so that a
    /// retry never collides with the attempt before it. `None` when that
    /// would not be a valid id (too long).
    pub fn for_attempt(&self, attempt: u32) -> Option<JobId> {
        if attempt <= 1 {
            return Some(self.clone());
        }
        JobId::parse(&format!("{self}-r{attempt}")).ok()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for JobId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for JobId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JobId::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_valid_distinct_and_ordered() {
        let a = JobId::generate();
        let b = JobId::generate();
        assert_ne!(a, b);
        assert!(a < b, "v7 ids sort by creation: {a} {b}");
        assert_eq!(JobId::parse(a.as_str()), Ok(a));
    }

    #[test]
    fn retry_ids_derive_from_the_first_and_stay_valid() {
        let own = JobId::parse("nightly").expect("valid");
        assert_eq!(own.for_attempt(1), Some(own.clone()));
        assert_eq!(
            own.for_attempt(2).map(|id| id.to_string()),
            Some("nightly-r2".into())
        );
        let long = JobId::parse(&"a".repeat(62)).expect("valid");
        assert_eq!(long.for_attempt(2), None, "65 characters is too long");
    }

    #[test]
    fn rejects_path_tricks() {
        for bad in ["", "..", "a/b", "../x", "x\n", "-x", "a b", &"a".repeat(65)] {
            assert!(JobId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
