//! Compiler and linter diagnostics found in a job's output, so that the
//! ledger can answer which executions produced an error code, which later
//! run of the same prompt got rid of it, and which files carry the most.
//!
//! Three shapes are read, line by line:
//!
//! - rustc and cargo: `error[E0425]: message` (or `warning: …`), its
//!   location on a following ` --> file:line:col` line;
//! - the common `file:line:col: error: message` of gcc, clang, Go, eslint's
//!   unix format and many more (`warning`, `note` too; a `[code]` after the
//!   severity is taken as the code), and TypeScript's
//!   `file(line,col): error TS2304: message`;
//! - JSON diagnostics: cargo's `--message-format=json` lines
//!   (`"reason":"compiler-message"`).
//!
//! Parsing is bounded: it reads the last [`MAX_PARSED_BYTES`] of what the
//! ledger keeps of the output (the tails of stdout and stderr), lines
//! longer than [`MAX_LINE`] are passed over, and at most
//! [`MAX_DIAGNOSTICS`] are kept per execution. It runs
//! when the execution is recorded, after the job ended: it never slows the
//! job.

use std::sync::OnceLock;

use regex::Regex;

/// The most diagnostics kept of one execution.
pub const MAX_DIAGNOSTICS: usize = 200;

/// Longer lines are not read (a minified bundle, a binary dump).
pub const MAX_LINE: usize = 8192;

/// Longest message kept, in bytes (cut at a character boundary).
pub const MAX_MESSAGE: usize = 500;

/// How many lines after a rustc headline its ` --> ` location may come.
const LOCATION_WITHIN: usize = 4;

/// One diagnostic, as the tool printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// `error` or `warning` (a `note`, `help` or `info` counts as neither
    /// and is not kept).
    pub severity: &'static str,
    /// The tool's code (`E0425`, `TS2304`, `no-unused-vars`), if it gave one.
    pub code: Option<String>,
    /// The file as printed (relative to where the tool ran, or absolute).
    pub file: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub message: String,
}

/// The most of one output read: its last this many bytes (a long tail's
/// end holds what made the run fail).
pub const MAX_PARSED_BYTES: usize = 256 * 1024;

/// [`parse`] of `text`'s last [`MAX_PARSED_BYTES`], from a line's start.
pub fn parse_tail(text: &str) -> Vec<Diagnostic> {
    if text.len() <= MAX_PARSED_BYTES {
        return parse(text);
    }
    let mut start = text.len() - MAX_PARSED_BYTES;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let tail = &text[start..];
    parse(tail.split_once('\n').map_or("", |(_, rest)| rest))
}

/// The diagnostics in `text`, in the order printed, without repeats (the
/// same severity, code, place and message twice is one).
pub fn parse(text: &str) -> Vec<Diagnostic> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found: Vec<Diagnostic> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if found.len() >= MAX_DIAGNOSTICS {
            break;
        }
        if line.len() > MAX_LINE {
            continue;
        }
        let parsed = json_line(line)
            .or_else(|| located_line(line))
            .or_else(|| rustc_headline(line, &lines[i + 1..]));
        if let Some(d) = parsed
            && !found.contains(&d)
        {
            found.push(d);
        }
    }
    found
}

fn severity(word: &str) -> Option<&'static str> {
    match word.to_ascii_lowercase().as_str() {
        "error" | "fatal error" => Some("error"),
        "warning" => Some("warning"),
        _ => None,
    }
}

fn message(text: &str) -> String {
    let text = text.trim();
    let mut end = text.len().min(MAX_MESSAGE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn regex(cell: &'static OnceLock<Option<Regex>>, pattern: &str) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
}

/// `error[E0425]: message`, located by a ` --> file:line:col` line among
/// the next few. A headline without a location and without a code (the
/// summary `error: could not compile …`) is not a diagnostic of a file.
fn rustc_headline(line: &str, after: &[&str]) -> Option<Diagnostic> {
    static HEAD: OnceLock<Option<Regex>> = OnceLock::new();
    static ARROW: OnceLock<Option<Regex>> = OnceLock::new();
    let head = regex(&HEAD, r"^(error|warning)(?:\[([A-Za-z0-9_-]+)\])?: (.+)$")?;
    let arrow = regex(&ARROW, r"^\s*--> (.+?):(\d+):(\d+)\s*$")?;
    let caps = head.captures(line)?;
    let location = after
        .iter()
        .take(LOCATION_WITHIN)
        .take_while(|l| !head.is_match(l))
        .find_map(|l| arrow.captures(l));
    let code = caps.get(2).map(|m| m.as_str().to_owned());
    if location.is_none() && code.is_none() {
        return None;
    }
    Some(Diagnostic {
        severity: severity(&caps[1])?,
        code,
        file: location.as_ref().map(|c| c[1].to_owned()),
        line: location.as_ref().and_then(|c| c[2].parse().ok()),
        column: location.as_ref().and_then(|c| c[3].parse().ok()),
        message: message(&caps[3]),
    })
}

/// `file:line:col: error: message` (an optional `[code]` after the
/// severity, or at the end as eslint and clang print it), or TypeScript's
/// `file(line,col): error TS2304: message`.
fn located_line(line: &str) -> Option<Diagnostic> {
    static COLON: OnceLock<Option<Regex>> = OnceLock::new();
    static TSC: OnceLock<Option<Regex>> = OnceLock::new();
    static TRAILING_CODE: OnceLock<Option<Regex>> = OnceLock::new();
    let colon = regex(
        &COLON,
        r"^([^\s:][^:]*):(\d+):(?:(\d+):)? (fatal error|error|warning)(?:\[([A-Za-z0-9_./-]+)\])?: (.+)$",
    )?;
    let tsc = regex(
        &TSC,
        r"^([^\s(][^(]*)\((\d+),(\d+)\): (error|warning) ([A-Z]+\d+): (.+)$",
    )?;
    let trailing = regex(&TRAILING_CODE, r"\s+\[([A-Za-z0-9_./-]+)\]$")?;
    if let Some(c) = colon.captures(line) {
        let mut text = c[6].to_owned();
        let mut code = c.get(5).map(|m| m.as_str().to_owned());
        if code.is_none()
            && let Some(t) = trailing.captures(&text)
        {
            code = Some(t[1].to_owned());
            let at = t.get(0).map_or(text.len(), |m| m.start());
            text.truncate(at);
        }
        return Some(Diagnostic {
            severity: severity(&c[4])?,
            code,
            file: Some(c[1].to_owned()),
            line: c[2].parse().ok(),
            column: c.get(3).and_then(|m| m.as_str().parse().ok()),
            message: message(&text),
        });
    }
    let c = tsc.captures(line)?;
    Some(Diagnostic {
        severity: severity(&c[4])?,
        code: Some(c[5].to_owned()),
        file: Some(c[1].to_owned()),
        line: c[2].parse().ok(),
        column: c[3].parse().ok(),
        message: message(&c[6]),
    })
}

/// One of cargo's `--message-format=json` lines.
fn json_line(line: &str) -> Option<Diagnostic> {
    let line = line.trim_start();
    if !line.starts_with('{') || !line.contains("\"compiler-message\"") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["reason"] != "compiler-message" {
        return None;
    }
    let m = &v["message"];
    let span = m["spans"]
        .as_array()
        .and_then(|spans| {
            spans
                .iter()
                .find(|s| s["is_primary"] == true)
                .or(spans.first())
        })
        .cloned()
        .unwrap_or_default();
    let as_u32 = |x: &serde_json::Value| x.as_u64().and_then(|n| u32::try_from(n).ok());
    Some(Diagnostic {
        severity: severity(m["level"].as_str()?)?,
        code: m["code"]["code"].as_str().map(str::to_owned),
        file: span["file_name"].as_str().map(str::to_owned),
        line: as_u32(&span["line_start"]),
        column: as_u32(&span["column_start"]),
        message: message(m["message"].as_str()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rustc_headlines_with_their_locations() {
        let out = "   Compiling demo v0.1.0\n\
                   error[E0425]: cannot find value `x` in this scope\n \
                   --> src/main.rs:2:13\n  |\n\
                   warning: unused variable: `y`\n --> src/lib.rs:7:9\n\
                   error: could not compile `demo` (bin \"demo\") due to 1 previous error\n";
        let found = parse(out);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert_eq!(found[0].code.as_deref(), Some("E0425"));
        assert_eq!(found[0].severity, "error");
        assert_eq!(found[0].file.as_deref(), Some("src/main.rs"));
        assert_eq!((found[0].line, found[0].column), (Some(2), Some(13)));
        assert_eq!(found[0].message, "cannot find value `x` in this scope");
        assert_eq!(found[1].severity, "warning");
        assert_eq!(found[1].code, None);
        assert_eq!(found[1].file.as_deref(), Some("src/lib.rs"));
    }

    #[test]
    fn reads_the_common_file_line_col_shape_and_typescript() {
        let out = "main.c:3:5: error: 'y' undeclared (first use in this function)\n\
                   /abs/app.js:10:1: warning: Unexpected console statement [no-console]\n\
                   main.go:4:2: error[vet]: unreachable code\n\
                   src/a.ts(12,7): error TS2304: Cannot find name 'foo'.\n\
                   main.c:9:1: note: declared here\n";
        let found = parse(out);
        assert_eq!(found.len(), 4, "{found:#?}");
        assert_eq!(found[0].file.as_deref(), Some("main.c"));
        assert_eq!(found[0].code, None);
        assert_eq!(found[1].code.as_deref(), Some("no-console"));
        assert_eq!(found[1].message, "Unexpected console statement");
        assert_eq!(found[2].code.as_deref(), Some("vet"));
        assert_eq!(found[3].code.as_deref(), Some("TS2304"));
        assert_eq!((found[3].line, found[3].column), (Some(12), Some(7)));
    }

    #[test]
    fn reads_cargo_json_messages() {
        let line = r#"{"reason":"compiler-message","package_id":"demo","message":{"message":"mismatched types","code":{"code":"E0308","explanation":"..."},"level":"error","spans":[{"file_name":"src/x.rs","line_start":4,"column_start":17,"is_primary":true}],"rendered":"error[E0308]..."}}"#;
        let found = parse(line);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].code.as_deref(), Some("E0308"));
        assert_eq!(found[0].file.as_deref(), Some("src/x.rs"));
        assert_eq!(found[0].line, Some(4));
        assert!(parse(r#"{"reason":"build-finished","success":false}"#).is_empty());
    }

    #[test]
    fn only_the_end_of_a_long_output_is_read() {
        let filler = "x\n".repeat(MAX_PARSED_BYTES);
        let text = format!("a.c:1:1: error: early\n{filler}b.c:2:1: error: late\n");
        let found = parse_tail(&text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].message, "late");
    }

    #[test]
    fn repeats_are_one_and_the_count_is_bounded() {
        let line = "a.c:1:1: error: boom\n";
        assert_eq!(parse(&line.repeat(3)).len(), 1);
        let many: String = (0..1000)
            .map(|i| format!("a.c:{i}:1: error: boom\n"))
            .collect();
        assert_eq!(parse(&many).len(), MAX_DIAGNOSTICS);
        let long = format!("a.c:1:1: error: {}\n", "x".repeat(MAX_LINE));
        assert!(parse(&long).is_empty());
    }
}
