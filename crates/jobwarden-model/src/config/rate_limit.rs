//! The built-in rate-limit patterns: how the agent CLIs this product runs
//! (Codex, Claude Code, Gemini, and the HTTP APIs behind them) say that a
//! provider's rate limit or quota stopped them, so that such a failure is
//! recorded `rate_limited` (its own, shorter cooldown) with no config.
//!
//! They are the default of a profile's `rate_limit.patterns`: a profile
//! that sets `patterns` replaces them (`patterns = []` turns them off),
//! and its `exit_codes` apply as well. They only ever judge a failed main
//! command (non-zero exit), against the tails of its stdout and stderr.

/// Case-insensitive regexes, in the syntax of `rate_limit.patterns`.
pub const DEFAULT_PATTERNS: &[&str] = &[
    // "Error: 429 Too Many Requests", "HTTP/1.1 429", "status code 429";
    // not a bare number such as "processed 429 files".
    r"(?i)\b(?:http|status|error|code)\b[^\n]{0,24}\b429\b",
    r"(?i)too many requests",
    // "rate limit", "rate-limited", "rate_limit_error", "ratelimit".
    r"(?i)rate[ _-]?limit",
    // "quota exceeded", "exceeded your current quota", "insufficient_quota".
    r"(?i)\bquota\b|insufficient_quota",
    // Gemini's 429 status.
    r"(?i)resource[ _]exhausted",
    // Claude Code's and Codex's plan limits: "usage limit reached".
    r"(?i)usage limit",
];

/// [`DEFAULT_PATTERNS`] as the `patterns` a profile gets when it sets none.
pub fn default_patterns() -> Vec<String> {
    DEFAULT_PATTERNS.iter().map(|p| (*p).to_owned()).collect()
}

/// A profile's `rate_limit.patterns`: checked when the config is read,
/// compiled when first needed. Compiling the built-in six costs a few
/// milliseconds of CPU (their case-insensitive Unicode classes make large
/// automata), and every monitor reads the config while the job waits to
/// start; the patterns only judge a main command that failed.
#[derive(Debug, Clone, Default)]
pub struct Patterns {
    sources: Vec<String>,
    compiled: std::sync::OnceLock<Option<regex::RegexSet>>,
}

impl Patterns {
    /// Patterns whose syntax was checked with [`Patterns::check`], or the
    /// built-in ones.
    pub fn new(sources: Vec<String>) -> Patterns {
        Patterns {
            sources,
            compiled: std::sync::OnceLock::new(),
        }
    }

    /// Is `pattern` a regular expression in the syntax of `patterns`? The
    /// parse is the one compiling does, without building its automata.
    pub fn check(pattern: &str) -> Result<(), String> {
        regex_syntax::Parser::new()
            .parse(pattern)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The patterns as written.
    pub fn sources(&self) -> impl Iterator<Item = &str> {
        self.sources.iter().map(String::as_str)
    }

    /// Does any pattern match `text`? A set too large to compile (beyond
    /// the regex crate's size limits, which a syntax check cannot see) is
    /// reported once and matches nothing.
    pub fn is_match(&self, text: &str) -> bool {
        let set = self.compiled.get_or_init(|| {
            if self.sources.is_empty() {
                return None;
            }
            regex::RegexSet::new(&self.sources)
                .inspect_err(|e| {
                    tracing::warn!(
                        "rate_limit.patterns cannot be compiled ({e}); no output counts as a rate limit"
                    );
                })
                .ok()
        });
        set.as_ref().is_some_and(|s| s.is_match(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(line: &str) -> bool {
        Patterns::new(default_patterns()).is_match(line)
    }

    #[test]
    fn the_built_in_patterns_pass_the_check_and_compile() {
        for p in DEFAULT_PATTERNS {
            assert_eq!(Patterns::check(p), Ok(()), "{p}");
            assert!(regex::Regex::new(p).is_ok(), "{p}");
        }
    }

    #[test]
    fn a_bad_pattern_fails_the_check_and_says_why() {
        let e = Patterns::check("rate (limit").expect_err("unclosed group");
        assert!(e.contains("unclosed group"), "{e}");
        assert!(Patterns::check(r"\p{NoSuchClass}").is_err());
    }

    #[test]
    fn no_patterns_match_nothing() {
        assert!(!Patterns::new(Vec::new()).is_match("rate limit"));
    }

    #[test]
    fn what_the_agent_clis_print_on_a_rate_limit_matches() {
        for line in [
            "Error: 429 Too Many Requests",
            "HTTP/1.1 429",
            "unexpected status code 429 from the API",
            "stream error: Too Many Requests",
            "API Error: Rate limit reached for requests",
            "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}",
            "You exceeded your current quota, please check your plan",
            "{\"code\": \"insufficient_quota\"}",
            "RESOURCE_EXHAUSTED: Quota exceeded for quota metric",
            "Claude AI usage limit reached|1750000000",
            "You've hit your usage limit. Upgrade to Pro",
        ] {
            assert!(matches(line), "{line:?}");
        }
    }

    #[test]
    fn ordinary_failures_do_not_match() {
        for line in [
            "processed 429 files",
            "error: test failed, to rerun pass `--lib`",
            "thread 'main' panicked at src/main.rs:4290:5",
            "fatal: not a git repository",
            "exit status 1",
        ] {
            assert!(!matches(line), "{line:?}");
        }
    }
}
