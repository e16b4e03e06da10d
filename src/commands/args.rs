//! Argument values shared by several commands, parsed into what the
//! queries take.

use anyhow::bail;

use jobwarden_sys::clock::{self, Timestamp};

/// `--since` and `--until` as epoch ms: from `since` (included) to `until`
/// (excluded). Each is read by [`clock::parse_when`]: a duration ago, a
/// date or an RFC 3339 time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub since_ms: Option<u64>,
    pub until_ms: Option<u64>,
}

impl Window {
    /// Both flags, each error naming its flag, the value and the accepted
    /// forms; a window that ends before it starts is refused.
    pub fn parse(since: Option<&str>, until: Option<&str>) -> anyhow::Result<Window> {
        let now = Timestamp::now().epoch_ms();
        let window = Window {
            since_ms: since.map(|v| when("--since", v, now)).transpose()?,
            until_ms: until.map(|v| when("--until", v, now)).transpose()?,
        };
        if let (Some(s), Some(u)) = (window.since_ms, window.until_ms) {
            if s >= u {
                bail!(
                    "--since {:?} ({}) is not before --until {:?} ({}): nothing can match; swap them or widen the window",
                    since.unwrap_or_default(),
                    super::output::timestamp(s),
                    until.unwrap_or_default(),
                    super::output::timestamp(u)
                );
            }
        }
        Ok(window)
    }
}

/// One flag's value as epoch ms.
fn when(flag: &str, value: &str, now: u64) -> anyhow::Result<u64> {
    clock::parse_when(value, now).map_err(|why| {
        anyhow::anyhow!(
            "{flag} {value:?} is not a time: {why}; give {}",
            clock::WHEN_FORMS
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_flag_the_value_and_the_forms() {
        let err = Window::parse(Some("yesterday-ish"), None).expect_err("invalid");
        let msg = format!("{err:#}");
        for part in ["--since", "yesterday-ish", "RFC 3339", "2h", "2026-11-25"] {
            assert!(msg.contains(part), "{part:?} missing: {msg}");
        }
        let err = Window::parse(None, Some("2026-02-30")).expect_err("no such day");
        assert!(
            format!("{err:#}").contains("--until \"2026-02-30\""),
            "{err:#}"
        );
    }

    #[test]
    fn a_window_must_start_before_it_ends() {
        let w = Window::parse(Some("2026-01-01"), Some("2026-01-02")).expect("a day");
        assert_eq!(
            w.until_ms.zip(w.since_ms).map(|(u, s)| u - s),
            Some(86_400_000)
        );
        let err = Window::parse(Some("1h"), Some("2h")).expect_err("ends before it starts");
        assert!(format!("{err:#}").contains("not before --until"), "{err:#}");
    }
}
