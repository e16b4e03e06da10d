//! jobwarden-web: `jobwarden web`, a local web page, its own process,
//! reading the root and acting only through the engine's operations, so it
//! can never hurt the daemon. Served on the loopback unless told otherwise
//! (`--allow-remote`, said in the log), behind a token (`web.token` under
//! the root, made at first start, readable by the service's user only;
//! `--print-url` gives the address with it). Every state change is a POST
//! carrying the page's CSRF token, from the page's own origin; everything
//! shown is escaped (prompt names and logs are written by jobs); every
//! answer carries a CSP with a fresh nonce, and is never framed or cached.
//! The page works with the config the daemon has in force.
//!
//! - `secure.rs` — the headers every answer carries; POSTs from other sites refused.
//! - `auth.rs` — the token, the session cookie, the CSRF token.
//! - `current.rs` — the daemon's config in force, followed across reloads.
//! - `html.rs` — the layout, escaping, times, buttons; `page.css`, `page.js` its style and script.
//! - `overview.rs` — the overview: health, running, queue, attention, throughput, pauses.
//! - `list.rs` — the job list: filters, sorting, pages, bulk actions.
//! - `job_page.rs` — a job: summary, stages, log, attempts, record, events.
//! - `logs.rs` — a log's tail, its last line, the whole raw log.
//! - `ansi.rs` — log text as numbered HTML lines with its colours.
//! - `pages.rs` — submit, history, `/metrics`, the refusal page.
//! - `charts.rs` — the charts, as SVG.
//! - `actions.rs` — the POSTs.
//! - `live.rs` — server-sent events: keyed rows as they change, a log as it grows.
//! - `api.rs` — the JSON API under `/api/`.

mod actions;
mod ansi;
mod api;
mod auth;
mod charts;
mod current;
mod html;
mod job_page;
mod list;
mod live;
mod logs;
mod overview;
mod pages;
mod secure;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use jobwarden_model::config::Config;
use jobwarden_model::layout::Layout;

pub use auth::{csrf_of, metrics_token, print_url, token};
pub use current::Current;

/// What every handler shares.
pub struct Web {
    pub layout: Layout,
    /// The config the daemon has in force (`current.rs`).
    pub config: Current,
    pub token: String,
    /// The token that reads `/metrics` only.
    pub metrics_token: String,
    /// The CSRF token of every form: derived from the access token, so a
    /// page from another origin cannot know it.
    pub csrf: String,
}

impl Web {
    /// The config in force now.
    pub fn config(&self) -> Arc<Config> {
        self.config.get(&self.layout)
    }
}

/// Serve on `listener` (bound by the caller, who knows how the address
/// was given and can say so when it is taken) until the process is told
/// to stop (SIGTERM, SIGINT).
pub async fn serve(web: Web, listener: std::net::TcpListener) -> anyhow::Result<()> {
    let state = Arc::new(web);
    let app = Router::new()
        .route("/", get(overview::overview))
        .route("/jobs", get(list::jobs))
        .route("/jobs/{id}", get(job_page::job))
        .route("/jobs/{id}/log", get(logs::raw))
        .route("/jobs/{id}/abort", post(actions::abort))
        .route("/jobs/{id}/ack", post(actions::ack))
        .route("/jobs/{id}/retry", post(actions::retry))
        .route("/waiting/cancel", post(actions::cancel_waiting))
        .route("/bulk/retry", post(actions::bulk_retry))
        .route("/bulk/cancel", post(actions::bulk_cancel))
        .route("/submit", get(pages::submit_form).post(actions::submit))
        .route("/history", get(pages::history))
        .route("/pause", post(actions::pause))
        .route("/resume", post(actions::resume))
        .route("/live/jobs", get(live::jobs))
        .route("/live/health", get(live::health))
        .route("/live/running", get(live::running))
        .route("/live/attention", get(live::attention))
        .route("/live/queue", get(live::queue))
        .route("/live/jobs/{id}/log", get(live::log))
        .route("/api/jobs", get(api::jobs))
        .route("/api/jobs/{id}", get(api::job))
        .route("/api/jobs/{id}/events", get(api::events))
        .route("/api/history", get(api::history))
        .route("/api/status", get(api::status))
        .route("/metrics", get(pages::metrics))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require,
        ))
        .layer(axum::middleware::from_fn(secure::guard))
        .with_state(state);
    let listen = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    tracing::info!(%listen, "web page served");
    axum::serve(listener, app)
        .with_graceful_shutdown(stopped())
        .await?;
    Ok(())
}

async fn stopped() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
