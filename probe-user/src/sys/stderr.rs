//! probetop's one writer of stderr. While the TUI has the terminal, lines written
//! there would garble the screen, so they are held, shown in the footer, and written
//! to stderr once the terminal is restored. A failed write is ignored: after SIGHUP the
//! terminal is gone, and `eprintln!` would panic (and abort) before the exports are
//! written.

use std::borrow::Cow;
use std::sync::{Mutex, PoisonError};

/// `s` on one line, with nothing a terminal acts on: every control character (ESC and
/// the OSC/CSI sequences it starts, BEL, CR, a newline, C1 controls) becomes a space.
/// Names come from binaries and comms, which anyone can craft; the TUI never draws
/// control characters, and the exports' line formats need their names on one line too.
pub(crate) fn one_line(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect(),
    )
}

/// `text` of several lines with nothing a terminal acts on: [`one_line`] for each of its
/// lines, the newlines between them kept.
pub(crate) fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.split('\n')
            .map(one_line)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

struct Held {
    /// Whether the TUI has the terminal.
    active: bool,
    lines: Vec<String>,
    /// How many of `lines` the TUI has taken for its footer.
    shown: usize,
}

static HELD: Mutex<Held> = Mutex::new(Held {
    active: false,
    lines: Vec::new(),
    shown: 0,
});

impl Held {
    /// Holds `line` if the TUI has the terminal; gives it back otherwise.
    fn offer(&mut self, line: &str) -> bool {
        if self.active {
            self.lines.push(line.to_string());
        }
        self.active
    }

    fn take_new(&mut self) -> Vec<String> {
        let new = self.lines[self.shown..].to_vec();
        self.shown = self.lines.len();
        new
    }

    fn release(&mut self) -> Vec<String> {
        self.active = false;
        self.shown = 0;
        std::mem::take(&mut self.lines)
    }
}

fn held() -> std::sync::MutexGuard<'static, Held> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `line` to stderr, or holds it while the TUI has the terminal. A failed write
/// is ignored: after SIGHUP the terminal is gone, and that must not stop a run.
pub(crate) fn say(line: &str) {
    let line = one_line(line);
    if held().offer(&line) {
        return;
    }
    write_raw(&format!("{line}\n"));
}

/// Writes `text`, whole lines, as [`say`] does each of them (a report of many lines in
/// one write).
pub(crate) fn say_text(text: &str) {
    let text = &*terminal_safe(text);
    let mut held = held();
    if held.active {
        for line in text.lines() {
            held.offer(line);
        }
        return;
    }
    drop(held);
    write_raw(text);
}

fn write_raw(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// From now on lines are held (the TUI took the terminal).
pub(crate) fn hold() {
    held().active = true;
}

/// Lines held since the last call, for the TUI's footer.
pub(crate) fn take_new() -> Vec<String> {
    held().take_new()
}

/// Stops holding and writes every line held (the terminal is restored).
pub(crate) fn release() {
    let lines = held().release();
    for line in lines {
        write_raw(&format!("{line}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_held_while_the_tui_runs_and_given_back() {
        // Not the process-wide one: other tests say things meanwhile.
        let mut held = Held {
            active: false,
            lines: Vec::new(),
            shown: 0,
        };
        assert!(!held.offer("probetop: before"));
        held.active = true;
        assert!(held.offer("probetop: one"));
        assert_eq!(held.take_new(), ["probetop: one"]);
        assert!(held.offer("probetop: two"));
        assert_eq!(held.take_new(), ["probetop: two"]);
        assert!(held.take_new().is_empty());
        assert_eq!(held.release(), ["probetop: one", "probetop: two"]);
        // Written, not held, once the TUI is gone.
        assert!(!held.offer("probetop: after"));
        assert!(held.release().is_empty());
    }
}
