//! `jobwarden web [--listen ADDR] [--allow-remote] [--print-url]`: the
//! local web page ([`jobwarden_web`]) in this process, until SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{GlobalArgs, WebArgs};
use jobwarden_web::{self as web, Web};

pub fn run(global: &GlobalArgs, args: &WebArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_for_reading(global)?;
    super::root_must_exist(&layout)?;
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        anyhow::bail!(
            "--listen {} is not a loopback address: anyone who can reach it could try the token; add --allow-remote to mean it",
            args.listen
        );
    }
    if args.print_url {
        println_url(&web::print_url(&layout, args.listen)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Before anything is made: a taken port changes nothing.
    let listener = bind(args.listen)?;
    let token = web::token(&layout, true)?;
    let metrics_token = web::metrics_token(&layout, true)?;
    if !args.listen.ip().is_loopback() {
        tracing::warn!(listen = %args.listen, "serving on an address other than the loopback (--allow-remote): protect the token");
    }
    let state = Web {
        csrf: jobwarden_web::csrf_of(&token),
        token,
        metrics_token,
        layout,
        config: jobwarden_web::Current::new(config),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(web::serve(state, listener))?;
    Ok(ExitCode::SUCCESS)
}

/// The page's socket, or an error that names the address, where it came
/// from (`--listen`, whose default is 127.0.0.1:8765) and what to do.
fn bind(listen: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    std::net::TcpListener::bind(listen).map_err(|e| {
        let what = match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "{listen} is already in use (another `jobwarden web`, or another program: \
                 `ss -ltnp 'sport = :{port}'` names it)",
                port = listen.port()
            ),
            _ => format!("cannot listen on {listen}: {e}"),
        };
        anyhow::anyhow!(
            "{what}; give the page another address with --listen ADDR:PORT \
             (under systemd, on the ExecStart line of jobwarden-web.service)"
        )
    })
}

fn println_url(url: &str) -> anyhow::Result<()> {
    use std::io::Write;
    writeln!(std::io::stdout().lock(), "{url}").context("writing to stdout")
}
