//! `jobwarden man [--out-dir DIR]`: manual pages in roff, generated from the
//! command-line definitions (`clap_mangen`): `jobwarden.1` on stdout, or
//! that and one page per command (`jobwarden-submit.1`,
//! `jobwarden-history-list.1`, ...) written into a folder.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

use crate::cli::{Cli, ManArgs};

pub fn run(args: &ManArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    match &args.out_dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .context("rendering the manual page")?;
            let mut out = std::io::stdout().lock();
            out.write_all(&page).context("writing to stdout")?;
            out.flush().context("writing to stdout")?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            write_pages(cmd, dir)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The page of `cmd` and of each of its visible subcommands, depth first;
/// prints each file's path.
fn write_pages(cmd: clap::Command, dir: &Path) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir)?;
    }
    let page = clap_mangen::Man::new(cmd);
    let path = page
        .generate_to(dir)
        .with_context(|| format!("writing a manual page into {}", dir.display()))?;
    super::output::print_line(path.display())
}
