//! What every answer carries and what every POST must show, before the
//! token is even looked at (this layer wraps `auth.rs`, so the login
//! redirect and the 401 carry the headers too):
//!
//! - a Content-Security-Policy whose only scripts and styles are the
//!   page's own inline ones, named by a nonce fresh for each response
//!   ([`Nonce`], given to the pages through the request); nothing
//!   framed, fetched or posted anywhere else; the page never framed
//!   (`frame-ancestors 'none'`, and `X-Frame-Options: DENY` for older
//!   browsers);
//! - `Cache-Control: no-store` (the pages show job output, and the login
//!   redirect sets the session cookie), `X-Content-Type-Options: nosniff`,
//!   `Referrer-Policy: no-referrer` (an address never leaves the page);
//! - a POST from another site is refused (403) whatever it carries: its
//!   `Sec-Fetch-Site` must be `same-origin` (or `none`: typed by the
//!   user), and its `Origin`, when sent, the address it was sent to (or
//!   `null`, what a browser sends under `no-referrer`, with
//!   `Sec-Fetch-Site: same-origin` beside it). A client that sends
//!   neither (curl, a script) is judged by its token and the form's CSRF
//!   token alone.

use axum::extract::Request;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The nonce of this response's inline `<script>` and `<style>`.
#[derive(Debug, Clone)]
pub struct Nonce(pub String);

pub async fn guard(mut req: Request, next: Next) -> Response {
    if req.method() == Method::POST
        && let Err(why) = same_site(req.headers())
    {
        let mut res = (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("jobwarden: {why}\n"),
        )
            .into_response();
        protect(res.headers_mut(), None);
        return res;
    }
    let nonce = match super::auth::random_hex(16) {
        Ok(n) => n,
        Err(e) => {
            let mut res = (
                StatusCode::INTERNAL_SERVER_ERROR,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                format!("jobwarden: {e}\n"),
            )
                .into_response();
            protect(res.headers_mut(), None);
            return res;
        }
    };
    req.extensions_mut().insert(Nonce(nonce.clone()));
    let mut res = next.run(req).await;
    protect(res.headers_mut(), Some(&nonce));
    res
}

/// Whether a POST comes from this site; the refusal says why not.
fn same_site(headers: &HeaderMap) -> Result<(), String> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = get("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return Err(format!(
            "a form posted from another site (Sec-Fetch-Site: {site}) is refused; use the page itself"
        ));
    }
    // Under `Referrer-Policy: no-referrer` a browser says `Origin: null` on
    // the page's own form posts; its `Sec-Fetch-Site`, which no page can
    // set, then says whose they are.
    let vouched = get("sec-fetch-site") == Some("same-origin");
    if let Some(origin) = get("origin").filter(|o| !(vouched && *o == "null")) {
        let host = get("host").unwrap_or("");
        let ours = ["http://", "https://"]
            .iter()
            .any(|scheme| origin.strip_prefix(scheme) == Some(host));
        if !ours || host.is_empty() {
            return Err(format!(
                "a form posted from {origin:?}, not from this page ({host}), is refused; use the page itself"
            ));
        }
    }
    Ok(())
}

fn protect(headers: &mut HeaderMap, nonce: Option<&str>) {
    let own = nonce.map_or_else(String::new, |n| format!(" 'nonce-{n}'"));
    let csp = format!(
        "default-src 'none'; script-src{own}; style-src{own}; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    );
    let set = [
        (header::CONTENT_SECURITY_POLICY, csp),
        (header::X_FRAME_OPTIONS, "DENY".to_owned()),
        (header::CACHE_CONTROL, "no-store".to_owned()),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        (header::REFERRER_POLICY, "no-referrer".to_owned()),
    ];
    for (name, value) in set {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_post_from_another_site_is_refused_and_one_from_the_page_passes() {
        let page = headers(&[
            ("host", "127.0.0.1:8765"),
            ("origin", "http://127.0.0.1:8765"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert_eq!(same_site(&page), Ok(()));
        let no_referrer = headers(&[
            ("host", "127.0.0.1:8765"),
            ("origin", "null"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert_eq!(same_site(&no_referrer), Ok(()));
        assert_eq!(same_site(&headers(&[("host", "h:1")])), Ok(()), "curl");
        for bad in [
            headers(&[
                ("host", "127.0.0.1:8765"),
                ("origin", "http://127.0.0.1:9999"),
            ]),
            headers(&[("host", "127.0.0.1:8765"), ("origin", "null")]),
            headers(&[("host", "127.0.0.1:8765"), ("sec-fetch-site", "same-site")]),
            headers(&[("host", "127.0.0.1:8765"), ("sec-fetch-site", "cross-site")]),
            headers(&[("origin", "http://")]),
        ] {
            assert!(same_site(&bad).is_err(), "{bad:?}");
        }
    }
}
