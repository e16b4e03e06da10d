//! A job's log as the page shows it: one element a line, numbered, its
//! text escaped, the colours its program asked for (ANSI SGR: the eight
//! colours, their bright forms, bold) kept as classes, every other escape
//! sequence dropped; a line ended by CR LF is one line, and a carriage
//! return inside a line (a progress bar) keeps what was written after it,
//! as a terminal shows it.

use super::html::esc;

/// The colour and weight in force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Pen {
    fg: Option<u8>,
    bold: bool,
}

impl Pen {
    fn open(self) -> String {
        let mut classes = Vec::new();
        if let Some(c) = self.fg {
            classes.push(format!("c{c}"));
        }
        if self.bold {
            classes.push("b".to_owned());
        }
        if classes.is_empty() {
            String::new()
        } else {
            format!("<span class=\"{}\">", classes.join(" "))
        }
    }

    fn plain(self) -> bool {
        self == Pen::default()
    }

    /// The pen after an SGR sequence's parameters.
    fn apply(mut self, params: &str) -> Pen {
        let codes: Vec<u16> = if params.is_empty() {
            vec![0]
        } else {
            params.split(';').map(|p| p.parse().unwrap_or(0)).collect()
        };
        let mut i = 0;
        while i < codes.len() {
            match codes[i] {
                0 => self = Pen::default(),
                1 => self.bold = true,
                22 => self.bold = false,
                c @ 30..=37 => self.fg = Some((c - 30) as u8),
                c @ 90..=97 => self.fg = Some((c - 90 + 8) as u8),
                39 => self.fg = None,
                // 256-colour and true-colour forms: their arguments skipped.
                38 | 48 => i += if codes.get(i + 1) == Some(&5) { 2 } else { 4 },
                _ => {}
            }
            i += 1;
        }
        self
    }
}

/// The lines of `text` as HTML, numbered from `first`; the number of the
/// line after them.
pub fn lines(text: &str, first: u64) -> (String, u64) {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut n = first;
    let mut pen = Pen::default();
    let body = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        return (out, n);
    }
    for raw in body.split('\n') {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        // What a terminal shows of a line rewritten with CR: its last pass.
        let shown = raw.rsplit('\r').next().unwrap_or(raw);
        out.push_str(&format!("<span class=\"l\" data-n=\"{n}\">"));
        out.push_str(&pen.open());
        pen = line(shown, pen, &mut out);
        if !pen.plain() {
            out.push_str("</span>");
        }
        // Block elements each: no newline between them (inside a `pre`
        // it would show as an empty line).
        out.push_str("</span>");
        n += 1;
    }
    (out, n)
}

/// The last line of `text` with anything in it, as a terminal shows it,
/// escape sequences gone (HTML-escaped, in a `span` per colour; no line
/// element).
pub fn last_line(text: &str) -> String {
    let Some(last) = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .map(|l| l.rsplit('\r').next().unwrap_or(l))
        .rfind(|l| !l.trim().is_empty())
    else {
        return String::new();
    };
    let mut out = String::new();
    if !line(last, Pen::default(), &mut out).plain() {
        out.push_str("</span>");
    }
    out
}

/// One line's text into `out`, starting with `pen`; the pen at its end.
fn line(text: &str, mut pen: Pen, out: &mut String) -> Pen {
    let mut rest = text;
    while let Some(at) = rest.find('\u{1b}') {
        out.push_str(&esc(&rest[..at]));
        let seq = &rest[at + 1..];
        let Some(csi) = seq.strip_prefix('[') else {
            // A lone ESC, or another kind of sequence: its next char dropped.
            rest = seq
                .get(seq.chars().next().map_or(0, char::len_utf8)..)
                .unwrap_or("");
            continue;
        };
        let end = csi
            .char_indices()
            .find(|(_, c)| ('\u{40}'..='\u{7e}').contains(c));
        let Some((end, kind)) = end else {
            rest = "";
            break;
        };
        if kind == 'm' {
            let next = pen.apply(&csi[..end]);
            if next != pen {
                if !pen.plain() {
                    out.push_str("</span>");
                }
                out.push_str(&next.open());
                pen = next;
            }
        }
        rest = &csi[end + 1..];
    }
    out.push_str(&esc(rest));
    pen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_become_classes_and_other_escapes_go() {
        let (html, next) = lines("\u{1b}[31mred\u{1b}[0m plain\n\u{1b}[2Kcleared\n", 1);
        assert_eq!(
            html,
            "<span class=\"l\" data-n=\"1\"><span class=\"c1\">red</span> plain</span>\
             <span class=\"l\" data-n=\"2\">cleared</span>"
        );
        assert_eq!(next, 3);
        let (bold, _) = lines("\u{1b}[1;92mok", 7);
        assert_eq!(
            bold,
            "<span class=\"l\" data-n=\"7\"><span class=\"c10 b\">ok</span></span>"
        );
    }

    #[test]
    fn the_last_line_is_the_last_with_text() {
        assert_eq!(
            last_line("one\n\u{1b}[32mtwo\u{1b}[0m\r\n\n  \n"),
            "<span class=\"c2\">two</span>"
        );
        assert_eq!(last_line("a\rb<"), "b&lt;");
        assert_eq!(last_line(""), "");
    }

    #[test]
    fn crlf_is_one_line_and_a_rewritten_line_shows_its_last_pass() {
        let (html, next) = lines("a\r\nb\r\n10%\r50%\r100%\n", 1);
        assert_eq!(
            html,
            "<span class=\"l\" data-n=\"1\">a</span><span class=\"l\" data-n=\"2\">b</span>\
             <span class=\"l\" data-n=\"3\">100%</span>"
        );
        assert_eq!(next, 4);
    }

    #[test]
    fn markup_in_a_line_is_text_and_a_cut_sequence_ends_harmlessly() {
        let (html, _) = lines("<b>&</b>\u{1b}[3", 1);
        assert_eq!(
            html,
            "<span class=\"l\" data-n=\"1\">&lt;b&gt;&amp;&lt;/b&gt;</span>"
        );
        let (colour, _) = lines("\u{1b}[38;5;196mx\u{1b}[m", 1);
        assert_eq!(colour, "<span class=\"l\" data-n=\"1\">x</span>");
    }
}
