//! The checks every key's value goes through (counts, durations, sizes,
//! choices, environment names, templates). A faulty value is noted as a
//! [`Problem`] naming its key and value, and the check gives `None` (or the
//! default), so that validation goes on and one run names every fault of a
//! file. Which key gets which check is decided by the callers (`config.rs`,
//! `profile.rs`, `route.rs`, `limits.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::raw::{Loose, RawSize};
use super::template::Template;
use super::{Problem, format_size};

/// Upper bound of every duration: far beyond any sane setting, well below
/// where time arithmetic could overflow.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The problems found so far.
#[derive(Debug, Default)]
pub(super) struct Validator {
    pub problems: Vec<Problem>,
}

impl Validator {
    /// Note a problem of `key`; `message` names the key and the value.
    pub fn fault(&mut self, key: &str, message: String) {
        self.problems.push(Problem {
            key: key.to_owned(),
            message,
        });
    }

    /// The value of `key` if it has the expected type (`what`: "a string").
    pub fn take<T>(&mut self, key: &str, v: Option<Loose<T>>, what: &str) -> Option<T> {
        match v? {
            Loose::Ok(value) => Some(value),
            Loose::Wrong(written) => {
                self.fault(key, format!("{key} = {written}: must be {what}"));
                None
            }
        }
    }

    /// A whole number within `min..=max`.
    pub fn num(&mut self, key: &str, v: Option<Loose<i64>>, min: i64, max: i64) -> Option<u64> {
        let n = self.take(key, v, "a whole number")?;
        if (min..=max).contains(&n) {
            return u64::try_from(n).ok();
        }
        self.fault(key, format!("{key} = {n}: must be between {min} and {max}"));
        None
    }

    /// [`Validator::num`], `default` when absent or faulty.
    pub fn count(
        &mut self,
        key: &str,
        v: Option<Loose<i64>>,
        default: u64,
        min: i64,
        max: i64,
    ) -> u64 {
        self.num(key, v, min, max).unwrap_or(default)
    }

    /// A human duration (`"500ms"`, `"2h"`), at most a year, and more than
    /// zero when `nonzero`.
    pub fn dur(&mut self, key: &str, v: Option<Loose<String>>, nonzero: bool) -> Option<Duration> {
        let text = self.take(key, v, "a duration in quotes, like \"5s\" or \"2h\"")?;
        let d = match humantime::parse_duration(&text) {
            Ok(d) => d,
            Err(e) => {
                self.fault(
                    key,
                    format!(
                        "{key} = {text:?}: not a duration ({e}); write e.g. \"500ms\", \"5s\", \"2h\""
                    ),
                );
                return None;
            }
        };
        let bad = if nonzero && d.is_zero() {
            "must be greater than zero"
        } else if d > MAX_DURATION {
            "must be at most 365 days"
        } else {
            return Some(d);
        };
        self.fault(key, format!("{key} = {text:?}: {bad}"));
        None
    }

    /// [`Validator::dur`], `default` when absent or faulty.
    pub fn duration(
        &mut self,
        key: &str,
        v: Option<Loose<String>>,
        default: Duration,
        nonzero: bool,
    ) -> Duration {
        self.dur(key, v, nonzero).unwrap_or(default)
    }

    /// A size (`"64MiB"` or a number of bytes), more than zero and at most `max`.
    pub fn bytes(&mut self, key: &str, v: Option<Loose<RawSize>>, max: u64) -> Option<u64> {
        let what = "a size like \"64KiB\" or \"1MiB\", or a number of bytes";
        let bytes = match self.take(key, v, what)? {
            RawSize::Bytes(n) => match u64::try_from(n) {
                Ok(b) => b,
                Err(_) => {
                    self.fault(key, format!("{key} = {n}: must not be negative"));
                    return None;
                }
            },
            RawSize::Text(t) => match t.parse::<bytesize::ByteSize>() {
                Ok(b) => b.as_u64(),
                Err(_) => {
                    self.fault(key, format!("{key} = {t:?}: not a size; write e.g. \"64KiB\", \"1MiB\" or a number of bytes"));
                    return None;
                }
            },
        };
        if bytes == 0 {
            self.fault(key, format!("{key}: must be greater than zero"));
            return None;
        }
        if bytes > max {
            self.fault(key, format!("{key}: must be at most {}", format_size(max)));
            return None;
        }
        Some(bytes)
    }

    /// [`Validator::bytes`], `default` when absent or faulty.
    pub fn size(&mut self, key: &str, v: Option<Loose<RawSize>>, default: u64, max: u64) -> u64 {
        self.bytes(key, v, max).unwrap_or(default)
    }

    /// One of the `options` by name; `must` says which ones, for the message.
    pub fn choice<T: Copy>(
        &mut self,
        key: &str,
        v: Option<Loose<String>>,
        options: &[(&str, T)],
        must: &str,
    ) -> Option<T> {
        let text = self.take(key, v, "a string")?;
        let found = options.iter().find(|(name, _)| *name == text);
        if found.is_none() {
            self.fault(key, format!("{key} = {text:?}: must be {must}"));
        }
        found.map(|(_, value)| *value)
    }

    /// A template (placeholders checked later, against the routes).
    pub fn template(&mut self, key: &str, text: &str) -> Option<Template> {
        Template::parse_open(text)
            .map_err(|e| self.fault(key, format!("{key}: {e}")))
            .ok()
    }

    /// An argv of templates whose first names a program (`example` shows one).
    pub fn argv(
        &mut self,
        key: &str,
        v: Option<Loose<Vec<String>>>,
        example: &str,
    ) -> Option<Vec<Template>> {
        let args = self.take(
            key,
            v,
            "a list of strings, like [\"codex\", \"exec\", \"-\"]",
        )?;
        if args.first().is_none_or(String::is_empty) {
            self.fault(key, format!("{key}: must name a program, e.g. {example}"));
            return None;
        }
        let parsed: Vec<Option<Template>> = args.iter().map(|a| self.template(key, a)).collect();
        parsed.into_iter().collect()
    }

    /// Environment values (`env = { NAME = "value" }`): valid names, no NUL.
    pub fn env(
        &mut self,
        key: &str,
        v: Option<Loose<BTreeMap<String, String>>>,
    ) -> Option<BTreeMap<String, String>> {
        let env = self.take(key, v, "a table of strings, like { NAME = \"value\" }")?;
        for (k, value) in &env {
            self.env_name(key, k);
            if value.contains('\0') {
                self.fault(key, format!("{key}.{k}: value contains a NUL byte"));
            }
        }
        Some(env)
    }

    /// Environment variable names (`env_passthrough`).
    pub fn env_names(&mut self, key: &str, v: Option<Loose<Vec<String>>>) -> Option<Vec<String>> {
        let names = self.take(key, v, "a list of strings, like [\"SSH_AUTH_SOCK\"]")?;
        for n in &names {
            self.env_name(key, n);
        }
        Some(names)
    }

    /// Is `name` an environment variable a config may set?
    pub fn env_name(&mut self, key: &str, name: &str) -> bool {
        let ok = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            self.fault(
                key,
                format!("{key}: {name:?} is not a valid environment variable name"),
            );
            return false;
        }
        if name.starts_with("JOBWARDEN_") {
            self.fault(
                key,
                format!("{key}: {name:?}: JOBWARDEN_* variables are set by jobwarden itself"),
            );
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_faulty_value_is_noted_and_checking_goes_on() {
        let mut v = Validator::default();
        let text = |s: &str| Some(Loose::Ok(s.to_owned()));
        assert_eq!(v.dur("a", text("soon"), false), None);
        assert_eq!(v.dur("b", text("0s"), true), None);
        assert_eq!(v.dur("c", text("2s"), true), Some(Duration::from_secs(2)));
        assert_eq!(v.num("d", Some(Loose::Wrong("\"x\"".into())), 0, 9), None);
        assert_eq!(v.size("e", Some(Loose::Ok(RawSize::Bytes(-1))), 7, 100), 7);
        let keys: Vec<&str> = v.problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["a", "b", "d", "e"]);
        assert_eq!(v.problems[2].message, "d = \"x\": must be a whole number");
    }
}
