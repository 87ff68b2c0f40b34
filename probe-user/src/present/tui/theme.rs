//! Styles, with and without colour. `NO_COLOR` (no-color.org) keeps every colour off and
//! leaves only bold, dim and reverse, which carry the same information. A terminal that
//! may not show UTF-8 (`TERM=dumb`, the C or POSIX locale) gets ASCII lines and marks.

use ratatui::buffer::Buffer;
use ratatui::style::{Color, Modifier, Style};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Theme {
    pub color: bool,
    /// Everything drawn in ASCII ([`to_ascii`]).
    pub ascii: bool,
}

impl Default for Theme {
    fn default() -> Self {
        Self {
            color: true,
            ascii: false,
        }
    }
}

impl Theme {
    #[cfg(test)]
    pub(crate) const NO_COLOR: Self = Self {
        color: false,
        ascii: false,
    };

    /// Colour unless `NO_COLOR` is set to a non-empty value; ASCII unless the terminal
    /// and locale can show UTF-8. Read once at startup, never while drawing.
    pub(crate) fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        // The locale's character set, as setlocale(LC_CTYPE, "") would pick it.
        let ctype = var("LC_ALL")
            .or_else(|| var("LC_CTYPE"))
            .or_else(|| var("LANG"));
        Self {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
            ascii: !shows_utf8(var("TERM").as_deref(), ctype.as_deref()),
        }
    }

    fn fg(self, color: Color) -> Style {
        if self.color {
            Style::new().fg(color)
        } else {
            Style::new()
        }
    }

    /// A colour for canvas lines, which take a colour rather than a style.
    pub(crate) fn line_color(self, color: Color) -> Color {
        if self.color { color } else { Color::Reset }
    }

    pub(crate) fn status_bar(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    pub(crate) fn paused(self) -> Style {
        self.fg(Color::Yellow).add_modifier(Modifier::BOLD)
    }

    pub(crate) fn header(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    /// The column the table is sorted by.
    pub(crate) fn sorted_header(self) -> Style {
        self.fg(Color::Cyan)
            .add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
    }

    pub(crate) fn selected_row(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    /// A detached probe's row.
    pub(crate) fn detached(self) -> Style {
        self.fg(Color::DarkGray).add_modifier(Modifier::DIM)
    }

    /// Drops: data lost.
    pub(crate) fn warning(self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    pub(crate) fn dim(self) -> Style {
        Style::new().add_modifier(Modifier::DIM)
    }

    pub(crate) fn key(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    pub(crate) fn title(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    pub(crate) fn distribution(self) -> Color {
        self.line_color(Color::Cyan)
    }

    pub(crate) fn rate(self) -> Color {
        self.line_color(Color::Green)
    }

    pub(crate) fn latency(self) -> Color {
        self.line_color(Color::Yellow)
    }
}

/// Redraws `buffer` in ASCII, for a terminal that may not show UTF-8: box drawing as
/// `+-|`, the sort arrows as `v` `^`, the plots' braille dots as `.`, separators and
/// ellipses as `-` and `~`, anything else outside ASCII (a name's) as `?`. One pass over
/// what was drawn, so no widget needs to know.
pub(super) fn to_ascii(buffer: &mut Buffer) {
    for cell in &mut buffer.content {
        let symbol = cell.symbol();
        if symbol.is_ascii() {
            continue;
        }
        let ascii = match symbol.chars().next().unwrap_or(' ') {
            '─' | '━' | '╌' | '┄' => "-",
            '│' | '┃' | '╎' | '┆' => "|",
            '\u{2500}'..='\u{257f}' => "+",
            '▼' => "v",
            '▲' => "^",
            '\u{2801}'..='\u{28ff}' => ".",
            '\u{2800}' => " ",
            '·' => "-",
            '…' => "~",
            '█' => "#",
            _ => "?",
        };
        cell.set_symbol(ascii);
    }
}

/// Whether a terminal of type `term` in the locale `ctype` (LC_ALL, LC_CTYPE or LANG)
/// shows UTF-8: not a dumb terminal, and a locale that names UTF-8 (no locale is C).
fn shows_utf8(term: Option<&str>, ctype: Option<&str>) -> bool {
    let utf8 = ctype.is_some_and(|c| {
        let c = c.to_ascii_lowercase();
        c.contains("utf-8") || c.contains("utf8")
    });
    term != Some("dumb") && utf8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_redraws_lines_marks_and_dots() {
        let mut buffer = Buffer::with_lines(["┌ a·b ─┐", "│P▼ ⣿… │", "└──────┘"]);
        to_ascii(&mut buffer);
        assert_eq!(
            buffer,
            Buffer::with_lines(["+ a-b -+", "|Pv .~ |", "+------+"])
        );
    }

    #[test]
    fn ascii_for_a_dumb_terminal_or_the_c_locale() {
        assert!(shows_utf8(Some("xterm-256color"), Some("C.UTF-8")));
        assert!(shows_utf8(Some("screen"), Some("en_US.utf8")));
        assert!(!shows_utf8(Some("dumb"), Some("C.UTF-8")));
        assert!(!shows_utf8(Some("xterm"), Some("C")));
        assert!(!shows_utf8(Some("xterm"), Some("POSIX")));
        assert!(!shows_utf8(Some("xterm"), None));
    }
}
