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

const STYLE: &str = include_str!("page.css");

/// What a page needs of its request: the CSP nonce of its inline
/// `<style>` and `<script>`s (`secure.rs`), the forms' CSRF token, where
/// it is (path and query: every form's `back`), the pauses in force
/// (the banner every page carries), and what the action that led here did
/// (`done=`, see [`notice`]).
pub struct Ctx {
    pub nonce: String,
    pub csrf: String,
    pub here: String,
    pub paused: Vec<String>,
    pub notice: Option<String>,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Ctx
where
    std::sync::Arc<super::Web>: axum::extract::FromRef<S>,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        use axum::extract::FromRef;
        let web = std::sync::Arc::<super::Web>::from_ref(state);
        let nonce = parts
            .extensions
            .get::<super::secure::Nonce>()
            .map(|n| n.0.clone())
            .unwrap_or_default();
        let query = parts.uri.query().unwrap_or("");
        let here = without_done(parts.uri.path(), query);
        let notice = serde_urlencoded::from_str::<Vec<(String, String)>>(query)
            .ok()
            .and_then(|pairs| {
                let get = |k: &str| {
                    pairs
                        .iter()
                        .find(|(key, _)| key == k)
                        .map(|(_, v)| v.clone())
                };
                notice(&get("done")?, get("n").and_then(|n| n.parse().ok()))
            });
        let paused = jobwarden_model::control::read(&web.layout)
            .list()
            .into_iter()
            .map(|(scope, p)| {
                let what = match scope.name() {
                    Some(name) => format!("{} {name}", scope.kind()),
                    None => "everything".to_owned(),
                };
                match p.reason.as_deref() {
                    Some(r) => format!("{what} ({r})"),
                    None => what,
                }
            })
            .collect();
        Ok(Ctx {
            nonce,
            csrf: web.csrf.clone(),
            here,
            paused,
            notice,
        })
    }
}

impl Ctx {
    /// For rows a live stream sends: their forms come back to `here`.
    pub fn for_stream(web: &super::Web, here: &str) -> Ctx {
        Ctx {
            nonce: String::new(),
            csrf: web.csrf.clone(),
            here: here.to_owned(),
            paused: Vec::new(),
            notice: None,
        }
    }
}

/// `path?query` without the notice of an action (`done`, `n`): where a
/// form on the page comes back to.
fn without_done(path: &str, query: &str) -> String {
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| !kv.is_empty() && !matches!(kv.split('=').next(), Some("done" | "n")))
        .collect();
    if rest.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", rest.join("&"))
    }
}

/// What an action did, said on the page it leads back to: the fixed
/// sentence of its code (`done=`), never text from the address.
pub fn notice(done: &str, n: Option<u64>) -> Option<String> {
    let n = n.unwrap_or(1);
    let text = match done {
        "aborted" => "Abort asked: the job is being stopped.".to_owned(),
        "cancelled" => "Cancelled.".to_owned(),
        "retried" => format!("Retry asked for {n} job{}.", if n == 1 { "" } else { "s" }),
        "cancelled-waiting" => format!(
            "Cancelled {n} waiting prompt{}.",
            if n == 1 { "" } else { "s" }
        ),
        "acked" => "Acknowledged.".to_owned(),
        "paused" => "Paused: nothing new starts there until resumed.".to_owned(),
        "resumed" => "Resumed.".to_owned(),
        "submitted" => "Submitted: the prompt is in the inbox.".to_owned(),
        "ended" => "The job had already ended; nothing was asked of it.".to_owned(),
        _ => return None,
    };
    Some(text)
}

/// `to` with the notice of what an action did.
pub fn with_notice(to: &str, done: &str, n: Option<u64>) -> String {
    let to = local_target(to);
    let sep = if to.contains('?') { '&' } else { '?' };
    match n {
        Some(n) => format!("{to}{sep}done={done}&n={n}"),
        None => format!("{to}{sep}done={done}"),
    }
}

/// A whole page: `title`, the body's HTML, the navigation and the paused
/// banner; its style and `script` (if any, run once the page is read)
/// carry the request's nonce.
pub fn page(ctx: &Ctx, title: &str, body: &str) -> String {
    let banner = if ctx.paused.is_empty() {
        String::new()
    } else {
        format!(
            "<p class=\"banner\" role=\"status\">paused: {} · nothing new starts there until resumed on <a href=\"/\">the overview</a></p>",
            esc(&ctx.paused.join(", "))
        )
    };
    let notice = ctx.notice.as_deref().map_or_else(String::new, |text| {
        format!("<p class=\"notice\" role=\"status\">{}</p>", esc(text))
    });
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · jobwarden</title><link rel=\"icon\" href=\"data:,\"><style nonce=\"{nonce}\">{STYLE}</style></head><body>\
         <header><nav aria-label=\"pages\"><a href=\"/\">jobwarden</a><a href=\"/jobs\">jobs</a><a href=\"/submit\">submit</a><a href=\"/history\">history</a><a href=\"/metrics\">metrics</a></nav></header>\
         {banner}<main>{notice}{body}</main><script nonce=\"{nonce}\">{SCRIPT}</script></body></html>",
        title = esc(title),
        nonce = esc(&ctx.nonce),
    )
}

/// The script every page shares: times shown in the reader's own zone
/// and as "in 1h55m" / "3m ago", kept current without touching the rows
/// around them; a live list's rows replaced one by one, only those that
/// changed; a log followed as it grows. What each piece works on is
/// named by `data-` attributes, never by text put in the script.
const SCRIPT: &str = include_str!("page.js");

/// An instant as `<time>`: UTC text the page's script turns into the
/// reader's zone and a relative "3m ago" (or "in 1h55m").
pub fn when(ms: u64) -> String {
    let ts = jobwarden_sys::clock::Timestamp::from_epoch_ms(ms);
    format!(
        "<time datetime=\"{iso}\" data-ms=\"{ms}\">{iso}</time>",
        iso = esc(&ts.to_string())
    )
}

/// A prompt as the CLI names it, escaped: `project/name`, or `name` at
/// the top of the inbox.
pub fn prompt(project: &str, name: &str) -> String {
    if project.is_empty() {
        esc(name)
    } else {
        esc(&format!("{project}/{name}"))
    }
}

/// The cells that open a job's row, keyed by its id: a link to its page
/// (its short id), its prompt and its state.
pub fn job_cells(j: &jobwarden_ledger::IndexedJob) -> String {
    format!(
        "<td data-label=\"job\"><a href=\"/jobs/{id}\">{short}</a></td>\
         <td data-label=\"prompt\">{prompt}</td><td data-label=\"state\">{state}</td>",
        id = url(&j.id),
        short = esc(&jobwarden_ledger::short_id(&j.id)),
        prompt = prompt(&j.project, &j.name),
        state = state(&j.state),
    )
}

/// A state's name in its colour.
pub fn state(name: &str) -> String {
    format!("<span class=\"state state-{0}\">{0}</span>", esc(name))
}

/// A POST button carrying the CSRF token and the page to come back to.
pub fn button(ctx: &Ctx, action: &str, label: &str, extra: &[(&str, &str)]) -> String {
    let mut fields = format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"back\" value=\"{}\">",
        esc(&ctx.csrf),
        esc(&ctx.here)
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
