//! jobwarden-web: `jobwarden web`, a local web page, its own process,
//! reading the root and acting only through the engine's operations, so it
//! can never hurt the daemon. Served on the loopback unless told otherwise
//! (`--allow-remote`, said in the log), behind a token (`web.token` under
//! the root, made at first start, readable by the service's user only;
//! `--print-url` gives the address with it). Every state change is a POST
//! carrying the page's CSRF token; everything shown is escaped (prompt
//! names and logs are written by jobs).
//!
//! - `auth.rs` — the token, the session cookie, the CSRF token.
//! - `pages.rs` — the pages; `html.rs` their layout and escaping.
//! - `list.rs` — the job list and its filters.
//! - `charts.rs` — the charts, as SVG.
//! - `actions.rs` — the POSTs.
//! - `live.rs` — server-sent events: the job list, a log as it grows.

mod actions;
mod auth;
mod charts;
mod html;
mod list;
mod live;
mod pages;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use jobwarden_model::config::Config;
use jobwarden_model::layout::Layout;

pub use auth::{csrf_of, metrics_token, print_url, token};

/// What every handler shares.
pub struct Web {
    pub layout: Layout,
    pub config: Config,
    pub token: String,
    /// The token that reads `/metrics` only.
    pub metrics_token: String,
    /// The CSRF token of every form: derived from the access token, so a
    /// page from another origin cannot know it.
    pub csrf: String,
}

/// Serve until the process is told to stop (SIGTERM, SIGINT).
pub async fn serve(web: Web, listen: SocketAddr) -> anyhow::Result<()> {
    let state = Arc::new(web);
    let app = Router::new()
        .route("/", get(pages::overview))
        .route("/jobs", get(list::jobs))
        .route("/jobs/{id}", get(pages::job))
        .route("/jobs/{id}/abort", post(actions::abort))
        .route("/jobs/{id}/ack", post(actions::ack))
        .route("/jobs/{id}/retry", post(actions::retry))
        .route("/waiting/cancel", post(actions::cancel_waiting))
        .route("/submit", get(pages::submit_form).post(actions::submit))
        .route("/history", get(pages::history))
        .route("/pause", post(actions::pause))
        .route("/resume", post(actions::resume))
        .route("/live/jobs", get(live::jobs))
        .route("/live/jobs/{id}/log", get(live::log))
        .route("/metrics", get(pages::metrics))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require,
        ))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
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
