//! The page's HTML: a layout, escaping, and the small pieces the pages
//! share. Everything shown is escaped here; nothing a job or a prompt
//! wrote reaches the page unescaped.

/// `text` safe inside HTML text and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// `target` if it is a path on this site, else `/`: the one test of
/// every redirect's target. A local path begins with one `/` followed by
/// neither `/` nor `\` (browsers read `//host` and `/\host` as another
/// site) and holds no control character.
pub fn local_target(target: &str) -> &str {
    let mut chars = target.chars();
    let local = chars.next() == Some('/')
        && !matches!(chars.next(), Some('/' | '\\'))
        && !target.chars().any(char::is_control);
    if local { target } else { "/" }
}

/// `text` as a URL path segment or query value.
pub fn url(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const STYLE: &str = r#"
:root { color-scheme: light dark; --fg: #1b1f24; --muted: #667; --bg: #fff; --line: #dde; --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #8b949e; --bg: #0d1117; --line: #30363d; } }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: var(--fg); background: var(--bg); }
header { display: flex; flex-wrap: wrap; gap: .8em; align-items: center; padding: .6em 1em; border-bottom: 1px solid var(--line); }
header a { color: inherit; text-decoration: none; font-weight: 600; }
main { padding: 1em; max-width: 1100px; margin: auto; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3em .5em; border-bottom: 1px solid var(--line); vertical-align: top; }
td.num { text-align: right; }
.state-succeeded, .state-merged { color: var(--ok); }
.state-failed, .state-timed_out, .state-setup_failed, .state-interrupted { color: var(--bad); }
.state-running, .state-preparing, .state-publishing { color: var(--warn); }
td code { word-break: break-all; }
pre { white-space: pre-wrap; word-break: break-word; background: rgba(127,127,127,.08); padding: .6em; overflow-x: auto; }
form.inline { display: inline; }
button { font: inherit; padding: .3em .8em; cursor: pointer; }
.muted { color: var(--muted); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(140px, 1fr)); gap: .6em; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: .6em; color: inherit; text-decoration: none; }
.card b { font-size: 1.4em; display: block; }
@media (max-width: 600px) { th.wide, td.wide { display: none; } main { padding: .5em; } }
"#;

/// A whole page: `title`, the body's HTML.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · jobwarden</title><style>{STYLE}</style></head><body>\
         <header><a href=\"/\">jobwarden</a><a href=\"/jobs\">jobs</a><a href=\"/submit\">submit</a><a href=\"/history\">history</a><a href=\"/metrics\">metrics</a></header>\
         <main>{body}</main></body></html>",
        esc(title)
    )
}

/// A state's name in its colour.
pub fn state(name: &str) -> String {
    format!("<span class=\"state-{0}\">{0}</span>", esc(name))
}

/// A POST button carrying the CSRF token.
pub fn button(action: &str, label: &str, csrf: &str, extra: &[(&str, &str)]) -> String {
    let mut fields = format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(csrf)
    );
    for (k, v) in extra {
        fields.push_str(&format!(
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            esc(k),
            esc(v)
        ));
    }
    format!(
        "<form class=\"inline\" method=\"post\" action=\"{}\">{fields}<button type=\"submit\">{}</button></form>",
        esc(action),
        esc(label)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_stay_on_the_site() {
        for ok in ["/", "/jobs", "/jobs/abc?x=1", "/a//b"] {
            assert_eq!(local_target(ok), ok);
        }
        for bad in [
            "",
            "//evil.example",
            "/\\evil.example/",
            "http://evil.example/",
            "evil",
            "/jobs\r\nSet-Cookie: x",
            "/\u{7f}",
        ] {
            assert_eq!(local_target(bad), "/", "{bad:?}");
        }
    }

    #[test]
    fn everything_that_could_be_markup_is_escaped() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(esc("a\u{1b}[31mb"), "a\u{fffd}[31mb");
        assert_eq!(url("a b/<c>"), "a%20b%2F%3Cc%3E");
    }
}
