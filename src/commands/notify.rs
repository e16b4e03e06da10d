//! `jobwarden notify test NAME [--json]`: one `test` notice delivered by
//! the hook NAME, now, once (no retries), and how it went: exit 0 when
//! delivered, 4 (`failed`) when not, with the reason; 1 when no hook has
//! that name.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::exit::Exit;
use super::output::print_json;
use crate::cli::{GlobalArgs, NotifyCommand, NotifyTestArgs};
use jobwarden_engine::hooks::{self, Notice};

pub fn run(global: &GlobalArgs, cmd: &NotifyCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        NotifyCommand::Test(args) => test(global, args),
    }
}

#[derive(Serialize)]
struct Tested<'a> {
    hook: &'a str,
    delivered: bool,
    error: Option<String>,
    elapsed_ms: u64,
}

fn test(global: &GlobalArgs, args: &NotifyTestArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    let Some(hook) = config.notify.iter().find(|h| h.name == args.name) else {
        let names: Vec<&str> = config.notify.iter().map(|h| h.name.as_str()).collect();
        let known = if names.is_empty() {
            format!("the config ({}) has no [[notify]] hook", config.source)
        } else {
            format!("its hooks: {}", names.join(", "))
        };
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: no [[notify]] hook named {:?}; {known}",
            args.name
        ));
        return Ok(Exit::No.into());
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let notice = Notice::test(&layout);
    let start = std::time::Instant::now();
    let result = runtime.block_on(hooks::deliver_once(hook, &notice, &hooks::client()));
    let tested = Tested {
        hook: &hook.name,
        delivered: result.is_ok(),
        error: result.err(),
        elapsed_ms: start.elapsed().as_millis() as u64,
    };
    if args.json {
        print_json(&tested)?;
    } else if tested.delivered {
        writeln!(
            std::io::stdout().lock(),
            "delivered a test notice by {} in {} ms",
            hook.name,
            tested.elapsed_ms
        )
        .context("writing to stdout")?;
    }
    if let Some(e) = &tested.error {
        jobwarden_sys::logging::line(format_args!("jobwarden: notify {}: {e}", hook.name));
        return Ok(Exit::Failed.into());
    }
    Ok(ExitCode::SUCCESS)
}
