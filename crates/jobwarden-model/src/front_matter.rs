//! Prompt front matter (DESIGN §8): an optional block of `key: value` lines
//! at the very top of a prompt that sets values for its job.
//!
//! ```text
//! ---
//! # comments and blank lines are allowed
//! job_id: nightly-build
//! ---
//! The prompt's body starts here.
//! ```
//!
//! The first line must be exactly `---` and the block ends at the next line
//! that is exactly `---` (either may end in `\r\n`). Nothing else is front
//! matter: a `---` further down belongs to the body. A value may be wrapped
//! in one pair of matching quotes. Unknown keys, repeated keys and a block
//! that is never closed are errors, so that a typo never passes silently.
//!
//! This module only reads and edits the text; what a key means for a job is
//! decided by its users (the claim, `jobwarden submit`).

use crate::job::JobId;

/// The line that opens and closes a block.
const FENCE: &str = "---";

/// Every key [`FrontMatter::set`] understands, in the order error messages
/// list them. A key is added here and as one arm of `set` and of `sets`.
pub const KEYS: &[&str] = &[
    "job_id",
    "profile",
    "timeout",
    "max_attempts",
    "priority",
    "events",
    "after",
    "not_before",
];

/// The most jobs one job may wait for (`after`).
pub const AFTER_MAX: usize = 64;

/// Bounds of `priority` (higher starts first; 0 is the default).
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;

/// The values a prompt's front matter sets; `None` when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrontMatter {
    /// The job's id instead of a generated one (validated, unique per root).
    pub job_id: Option<JobId>,
    /// The profile to run, instead of the one the route (or `default`)
    /// selects. Whether it exists is checked by the claim.
    pub profile: Option<String>,
    /// The main command's timeout instead of the profile's.
    pub timeout: Option<std::time::Duration>,
    /// Attempts in all instead of the profile's `max_attempts`.
    pub max_attempts: Option<u32>,
    /// Higher starts first among queued jobs; equal priorities keep their
    /// claim order.
    pub priority: Option<i32>,
    /// Write `events.jsonl` for this job (overrides the global `events`).
    pub events: Option<bool>,
    /// The jobs it waits for, as written (`after: a` or `after: [a, b]`):
    /// ids, id prefixes or `project/name`, resolved by the claim.
    pub after: Vec<String>,
    /// Not to start before this, as written (`22:30`, `2h`, an RFC 3339
    /// time): the claim makes it an instant.
    pub not_before: Option<String>,
}

impl FrontMatter {
    /// Set `key` from its text value.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "job_id" => self.job_id = Some(JobId::parse(value)?),
            "profile" => {
                crate::layout::validate_segment(value)
                    .map_err(|e| format!("profile {value:?} {e}"))?;
                self.profile = Some(value.to_owned());
            }
            "timeout" => {
                let d = humantime::parse_duration(value).map_err(|e| {
                    format!(
                        "timeout {value:?} is not a duration ({e}); write e.g. \"30m\" or \"2h\""
                    )
                })?;
                if d.is_zero() || d > std::time::Duration::from_secs(365 * 86_400) {
                    return Err(format!(
                        "timeout {value:?} must be more than zero and at most 365 days"
                    ));
                }
                self.timeout = Some(d);
            }
            "max_attempts" => match value.parse::<u32>() {
                Ok(n @ 1..=100) => self.max_attempts = Some(n),
                _ => {
                    return Err(format!(
                        "max_attempts {value:?} must be a whole number from 1 to 100"
                    ));
                }
            },
            "priority" => match value.parse::<i32>() {
                Ok(n) if PRIORITY_RANGE.contains(&n) => self.priority = Some(n),
                _ => {
                    return Err(format!(
                        "priority {value:?} must be a whole number from {} to {}",
                        PRIORITY_RANGE.start(),
                        PRIORITY_RANGE.end()
                    ));
                }
            },
            "after" => self.after = after_list(value)?,
            "not_before" => {
                let now = jobwarden_sys::clock::Timestamp::now().epoch_ms();
                jobwarden_sys::clock::parse_start(value, now)?;
                self.not_before = Some(value.to_owned());
            }
            "events" => match value {
                "true" => self.events = Some(true),
                "false" => self.events = Some(false),
                _ => return Err(format!("events {value:?} must be true or false")),
            },
            _ => {
                return Err(format!(
                    "unknown key {key:?}; the known keys are: {}",
                    KEYS.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// `a` or `[a, b]`: the jobs a job waits for, each non-empty, at most
/// [`AFTER_MAX`], none twice.
fn after_list(value: &str) -> Result<Vec<String>, String> {
    let inner = match value.strip_prefix('[') {
        Some(rest) => rest
            .strip_suffix(']')
            .ok_or_else(|| format!("after {value:?} opens a list with '[' that is never closed"))?,
        None => value,
    };
    let mut refs: Vec<String> = Vec::new();
    for item in inner.split(',') {
        let item = unquote(item.trim());
        if item.is_empty() {
            return Err(format!(
                "after {value:?} has an empty entry; write a job id, an id prefix or project/name, or a list [a, b]"
            ));
        }
        if item.chars().any(char::is_control) || item.len() > 512 {
            return Err(format!("after entry {item:?} cannot name a job"));
        }
        if !refs.iter().any(|r| r == item) {
            refs.push(item.to_owned());
        }
    }
    if refs.len() > AFTER_MAX {
        return Err(format!(
            "after names {} jobs; a job waits for at most {AFTER_MAX}",
            refs.len()
        ));
    }
    Ok(refs)
}

/// A prompt's text split into its front matter and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The values set (all `None` when there is no block).
    pub front: FrontMatter,
    /// Byte offset where the body starts: 0 without a block, else just
    /// after the closing `---` line.
    pub body_start: usize,
    /// The block, if the prompt has one.
    block: Option<Block>,
}

/// Where a block sits in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    /// Byte offset of the closing `---` line: where a new key goes.
    closing: usize,
    /// The block's line ending (`"\n"` or `"\r\n"`, from its first line).
    newline: &'static str,
}

impl Parsed {
    /// Does the prompt have a front-matter block (even an empty one)?
    pub fn has_block(&self) -> bool {
        self.block.is_some()
    }
}

/// Why a front-matter block is invalid, with the line it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("front matter, line {line}: {message}")]
pub struct FrontMatterError {
    /// 1-based line number in the prompt.
    pub line: usize,
    pub message: String,
}

/// Split `text` into its front matter (if any) and its body.
pub fn parse(text: &str) -> Result<Parsed, FrontMatterError> {
    let mut lines = Lines::new(text);
    let no_block = Parsed {
        front: FrontMatter::default(),
        body_start: 0,
        block: None,
    };
    let Some(first) = lines.next() else {
        return Ok(no_block);
    };
    if first.content != FENCE {
        return Ok(no_block);
    }
    let newline = if text[..first.end].ends_with("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    // Find the end first: a prompt that merely starts with a `---` rule is
    // told its block is unclosed, not that its prose is a bad key.
    let mut inner = Vec::new();
    let closing = loop {
        match lines.next() {
            Some(line) if line.content == FENCE => break line,
            Some(line) => inner.push(line),
            None => {
                return Err(FrontMatterError {
                    line: 1,
                    message: format!(
                        "the block opened by {FENCE:?} is never closed; add a line {FENCE:?} after its last key"
                    ),
                });
            }
        }
    };
    Ok(Parsed {
        front: values(&inner)?,
        body_start: closing.end,
        block: Some(Block {
            closing: closing.start,
            newline,
        }),
    })
}

/// The values set by the lines inside a block.
fn values(lines: &[Line<'_>]) -> Result<FrontMatter, FrontMatterError> {
    let mut front = FrontMatter::default();
    let mut seen: Vec<&str> = Vec::new();
    for line in lines {
        let fail = |message: String| FrontMatterError {
            line: line.number,
            message,
        };
        let Some((key, value)) = key_value(line.content).map_err(fail)? else {
            continue;
        };
        if seen.contains(&key) {
            return Err(fail(format!("key {key:?} is given twice; keep one")));
        }
        seen.push(key);
        front
            .set(key, value)
            .map_err(|e| fail(format!("{key}: {e}")))?;
    }
    Ok(front)
}

/// The key and value of one line inside a block; `None` for a blank or
/// comment line.
fn key_value(line: &str) -> Result<Option<(&str, &str)>, String> {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Ok(None);
    }
    let Some((key, value)) = trimmed.split_once(':') else {
        return Err(format!(
            "expected \"key: value\", found {trimmed:?} (a prompt whose first line is \"---\" starts with front matter)"
        ));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("no key before ':' in {trimmed:?}"));
    }
    Ok(Some((key, unquote(value.trim()))))
}

/// `value` without one pair of matching surrounding quotes.
fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

/// `text` with `job_id: <id>` in its front matter (see [`with_keys`]).
pub fn with_job_id(text: &str, parsed: &Parsed, id: &JobId) -> String {
    with_keys(text, parsed, &[("job_id", id.to_string())])
}

/// `text` with `key: value` lines in its front matter: added at the end
/// of its block, or in a new block at the top when it has none. The rest
/// is kept byte for byte. `parsed` must come from [`parse`] of the same
/// text and set none of the keys; each value must be one line (the
/// caller checks it: a line break would add a key).
pub fn with_keys(text: &str, parsed: &Parsed, keys: &[(&str, String)]) -> String {
    let newline = parsed.block.as_ref().map_or("\n", |b| b.newline);
    let lines: String = keys
        .iter()
        .map(|(k, v)| format!("{k}: {v}{newline}"))
        .collect();
    match &parsed.block {
        Some(block) => {
            let (head, tail) = text.split_at(block.closing);
            format!("{head}{lines}{tail}")
        }
        None => format!("{FENCE}\n{lines}{FENCE}\n{text}"),
    }
}

impl FrontMatter {
    /// Does the front matter set `key`?
    pub fn sets(&self, key: &str) -> bool {
        match key {
            "job_id" => self.job_id.is_some(),
            "profile" => self.profile.is_some(),
            "timeout" => self.timeout.is_some(),
            "max_attempts" => self.max_attempts.is_some(),
            "priority" => self.priority.is_some(),
            "events" => self.events.is_some(),
            "after" => !self.after.is_empty(),
            "not_before" => self.not_before.is_some(),
            _ => false,
        }
    }
}

/// One line of the text: its content without the line ending, where it
/// starts and where the next line starts.
struct Line<'a> {
    number: usize,
    content: &'a str,
    start: usize,
    end: usize,
}

/// The lines of a text with their byte offsets, for `\n` and `\r\n` endings.
struct Lines<'a> {
    text: &'a str,
    pos: usize,
    number: usize,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        Lines {
            text,
            pos: 0,
            number: 0,
        }
    }
}

impl<'a> Iterator for Lines<'a> {
    type Item = Line<'a>;

    fn next(&mut self) -> Option<Line<'a>> {
        if self.pos >= self.text.len() {
            return None;
        }
        let start = self.pos;
        let rest = &self.text[start..];
        let (raw, end) = match rest.find('\n') {
            Some(i) => (&rest[..i], start + i + 1),
            None => (rest, self.text.len()),
        };
        self.pos = end;
        self.number += 1;
        Some(Line {
            number: self.number,
            content: raw.strip_suffix('\r').unwrap_or(raw),
            start,
            end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> JobId {
        JobId::parse(s).expect("valid id")
    }

    fn body<'a>(text: &'a str, parsed: &Parsed) -> &'a str {
        &text[parsed.body_start..]
    }

    #[test]
    fn after_takes_one_job_or_a_list_and_refuses_what_names_none() {
        let one = parse("---\nafter: p/build\n---\nx").expect("one");
        assert_eq!(one.front.after, vec!["p/build"]);
        let list = parse("---\nafter: [0f3c9a1b, 'p/lint', p/lint]\n---\nx").expect("list");
        assert_eq!(
            list.front.after,
            vec!["0f3c9a1b", "p/lint"],
            "quotes off, once each"
        );
        for bad in ["after: [a, ]", "after: [a", "after: ", "after: [a,,b]"] {
            let text = format!("---\n{bad}\n---\nx");
            assert!(parse(&text).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..=AFTER_MAX).map(|i| format!("j{i}")).collect();
        let text = format!("---\nafter: [{}]\n---\nx", many.join(", "));
        assert!(parse(&text).is_err(), "more than {AFTER_MAX}");
    }

    #[test]
    fn keys_are_added_to_the_block_or_in_a_new_one() {
        let keys = [("priority", "5".to_owned()), ("after", "[p/a]".to_owned())];
        let plain = "body\n";
        let added = with_keys(plain, &parse(plain).expect("plain"), &keys);
        assert_eq!(added, "---\npriority: 5\nafter: [p/a]\n---\nbody\n");
        let crlf = "---\r\nprofile: x\r\n---\r\nbody";
        let added = with_keys(crlf, &parse(crlf).expect("crlf"), &keys[..1]);
        assert_eq!(added, "---\r\nprofile: x\r\npriority: 5\r\n---\r\nbody");
        let parsed = parse(&added).expect("still valid");
        assert!(parsed.front.sets("priority") && parsed.front.sets("profile"));
        assert!(!parsed.front.sets("after"));
    }

    #[test]
    fn no_block_means_the_whole_text_is_body() {
        for text in [
            "",
            "plain prompt\n",
            "\n---\njob_id: x\n---\n",
            " ---\n---\n",
        ] {
            let parsed = parse(text).expect("no front matter is fine");
            assert!(!parsed.has_block(), "{text:?}");
            assert_eq!(parsed.body_start, 0);
            assert_eq!(parsed.front, FrontMatter::default());
        }
    }

    #[test]
    fn block_sets_job_id_and_body_starts_after_it() {
        let text = "---\n# a comment\n\njob_id: nightly-1\n---\nDo it.\n---\nstill body\n";
        let parsed = parse(text).expect("valid");
        assert!(parsed.has_block());
        assert_eq!(parsed.front.job_id, Some(id("nightly-1")));
        assert_eq!(body(text, &parsed), "Do it.\n---\nstill body\n");
    }

    #[test]
    fn crlf_line_endings() {
        let text = "---\r\njob_id: \"win-1\"\r\n---\r\nbody\r\n";
        let parsed = parse(text).expect("valid");
        assert_eq!(parsed.front.job_id, Some(id("win-1")));
        assert_eq!(body(text, &parsed), "body\r\n");
    }

    #[test]
    fn a_file_that_is_only_front_matter_has_an_empty_body() {
        for text in ["---\njob_id: only\n---\n", "---\njob_id: only\n---"] {
            let parsed = parse(text).expect("valid");
            assert_eq!(parsed.front.job_id, Some(id("only")), "{text:?}");
            assert_eq!(parsed.body_start, text.len());
        }
        let empty = parse("---\n---\n").expect("an empty block is valid");
        assert!(empty.has_block());
        assert_eq!(empty.front, FrontMatter::default());
    }

    #[test]
    fn unknown_key_is_named_with_the_known_ones() {
        let err = parse("---\njob_id: a\nprofle: fast\n---\n").expect_err("unknown key");
        assert_eq!(err.line, 3);
        let text = err.to_string();
        assert!(text.contains("\"profle\""), "{text}");
        assert!(text.contains("job_id"), "{text}");
    }

    #[test]
    fn every_key_parses_its_values_and_refuses_bad_ones() {
        let text = "---\nprofile: review\ntimeout: 30m\nmax_attempts: 2\npriority: -5\nevents: false\n---\nbody\n";
        let f = parse(text).expect("valid").front;
        assert_eq!(f.profile.as_deref(), Some("review"));
        assert_eq!(f.timeout, Some(std::time::Duration::from_secs(1800)));
        assert_eq!(
            (f.max_attempts, f.priority, f.events),
            (Some(2), Some(-5), Some(false))
        );
        for bad in [
            "profile: ../x",
            "timeout: soon",
            "timeout: 0s",
            "max_attempts: 0",
            "max_attempts: many",
            "priority: 5000",
            "events: yes",
        ] {
            let text = format!("---\n{bad}\n---\nbody\n");
            assert!(parse(&text).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_listed_key_is_understood() {
        for key in KEYS {
            let err = FrontMatter::default()
                .set(key, "")
                .err()
                .unwrap_or_default();
            assert!(!err.contains("unknown key"), "{key}: {err}");
        }
    }

    #[test]
    fn duplicate_unclosed_and_malformed_blocks_are_errors() {
        let dup = parse("---\njob_id: a\njob_id: b\n---\n").expect_err("duplicate");
        assert!(dup.to_string().contains("twice"), "{dup}");
        assert_eq!(dup.line, 3);
        let unclosed = parse("---\njob_id: a\nbody without a fence\n").expect_err("unclosed");
        assert!(unclosed.to_string().contains("never closed"), "{unclosed}");
        let malformed = parse("---\njust words\n---\n").expect_err("no colon");
        assert!(malformed.to_string().contains("key: value"), "{malformed}");
        let bad_id = parse("---\njob_id: ../x\n---\n").expect_err("bad id");
        assert!(bad_id.to_string().contains("job id \"../x\""), "{bad_id}");
        assert!(parse("---").is_err(), "a lone fence never closes");
    }

    #[test]
    fn job_id_is_added_to_an_existing_block_or_a_new_one() {
        let plain = "Do it.\n";
        let added = with_job_id(plain, &parse(plain).expect("valid"), &id("new-1"));
        assert_eq!(added, "---\njob_id: new-1\n---\nDo it.\n");
        let reparsed = parse(&added).expect("valid");
        assert_eq!(reparsed.front.job_id, Some(id("new-1")));
        assert_eq!(body(&added, &reparsed), plain);

        let crlf = "---\r\n# keep me\r\n---\r\nbody\r\n";
        let added = with_job_id(crlf, &parse(crlf).expect("valid"), &id("new-2"));
        assert_eq!(
            added,
            "---\r\n# keep me\r\njob_id: new-2\r\n---\r\nbody\r\n"
        );
    }
}
