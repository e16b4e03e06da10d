//! The one table renderer: columns sized by what they hold, measured in
//! terminal cells (a CJK character takes two, a combining accent none, via
//! `unicode-width`), cut with `…` where a column has a cap, and coloured
//! after padding, so that escape codes never shift a column.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Which side of its column a cell keeps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A column: its title (`None`: a table without a header line), its
/// alignment and the most cells it may take (wider text is cut).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub title: Option<&'static str>,
    pub align: Align,
    pub max: usize,
}

impl Column {
    /// A left-aligned column of at most `max` cells.
    pub const fn left(title: &'static str, max: usize) -> Self {
        Column {
            title: Some(title),
            align: Align::Left,
            max,
        }
    }

    /// A right-aligned column of at most `max` cells.
    pub const fn right(title: &'static str, max: usize) -> Self {
        Column {
            title: Some(title),
            align: Align::Right,
            max,
        }
    }

    /// The same column without a title.
    pub const fn untitled(self) -> Self {
        Column {
            title: None,
            ..self
        }
    }
}

/// One cell: its text, and the SGR colour code it is shown in when
/// colouring (see [`super::state_colour`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cell {
    pub text: String,
    pub colour: Option<&'static str>,
}

impl Cell {
    /// A cell coloured by the job state (or ledger outcome) it shows.
    pub fn state(state: &str) -> Self {
        Cell {
            text: state.to_owned(),
            colour: super::state_colour(state),
        }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Cell { text, colour: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Cell::from(text.to_owned())
    }
}

/// One line of a table: a row of cells, or a note printed as it is under
/// the row before it (not measured: it does not widen the columns).
#[derive(Debug, Clone)]
enum Line {
    Row(Vec<Cell>),
    Note(String),
}

/// Columns, and rows of cells (one per column), rendered as lines.
#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Line>,
    /// `(total, floor)`: the last column is cut to what the others leave
    /// of `total` cells, but to no fewer than `floor`.
    fit_to: Option<(usize, usize)>,
}

/// Cells between two columns.
const GAP: &str = "  ";

impl Table {
    pub fn new(columns: &[Column]) -> Self {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
            fit_to: None,
        }
    }

    /// Cut the last column so that a line takes at most `total` cells,
    /// leaving it at least `floor`.
    pub fn fit_to(mut self, total: usize, floor: usize) -> Self {
        self.fit_to = Some((total, floor));
        self
    }

    /// Add a row; missing cells are empty, extra ones are dropped.
    pub fn push(&mut self, row: Vec<Cell>) {
        self.rows.push(Line::Row(row));
    }

    /// Add a line printed as it is, under the last row.
    pub fn note(&mut self, text: String) {
        self.rows.push(Line::Note(text));
    }

    /// The header (when any column has a title) and the rows, as lines
    /// without trailing blanks; `colour` adds the cells' colours.
    pub fn lines(&self, colour: bool) -> Vec<String> {
        let widths = self.widths();
        let titled = self.columns.iter().any(|c| c.title.is_some());
        let header = titled.then(|| {
            let cells: Vec<Cell> = self
                .columns
                .iter()
                .map(|c| Cell::from(c.title.unwrap_or("")))
                .collect();
            self.line(&cells, &widths, false)
        });
        let body = self.rows.iter().map(|line| match line {
            Line::Row(cells) => self.line(cells, &widths, colour),
            Line::Note(text) => text.clone(),
        });
        header.into_iter().chain(body).collect()
    }

    /// Each column's width: its widest cell or title, within its cap.
    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, col)| {
                let title = col.title.map_or(0, UnicodeWidthStr::width);
                let cells = self.rows.iter().filter_map(|line| match line {
                    Line::Row(cells) => cells.get(i),
                    Line::Note(_) => None,
                });
                cells
                    .map(|c| width(&c.text))
                    .chain([title])
                    .max()
                    .unwrap_or(0)
                    .min(col.max)
            })
            .collect();
        if let (Some((total, floor)), Some((last, others))) = (self.fit_to, widths.split_last()) {
            let used: usize = others.iter().sum::<usize>() + GAP.len() * others.len();
            let room = total.saturating_sub(used).max(floor);
            let last = (*last).min(room);
            if let Some(w) = widths.last_mut() {
                *w = last;
            }
        }
        widths
    }

    fn line(&self, cells: &[Cell], widths: &[usize], colour: bool) -> String {
        let empty = Cell::default();
        let mut line = String::new();
        for (i, (col, &width)) in self.columns.iter().zip(widths).enumerate() {
            let cell = cells.get(i).unwrap_or(&empty);
            let last = i + 1 == widths.len();
            let text = fit(&cell.text, width);
            let text = if last && col.align == Align::Left {
                text
            } else {
                pad(&text, width, col.align)
            };
            if i > 0 {
                line.push_str(GAP);
            }
            match cell.colour.filter(|_| colour) {
                Some(code) => line.push_str(&format!("\x1b[{code}m{text}\x1b[0m")),
                None => line.push_str(&text),
            }
        }
        let trimmed = line.trim_end().len();
        line.truncate(trimmed);
        line
    }
}

/// How many terminal cells `text` takes.
pub fn width(text: &str) -> usize {
    text.width()
}

/// `text` cut to at most `width` terminal cells, marking a cut with `…`.
/// Zero-width characters (combining accents) stay with the character
/// before them.
pub fn fit(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let room = width - 1;
    let mut used = 0;
    let mut cut = String::new();
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        cut.push(c);
    }
    cut.push('…');
    cut
}

/// `text` padded with spaces to `width` terminal cells, on the side
/// `align` leaves free (text already as wide is returned as is).
pub fn pad(text: &str, width: usize, align: Align) -> String {
    let fill = " ".repeat(width.saturating_sub(text.width()));
    match align {
        Align::Left => format!("{text}{fill}"),
        Align::Right => format!("{fill}{text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut t = Table::new(&[
            Column::left("ID", 8),
            Column::left("PROMPT", 12),
            Column::right("N", 3),
            Column::left("STATE", 11),
        ]);
        for (prompt, state) in [
            ("plain", "succeeded"),
            ("修正ログイン", "failed"),
            ("cafe\u{301}-menu", "running"),
            ("🚀launch", "queued"),
        ] {
            t.push(vec![
                "abcd1234".into(),
                prompt.into(),
                "1".into(),
                Cell::state(state),
            ]);
        }
        t
    }

    /// Where the state column starts on each line, in terminal cells.
    fn state_columns(lines: &[String]) -> Vec<usize> {
        lines
            .iter()
            .map(|l| {
                let byte = l.rfind("  ").map_or(0, |i| i + 2);
                width(&l[..byte])
            })
            .collect()
    }

    #[test]
    fn wide_and_combining_characters_keep_columns_aligned() {
        let lines = table().lines(false);
        let starts = state_columns(&lines);
        assert!(starts.windows(2).all(|w| w[0] == w[1]), "{lines:#?}");
        assert!(lines[0].starts_with("ID        PROMPT"), "{lines:#?}");
    }

    #[test]
    fn colour_is_added_after_padding_and_never_without_asking() {
        let plain = table().lines(false);
        assert!(plain.iter().all(|l| !l.contains('\x1b')), "{plain:#?}");
        let coloured = table().lines(true);
        assert!(
            coloured[1].contains("\x1b[32msucceeded\x1b[0m"),
            "{coloured:#?}"
        );
        let stripped: Vec<String> = coloured
            .iter()
            .map(|l| {
                l.replace("\x1b[32m", "")
                    .replace("\x1b[31m", "")
                    .replace("\x1b[36m", "")
                    .replace("\x1b[0m", "")
            })
            .collect();
        assert_eq!(stripped, plain);
    }

    #[test]
    fn cuts_are_measured_in_cells() {
        assert_eq!(fit("修正ログイン", 7), "修正ロ…");
        assert_eq!(width(&fit("修正ログイン", 6)), 5);
        assert_eq!(fit("cafe\u{301}s", 5), "cafe\u{301}s");
        assert_eq!(fit("cafe\u{301}sss", 5), "cafe\u{301}…");
        assert_eq!(fit("abc", 0), "");
        assert_eq!(pad("修", 4, Align::Right), "  修");
    }

    #[test]
    fn the_last_column_fits_what_the_others_leave() {
        let mut t = Table::new(&[
            Column::left("A", 10).untitled(),
            Column::left("B", 100).untitled(),
        ])
        .fit_to(20, 5);
        t.push(vec!["0123456789".into(), "x".repeat(50).into()]);
        let lines = t.lines(false);
        assert_eq!(lines.len(), 1, "no header without titles");
        assert_eq!(width(&lines[0]), 20, "{lines:?}");
    }
}
