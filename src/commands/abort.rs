//! `jobwarden abort <job>…`: write each job's ABORT marker, the same
//! contract any tool may use. A job that already ended is reported, not
//! marked.

use std::process::ExitCode;

use crate::abort;
use crate::cli::{AbortArgs, GlobalArgs};
use crate::job::JobRecord;

pub fn run(global: &GlobalArgs, args: &AbortArgs) -> anyhow::Result<ExitCode> {
    let (_, layout) = super::load(global)?;
    let ledger = super::open_ledger(&layout)?;
    let mut code = 0;
    for arg in &args.jobs {
        let id = super::resolve_job(&layout, ledger.as_ref(), arg)?;
        let rec = match JobRecord::load_job(&layout, &id) {
            Ok(rec) => rec,
            Err(_) if !layout.run_dir(&id).exists() => {
                eprintln!("jobwarden: no job {id} under {}", layout.runs().display());
                code = code.max(super::EXIT_NO);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if rec.state.is_terminal() {
            println!("{id}: already ended ({})", rec.state);
            code = code.max(super::EXIT_NO);
            continue;
        }
        abort::write_marker(&layout, &id, args.reason.as_deref())?;
        println!("{id}: abort requested ({})", rec.state);
    }
    Ok(ExitCode::from(code))
}
