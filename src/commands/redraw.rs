//! `--watch` for `jobs` and `status`: the view drawn again in place every
//! second on a terminal, as `watch(1)` does, until Ctrl-C, which ends it
//! with exit 0. On anything but a terminal it is refused: a pipe wants
//! `--json` (or `jobwarden wait`), not screens.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

/// How often the view is drawn again.
const EVERY: Duration = Duration::from_secs(1);

/// Draw with `draw` every second, the screen cleared before each, until
/// Ctrl-C; `what` names the command in the refusal and the header.
pub fn every_second(
    what: &str,
    mut draw: impl FnMut() -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    if !std::io::stdout().is_terminal() {
        anyhow::bail!(
            "{what} --watch draws on a terminal, and stdout is not one; on a pipe use `{what} --json` (or `jobwarden wait` to wait for jobs)"
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        loop {
            {
                let mut out = std::io::stdout().lock();
                // Home, then clear: the view is drawn over the last one.
                write!(out, "\x1b[H\x1b[2J")
                    .and_then(|()| {
                        writeln!(out, "{what}, every {}s · Ctrl-C ends\n", EVERY.as_secs())
                    })
                    .context("writing to stdout")?;
            }
            draw()?;
            tokio::select! {
                _ = &mut ctrl_c => return Ok(ExitCode::SUCCESS),
                () = tokio::time::sleep(EVERY) => {}
            }
        }
    })
}
