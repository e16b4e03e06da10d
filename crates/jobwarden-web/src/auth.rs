//! Access to the page: a token (256 random bits, hex) in `web.token`
//! under the root, made at first start with mode 0600. A request shows it
//! as the session cookie, an `Authorization: Bearer` header (a scraper of
//! `/metrics`), or once in the address (`?token=…`, what `--print-url`
//! gives): that visit sets the cookie (HttpOnly, SameSite=Strict) and is
//! sent on to the same page without it. Anything else is refused (401).
//!
//! `/metrics` also takes a second token, `metrics.token` (made beside the
//! first, 0600): a scraper given it can read the metrics and nothing else,
//! so that Prometheus never holds what could abort a job.

use std::io::Read;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};

use super::Web;
use jobwarden_model::layout::Layout;

const COOKIE: &str = "jobwarden_token";

/// The token of `layout`'s page, made (0600, never replaced) when
/// `create` and there is none.
pub fn token(layout: &Layout, create: bool) -> anyhow::Result<String> {
    secret(layout, &layout.web_token(), create)
}

/// The token that reads `/metrics` only, made as [`token`] is.
pub fn metrics_token(layout: &Layout, create: bool) -> anyhow::Result<String> {
    secret(layout, &layout.metrics_token(), create)
}

fn secret(layout: &Layout, path: &std::path::Path, create: bool) -> anyhow::Result<String> {
    match jobwarden_sys::fsio::read_capped(layout.root(), path, 4096) {
        Ok((bytes, _)) => {
            let text = String::from_utf8_lossy(&bytes).trim().to_owned();
            if text.len() < 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                anyhow::bail!(
                    "{} does not hold a token (64 hex digits); remove it and start `jobwarden web` again to make a new one",
                    path.display()
                );
            }
            Ok(text)
        }
        Err(e) if !create || e.kind() != std::io::ErrorKind::NotFound => {
            anyhow::bail!("reading the token {}: {e}", path.display())
        }
        Err(_) => {
            let text = random_hex(32)?;
            jobwarden_sys::fsio::create_new_private(
                layout.root(),
                path,
                format!("{text}\n").as_bytes(),
            )?;
            // Another start may have made one first: its is the one.
            secret(layout, path, false)
        }
    }
}

/// `n` random bytes from the kernel, as hex.
pub(super) fn random_hex(n: usize) -> anyhow::Result<String> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| anyhow::anyhow!("reading /dev/urandom: {e}"))?;
    Ok(jobwarden_model::job::hex(&bytes))
}

/// `http://127.0.0.1:8765/?token=…`.
pub fn print_url(layout: &Layout, listen: std::net::SocketAddr) -> anyhow::Result<String> {
    Ok(format!("http://{listen}/?token={}", token(layout, true)?))
}

/// The CSRF token of forms, from the access token.
pub fn csrf_of(token: &str) -> String {
    jobwarden_model::job::hex(&Sha256::digest(
        format!("jobwarden csrf {token}").as_bytes(),
    ))
}

/// Constant-time comparison of two tokens.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
}

fn bearer_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(|t| t.trim().to_owned())
}

fn query_token(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "token")
        .map(|(_, v)| v.to_owned())
}

/// `path` and its query without the token: where a login goes on to.
fn without_token(path: &str, query: Option<&str>) -> String {
    let rest: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty() && kv.split('=').next() != Some("token"))
        .collect();
    if rest.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", rest.join("&"))
    }
}

/// Let through a request that shows the token; log in one that carries
/// it in its address; refuse the rest.
pub async fn require(State(web): State<Arc<Web>>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    if [cookie_token(headers), bearer_token(headers)]
        .into_iter()
        .flatten()
        .any(|t| same(&t, &web.token))
    {
        return next.run(req).await;
    }
    if req.uri().path() == "/metrics"
        && req.method() == axum::http::Method::GET
        && bearer_token(headers).is_some_and(|t| same(&t, &web.metrics_token))
    {
        return next.run(req).await;
    }
    if let Some(t) = query_token(req.uri().query())
        && same(&t, &web.token)
        && req.method() == axum::http::Method::GET
    {
        let to = without_token(req.uri().path(), req.uri().query());
        let cookie = format!("{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/", web.token);
        return (
            [(header::SET_COOKIE, cookie)],
            Redirect::to(super::html::local_target(&to)),
        )
            .into_response();
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "jobwarden: this page needs its token; open the address `jobwarden web --print-url` gives\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole_and_csrf_differs_from_the_token() {
        assert!(same("abcd", "abcd"));
        assert!(!same("abcd", "abce"));
        assert!(!same("abcd", "abc"));
        assert_ne!(csrf_of("t"), "t");
        assert_eq!(csrf_of("t"), csrf_of("t"));
        assert_eq!(query_token(Some("a=1&token=xy")), Some("xy".into()));
        assert_eq!(
            without_token("/jobs", Some("token=xy&state=failed&q=a%20b")),
            "/jobs?state=failed&q=a%20b"
        );
        assert_eq!(without_token("/", Some("token=xy")), "/");
    }
}
