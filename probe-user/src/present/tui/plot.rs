//! A line plot with axis labels at their exact positions (ratatui's Chart spaces
//! labels evenly, which a log-scale percentile axis cannot use).

use ratatui::{
    Frame,
    layout::Rect,
    style::{Color, Style},
    symbols::Marker,
    text::Line,
    widgets::{
        Block, Borders, Paragraph,
        canvas::{Canvas, Line as CanvasLine, Points},
    },
};

/// One line of a plot.
pub(super) struct Series<'a> {
    pub points: &'a [(f64, f64)],
    pub color: Color,
}

pub(super) struct Plot<'a> {
    pub x_bounds: [f64; 2],
    pub y_bounds: [f64; 2],
    /// (position on the x axis, text), left to right.
    pub x_labels: Vec<(f64, String)>,
    /// (position on the y axis, text), bottom to top.
    pub y_labels: Vec<(f64, String)>,
    pub series: Vec<Series<'a>>,
    pub label_style: Style,
}

/// Where a value falls among `cells` cells spanning `bounds`.
fn cell_of(value: f64, bounds: [f64; 2], cells: u16) -> u16 {
    let span = bounds[1] - bounds[0];
    if cells == 0 || span.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return 0;
    }
    let fraction = ((value - bounds[0]) / span).clamp(0.0, 1.0);
    (fraction * f64::from(cells - 1)).round() as u16
}

impl Plot<'_> {
    pub(super) fn render(&self, frame: &mut Frame, area: Rect) {
        let label_width = self
            .y_labels
            .iter()
            .map(|(_, t)| t.chars().count() as u16)
            .max()
            .unwrap_or(0);
        // Too small for labels, axes and at least a few dots.
        if area.height < 3 || area.width < label_width + 4 {
            return;
        }
        // The axes: a left and a bottom border around the canvas; x labels below.
        let axes = Rect::new(
            area.x + label_width,
            area.y,
            area.width - label_width,
            area.height - 1,
        );
        let axes_block = Block::new()
            .borders(Borders::LEFT | Borders::BOTTOM)
            .border_style(self.label_style);
        let canvas_area = axes_block.inner(axes);
        frame.render_widget(axes_block, axes);
        if canvas_area.width == 0 || canvas_area.height == 0 {
            return;
        }

        let series = &self.series;
        let canvas = Canvas::default()
            .x_bounds(self.x_bounds)
            .y_bounds(self.y_bounds)
            .marker(Marker::Braille)
            .paint(move |ctx| {
                for s in series {
                    if let [(x, y)] = s.points {
                        ctx.draw(&Points {
                            coords: &[(*x, *y)],
                            color: s.color,
                        });
                    }
                    for pair in s.points.windows(2) {
                        ctx.draw(&CanvasLine {
                            x1: pair[0].0,
                            y1: pair[0].1,
                            x2: pair[1].0,
                            y2: pair[1].1,
                            color: s.color,
                        });
                    }
                }
            });
        frame.render_widget(canvas, canvas_area);

        // y labels, right-aligned left of the axis; one per row, lowest first.
        let mut last_row = None;
        for (value, text) in &self.y_labels {
            let row = canvas_area.bottom() - 1 - cell_of(*value, self.y_bounds, canvas_area.height);
            if last_row == Some(row) {
                continue;
            }
            last_row = Some(row);
            let rect = Rect::new(area.x, row, label_width, 1);
            frame.render_widget(
                Paragraph::new(Line::from(text.as_str()).right_aligned()).style(self.label_style),
                rect,
            );
        }

        // x labels centred under their position, never overlapping or leaving the area.
        let row = area.bottom() - 1;
        let mut free_from = area.x;
        for (value, text) in &self.x_labels {
            let width = text.chars().count() as u16;
            let at = canvas_area.x + cell_of(*value, self.x_bounds, canvas_area.width);
            let start = at
                .saturating_sub(width / 2)
                .min(area.right().saturating_sub(width))
                .max(area.x);
            if start < free_from || start + width > area.right() {
                continue;
            }
            free_from = start + width + 1;
            frame.render_widget(
                Paragraph::new(text.as_str()).style(self.label_style),
                Rect::new(start, row, width, 1),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_span_the_bounds() {
        assert_eq!(cell_of(0.0, [0.0, 5.0], 11), 0);
        assert_eq!(cell_of(5.0, [0.0, 5.0], 11), 10);
        assert_eq!(cell_of(2.5, [0.0, 5.0], 11), 5);
        assert_eq!(cell_of(9.0, [0.0, 5.0], 11), 10, "clamped");
        assert_eq!(cell_of(1.0, [1.0, 1.0], 11), 0, "empty span");
    }
}
