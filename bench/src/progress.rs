//! Progress of a long benchmark step on stderr: a bar on a terminal; elsewhere (CI logs,
//! redirected runs), where a bar would print nothing or garbage, a plain line every tenth of
//! the way, with the time taken and an estimate of the time left (engine-bound runs differ by
//! an order of magnitude between machines, so a user should see early how long one will take).
//! Results never go here: they are the JSON on stdout.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// One step's progress (cheap to clone; clones share the count).
#[derive(Clone)]
pub struct Progress {
    bar: ProgressBar,
    label: String,
    len: u64,
    lines: bool,
}

impl Progress {
    /// `len` units of work called `label` (e.g. `"replay lru"`).
    pub fn new(len: u64, label: impl Into<String>) -> Self {
        let label = label.into();
        let lines = !std::io::stderr().is_terminal();
        let bar = if lines {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::new(len).with_message(label.clone());
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg:>24} [{bar:40}] {pos}/{len} {elapsed} ({per_sec}, ~{eta} left)",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        };
        bar.set_length(len);
        Self {
            bar,
            label,
            len,
            lines,
        }
    }

    /// The bar itself (for code that takes an `indicatif::ProgressBar`).
    pub fn bar(&self) -> &ProgressBar {
        &self.bar
    }

    pub fn inc(&self, n: u64) {
        let before = self.bar.position();
        self.bar.inc(n);
        let now = self.bar.position();
        let step = (self.len / 10).max(1);
        if self.lines && (now / step > before / step || now == self.len) {
            eprintln!(
                "{}: {now}/{} ({})",
                self.label,
                self.len,
                timing(self.bar.elapsed(), now, self.len)
            );
        }
    }

    /// Moves to `pos` (for work measured in time rather than items).
    pub fn set(&self, pos: u64) {
        let before = self.bar.position();
        if pos > before {
            self.inc(pos - before);
        }
    }

    /// A line of detail that does not tear the bar.
    pub fn line(&self, text: &str) {
        if self.lines {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// "1m 55s, ~17m 20s left": time taken for `done` of `len` units and the time the rest would
/// take at the same pace.
fn timing(elapsed: Duration, done: u64, len: u64) -> String {
    let taken = clock(elapsed.as_secs());
    if done == 0 || done >= len {
        return taken;
    }
    let left = elapsed.as_secs_f64() * (len - done) as f64 / done as f64;
    format!("{taken}, ~{} left", clock(left.round() as u64))
}

fn clock(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;
