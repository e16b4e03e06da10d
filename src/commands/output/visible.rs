//! What a job wrote, made safe for a terminal: a job's output may hold
//! escape sequences (set the window title, clear the screen, worse on some
//! terminals) that must not reach the operator's terminal as commands.
//! [`neutralise`] is the one place that replaces them; `show` and
//! `history show` print through it always (their `--json` is the raw
//! form), `logs` only when its stdout is a terminal (on a pipe the log is
//! copied byte for byte, as documented).

use std::borrow::Cow;
use std::io::Write;

/// `bytes` with every control character but `\n` and `\t` shown in caret
/// notation: C0 and DEL as `^@`…`^_` and `^?` (ESC is `^[`), the C1
/// controls (U+0080–U+009F, as UTF-8) as their 7-bit form (`^[[` for
/// CSI). Everything else, invalid UTF-8 included, is kept as it is.
pub fn neutralise(bytes: &[u8]) -> Cow<'_, [u8]> {
    let c1 =
        |i: usize| bytes[i] == 0xc2 && bytes.get(i + 1).is_some_and(|b| (0x80..0xa0).contains(b));
    if !(0..bytes.len()).any(|i| is_c0(bytes[i]) || c1(i)) {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len() + 16);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if is_c0(b) {
            out.extend_from_slice(&[b'^', b ^ 0x40]);
        } else if c1(i) {
            out.extend_from_slice(&[b'^', b'[', bytes[i + 1] - 0x40]);
            i += 1;
        } else {
            out.push(b);
        }
        i += 1;
    }
    Cow::Owned(out)
}

/// [`neutralise`] of text (the result stays valid UTF-8: only control
/// characters are replaced, by ASCII).
pub fn neutralise_str(text: &str) -> Cow<'_, str> {
    match neutralise(text.as_bytes()) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
    }
}

fn is_c0(b: u8) -> bool {
    (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f
}

/// A writer that [`neutralise`]s everything written through it.
pub struct Neutralising<W: Write>(pub W);

impl<W: Write> Write for Neutralising<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(&neutralise(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_sent() {
        let raw = "a\u{1b}]0;title\u{7}b\u{1b}[2J\r\u{7f}\u{9b}31m\n\tz";
        assert_eq!(neutralise_str(raw), "a^[]0;title^Gb^[[2J^M^?^[[31m\n\tz");
        assert!(matches!(
            neutralise_str("plain\n\ttext é"),
            Cow::Borrowed(_)
        ));
        assert_eq!(&*neutralise(b"\xff\x1b"), b"\xff^[");
    }
}
