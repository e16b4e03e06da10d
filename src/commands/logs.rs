//! `jobwarden logs <job> [--tail N] [-f]`: a job's `job.log`, byte for byte
//! (output may hold invalid UTF-8, which is copied through untouched) on a
//! pipe or a file; on a terminal, its control characters are shown, not
//! obeyed (`output/visible.rs`).
//!
//! `--tail N` reads backwards from the end in blocks, so a large log costs
//! only what is printed. `-f` follows the file as it grows: it watches the
//! run folder (inotify through `notify`) and re-checks every 250 ms in case
//! an event is missed, or polls every 100 ms when no watch can be had
//! (inotify instances are a scarce per-user resource): see `watch.rs`. It
//! ends by itself once `job.json` is terminal, after a last read: the
//! monitor writes all output before it writes the terminal record. The
//! final state goes to stderr so that stdout stays the log alone, and the
//! exit code is the job's outcome's (`exit.rs`: 0 only if it succeeded).

use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use super::No;
use super::exit::Exit;
use super::output::{Neutralising, final_state};
use super::watch::{POLL, Watch};
use crate::cli::{GlobalArgs, LogsArgs};
use jobwarden_engine::lookup::Target;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;

/// How often a watched follow re-checks without an event.
const WATCHED_RECHECK: Duration = Duration::from_millis(250);
/// Block size of the backwards read of `--tail`.
const TAIL_BLOCK: u64 = 64 * 1024;

pub fn run(global: &GlobalArgs, args: &LogsArgs) -> anyhow::Result<ExitCode> {
    logs(global, args)
}

fn logs(global: &GlobalArgs, args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_existing(global)?;
    let id = {
        let ledger = super::open_ledger(&layout)?;
        match super::resolve_target(&layout, ledger.as_ref(), &args.job)? {
            Target::Job(id) => id,
            Target::Waiting { prompt, .. } => {
                let ledger = ledger.as_ref();
                return Err(super::waiting::not_started(
                    &layout, &config, ledger, &prompt, "logs",
                ));
            }
        }
    };
    if !layout.run_dir(&id).is_dir() {
        let runs = layout.runs();
        return Err(No(format!(
            "job {id} has no run folder under {} (pruned by retention?)",
            runs.display()
        ))
        .into());
    }
    let path = layout.job_log(&id);
    let mut out = terminal_safe(std::io::stdout().lock());
    let mut log = match open_log(layout.root(), &path) {
        // Not a regular file: nothing to print. `-f` still follows the
        // job to its end; without it the refusal is the answer.
        Err(e) if args.follow && fsio::is_refusal(&e) => {
            jobwarden_sys::logging::line(format_args!("warning: {e}"));
            None
        }
        other => other?,
    };
    let mut pos = 0;
    if let Some(file) = log.as_mut() {
        let start = match args.tail {
            Some(n) => tail_start(file, n, &path)?,
            None => 0,
        };
        pos = copy_new(file, start, &mut out, &path)?;
    }
    if args.follow {
        return follow(&layout, &id, log, pos, &mut out);
    }
    if log.is_none() || pos == 0 {
        say_empty(&layout, &id, log.is_none());
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the log goes: on a terminal, through [`Neutralising`] (a job's
/// escape sequences are shown, never obeyed); on a pipe or a file, the
/// bytes as they are (the documented contract).
fn terminal_safe(out: std::io::StdoutLock<'static>) -> Box<dyn Write> {
    use std::io::IsTerminal;
    if out.is_terminal() {
        Box::new(Neutralising(out))
    } else {
        Box::new(out)
    }
}

/// Say on stderr why nothing was printed: a job that has not ended has
/// no output *yet* (`-f` waits for it); one that ended printed nothing.
fn say_empty(layout: &Layout, id: &JobId, no_file: bool) {
    match JobRecord::load_job(layout, id) {
        Ok(rec) if rec.state.is_terminal() && rec.started_at.is_none() => {
            jobwarden_sys::logging::line(format_args!("job {id} never ran ({})", final_state(&rec)))
        }
        Ok(rec) if rec.state.is_terminal() => {
            jobwarden_sys::logging::line(format_args!("job {id} printed nothing ({})", rec.state))
        }
        Ok(rec) => jobwarden_sys::logging::line(format_args!(
            "job {id} has no output yet ({}); -f waits for it",
            rec.state
        )),
        Err(_) if no_file => {
            jobwarden_sys::logging::line(format_args!("job {id} has no log and no readable record"))
        }
        Err(_) => {}
    }
}

/// Open `job.log` for reading, safely (never through a symlink, never
/// waiting on a FIFO: those are refused); `None` if it does not exist yet
/// (a queued job).
fn open_log(root: &Path, path: &Path) -> Result<Option<File>, IoError> {
    match fsio::open_file(root, path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Where the last `n` lines of `file` start. A final newline ends the last
/// line; it does not start an empty one.
fn tail_start(file: &mut File, n: u32, path: &Path) -> anyhow::Result<u64> {
    let read_err = || format!("reading {}", path.display());
    let len = file.metadata().with_context(read_err)?.len();
    let mut wanted = u64::from(n);
    if wanted == 0 {
        return Ok(len);
    }
    let mut end = len;
    let mut block = Vec::new();
    while end > 0 {
        let start = end.saturating_sub(TAIL_BLOCK);
        block.resize((end - start) as usize, 0);
        file.seek(SeekFrom::Start(start)).with_context(read_err)?;
        file.read_exact(&mut block).with_context(read_err)?;
        for (i, &byte) in block.iter().enumerate().rev() {
            let at = start + i as u64;
            if byte == b'\n' && at + 1 != len {
                wanted -= 1;
                if wanted == 0 {
                    return Ok(at + 1);
                }
            }
        }
        end = start;
    }
    Ok(0)
}

/// Copy `file` from `pos` to its current end onto `out`; the new position.
/// A file shorter than `pos` was replaced: it is printed from its start.
fn copy_new(file: &mut File, pos: u64, out: &mut impl Write, path: &Path) -> anyhow::Result<u64> {
    let len = file
        .metadata()
        .with_context(|| format!("inspecting {}", path.display()))?
        .len();
    let pos = if len < pos {
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: {} shrank; printing it again",
            path.display()
        ));
        0
    } else {
        pos
    };
    file.seek(SeekFrom::Start(pos))
        .with_context(|| format!("reading {}", path.display()))?;
    let copied = std::io::copy(&mut (&mut *file).take(len - pos), out)
        .with_context(|| format!("copying {} to stdout", path.display()))?;
    out.flush().context("writing to stdout")?;
    Ok(pos + copied)
}

/// `-f`: print what the job writes until its record is terminal, then its
/// final state on stderr; exit with its outcome's code.
fn follow(
    layout: &Layout,
    id: &JobId,
    mut log: Option<File>,
    mut pos: u64,
    out: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    let path = layout.job_log(id);
    let mut wake = Watch::new(WATCHED_RECHECK, POLL);
    wake.add(&layout.run_dir(id), false);
    let mut refused = false;
    let mut reopen = |log: &mut Option<File>| {
        if log.is_none() && !refused {
            match open_log(layout.root(), &path) {
                Ok(opened) => *log = opened,
                Err(e) => {
                    // Said once; the job is still followed to its end.
                    jobwarden_sys::logging::line(format_args!("warning: {e}"));
                    refused = true;
                }
            }
        }
    };
    loop {
        let rec = JobRecord::load_job(layout, id)?;
        reopen(&mut log);
        if let Some(file) = log.as_mut() {
            pos = copy_new(file, pos, out, &path)?;
        }
        if rec.state.is_terminal() {
            // Read before the record above was loaded, the log may have
            // grown since; now that the job has ended it grows no more.
            reopen(&mut log);
            if let Some(file) = log.as_mut() {
                copy_new(file, pos, out, &path)?;
            }
            jobwarden_sys::logging::line(format_args!("job {id} {}", final_state(&rec)));
            return Ok(Exit::of_state(rec.state).unwrap_or(Exit::Error).into());
        }
        wake.wait(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail_of(content: &[u8], n: u32) -> Vec<u8> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.log");
        jobwarden_sys::fsio::write_atomic(dir.path(), &path, content).expect("write");
        let mut f = File::open(&path).expect("open");
        let start = tail_start(&mut f, n, &path).expect("tail");
        content[start as usize..].to_vec()
    }

    #[test]
    fn tail_counts_lines_from_the_end() {
        assert_eq!(tail_of(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail_of(b"a\nb\nc", 2), b"b\nc", "an unterminated last line");
        assert_eq!(tail_of(b"a\nb\n", 5), b"a\nb\n", "fewer lines than asked");
        assert_eq!(tail_of(b"", 1), b"");
        assert_eq!(tail_of(b"\n\n", 1), b"\n", "an empty last line");
    }

    #[test]
    fn tail_reads_across_blocks_and_keeps_bytes() {
        let mut content = vec![0xffu8; (TAIL_BLOCK as usize) * 2 + 7];
        content.extend_from_slice(b"\nlast \xfe line\n");
        assert_eq!(tail_of(&content, 1), b"last \xfe line\n");
        let two = tail_of(&content, 2);
        assert_eq!(two.len(), content.len(), "the first line spans blocks");
    }
}
