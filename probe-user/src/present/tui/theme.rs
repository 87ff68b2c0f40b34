//! Styles, with and without colour. `NO_COLOR` (no-color.org) keeps every colour off and
//! leaves only bold, dim and reverse, which carry the same information.

use ratatui::style::{Color, Modifier, Style};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Default for Theme {
    fn default() -> Self {
        Self { color: true }
    }
}

impl Theme {
    pub const NO_COLOR: Self = Self { color: false };

    /// Colour unless `NO_COLOR` is set to a non-empty value. Read once at startup, never
    /// while drawing.
    pub fn from_env() -> Self {
        Self {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
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
    pub fn line_color(self, color: Color) -> Color {
        if self.color { color } else { Color::Reset }
    }

    pub fn status_bar(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    pub fn paused(self) -> Style {
        self.fg(Color::Yellow).add_modifier(Modifier::BOLD)
    }

    pub fn header(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    /// The column the table is sorted by.
    pub fn sorted_header(self) -> Style {
        self.fg(Color::Cyan)
            .add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
    }

    pub fn selected_row(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    /// A detached probe's row.
    pub fn detached(self) -> Style {
        self.fg(Color::DarkGray).add_modifier(Modifier::DIM)
    }

    /// Drops: data lost.
    pub fn warning(self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    pub fn dim(self) -> Style {
        Style::new().add_modifier(Modifier::DIM)
    }

    pub fn key(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    pub fn title(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    pub fn distribution(self) -> Color {
        self.line_color(Color::Cyan)
    }

    pub fn rate(self) -> Color {
        self.line_color(Color::Green)
    }

    pub fn latency(self) -> Color {
        self.line_color(Color::Yellow)
    }
}
