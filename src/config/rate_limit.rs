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

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(line: &str) -> bool {
        DEFAULT_PATTERNS
            .iter()
            .map(|p| regex::Regex::new(p).expect("valid"))
            .any(|re| re.is_match(line))
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
