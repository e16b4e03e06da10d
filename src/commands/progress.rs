//! What the waiting commands (`wait`, `submit --wait`) say on stderr while
//! they wait. On a terminal: one live line with counts by state, redrawn in
//! place, and a line that stays for each job that ends. Otherwise (a pipe,
//! a file, a log collector): one line per change, `job <id> (<prompt>):
//! running → succeeded`, and nothing redrawn.
//!
//! The live line is drawn again only when what it shows changes: its text,
//! or (for `wait`, whose line carries a clock) the whole second the clock
//! shows. A wake-up that changes nothing (a log write, a heartbeat) leaves
//! the screen alone.

use std::fmt::Display;
use std::io::IsTerminal;
use std::time::Instant;

use jobwarden_model::job::{JobRecord, JobState};

use super::output::{final_state, fit, prompt_label};

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
    /// The live line last drawn (what is on screen while `shown`).
    drawn: String,
    /// The live line starts with the time spent waiting (`[12s]`).
    clock: bool,
    started: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// Live when stderr is a terminal that can redraw a line; the live
    /// line starts with the time spent waiting, which the caller keeps
    /// current by calling [`Progress::status`] about once a second.
    pub fn new() -> Self {
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        Progress {
            live: std::io::stderr().is_terminal() && !dumb,
            shown: false,
            drawn: String::new(),
            clock: true,
            started: Instant::now(),
        }
    }

    /// [`Progress::new`] without the clock: for a command that draws its
    /// line only when something happens (`submit --wait`), where a clock
    /// would stand still between events.
    pub fn without_clock() -> Self {
        let mut progress = Progress::new();
        progress.clock = false;
        progress
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

    /// Show `text` on the live line (a terminal only), after the time
    /// spent waiting when the line has a clock, cut to the terminal's
    /// width; nothing is drawn when the line on screen already says that.
    pub fn status(&mut self, text: &str) {
        let elapsed = self.started.elapsed().as_secs();
        if let Some(line) = self.frame(text, elapsed, width()) {
            jobwarden_sys::logging::partial(format_args!("{ERASE_LINE}{line}"));
        }
    }

    /// The live line to draw for `text` after `elapsed` seconds on a
    /// terminal `width` cells wide, or `None` when there is nothing to
    /// draw: no terminal, or that very line is on screen.
    fn frame(&mut self, text: &str, elapsed: u64, width: usize) -> Option<String> {
        if !self.live {
            return None;
        }
        let line = match self.clock {
            true => format!("[{}] {text}", fmt_clock(elapsed)),
            false => text.to_owned(),
        };
        let line = fit(&line, width.saturating_sub(1));
        if self.shown && line == self.drawn {
            return None;
        }
        self.shown = true;
        self.drawn.clone_from(&line);
        Some(line)
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

/// The live line's clock, in whole seconds: `42s`, `3m05s`, `2h07m`.
fn fmt_clock(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3_600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3_600, secs / 60 % 60),
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

    fn live(clock: bool) -> Progress {
        let mut p = Progress::new();
        p.live = true;
        p.clock = clock;
        p
    }

    #[test]
    fn the_live_line_is_drawn_again_only_when_what_it_shows_changes() {
        let mut p = live(false);
        assert_eq!(
            p.frame("job a: queued", 0, 80).as_deref(),
            Some("job a: queued")
        );
        // Woken by a log write or a heartbeat: the same state, nothing drawn.
        assert_eq!(p.frame("job a: queued", 3, 80), None);
        assert_eq!(
            p.frame("job a: running", 4, 80).as_deref(),
            Some("job a: running")
        );
        assert_eq!(p.frame("job a: running", 9, 80), None);
        // A line that stays took the live line's place: drawn anew.
        p.shown = false;
        assert_eq!(
            p.frame("job a: running", 9, 80).as_deref(),
            Some("job a: running")
        );
    }

    #[test]
    fn a_clocked_live_line_is_drawn_again_once_its_second_changes() {
        let mut p = live(true);
        assert_eq!(
            p.frame("1 running", 0, 80).as_deref(),
            Some("[0s] 1 running")
        );
        assert_eq!(p.frame("1 running", 0, 80), None);
        assert_eq!(
            p.frame("1 running", 1, 80).as_deref(),
            Some("[1s] 1 running")
        );
        assert_eq!(
            p.frame("1 running", 65, 80).as_deref(),
            Some("[1m05s] 1 running")
        );
    }

    #[test]
    fn off_a_terminal_nothing_is_drawn() {
        let mut p = Progress::new();
        p.live = false;
        assert_eq!(p.frame("1 running", 0, 80), None);
    }
}
