//! What the waiting commands (`wait`, `submit --wait`) say on stderr while
//! they wait. On a terminal: one live line with counts by state, redrawn in
//! place, and a line that stays for each job that ends. Otherwise (a pipe,
//! a file, a log collector): one line per change, `job <id> (<prompt>):
//! running → succeeded`, and nothing redrawn.

use std::fmt::Display;
use std::io::IsTerminal;
use std::time::Instant;

use jobwarden_model::job::{JobRecord, JobState};

use super::output::{final_state, fit, fmt_duration, prompt_label};

/// Erase the terminal's current line and return to its start.
const ERASE_LINE: &str = "\r\x1b[2K";

/// Width assumed when the terminal does not say.
const DEFAULT_WIDTH: usize = 80;

/// The progress reporter of one waiting command.
pub struct Progress {
    /// Stderr is a terminal: a live line is drawn.
    live: bool,
    /// A live line is on screen.
    shown: bool,
    started: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// Live when stderr is a terminal that can redraw a line.
    pub fn new() -> Self {
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        Progress {
            live: std::io::stderr().is_terminal() && !dumb,
            shown: false,
            started: Instant::now(),
        }
    }

    /// Is a live line drawn (stderr is a terminal)?
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// A line that stays (a change, an end, a warning). It takes the live
    /// line's place; the caller draws a new one ([`Progress::status`]).
    pub fn say(&mut self, text: impl Display) {
        if std::mem::take(&mut self.shown) {
            jobwarden_sys::logging::partial(format_args!("{ERASE_LINE}{text}\n"));
        } else {
            jobwarden_sys::logging::line(text);
        }
    }

    /// Job `rec` was seen in a new state (`from` is `None` the first time).
    /// Without a terminal every change is a line; on one, only ends are
    /// (the live line counts the rest).
    pub fn job_changed(&mut self, rec: &JobRecord, from: Option<JobState>) {
        let label = prompt_label(&rec.project, &rec.name);
        let to = if rec.state.is_terminal() {
            final_state(rec)
        } else {
            rec.state.to_string()
        };
        if self.live && !rec.state.is_terminal() {
            return;
        }
        match from {
            Some(from) if !self.live => {
                self.say(format_args!("job {} ({label}): {from} → {to}", rec.job_id))
            }
            _ => self.say(format_args!("job {} ({label}): {to}", rec.job_id)),
        }
    }

    /// Redraw the live line (a terminal only): `text` after the time spent
    /// waiting, cut to the terminal's width.
    pub fn status(&mut self, text: &str) {
        if !self.live {
            return;
        }
        let elapsed = fmt_duration(self.started.elapsed().as_millis() as u64);
        let line = fit(&format!("[{elapsed}] {text}"), width().saturating_sub(1));
        jobwarden_sys::logging::partial(format_args!("{ERASE_LINE}{line}"));
        self.shown = true;
    }

    /// Erase the live line (before the command's last words, or its exit).
    pub fn clear(&mut self) {
        if std::mem::take(&mut self.shown) {
            jobwarden_sys::logging::partial(ERASE_LINE);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `2 running · 1 queued` from `(count, what)` pairs, leaving out zeros;
/// `nothing` when all are.
pub fn counts_text<'a>(counts: impl IntoIterator<Item = (usize, &'a str)>) -> String {
    let parts: Vec<String> = counts
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join(" · ")
    }
}

/// The terminal's width in columns (stderr's), else `COLUMNS`, else 80.
fn width() -> usize {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we own; on
    // failure (not a terminal) it writes nothing and we fall back.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_col > 0 {
        return usize::from(size.ws_col);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c| c > 0)
        .unwrap_or(DEFAULT_WIDTH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_leave_out_zeros() {
        assert_eq!(
            counts_text([(2, "running"), (0, "queued"), (1, "failed")]),
            "2 running · 1 failed"
        );
        assert_eq!(counts_text([(0, "running")]), "nothing");
    }
}
