//! Writing to the terminal: reports to stdout, notes to stderr. A closed pipe
//! (`redline run … | head -2`) ends the writing, never the command: the run still
//! writes its files and exits with its own code. While a progress bar is drawn, notes
//! are printed above it rather than through it.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// The progress bar being drawn, if any: notes are printed around it.
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Writes `text` to stdout as it is, above the progress bar when one is drawn.
pub fn out(text: &str) {
    around_bar(|| write_to(&mut std::io::stdout().lock(), text, &STDOUT_CLOSED));
}

/// Writes `text` to stderr, above the progress bar when one is drawn.
pub fn err(text: &str) {
    around_bar(|| write_to(&mut std::io::stderr().lock(), text, &STDERR_CLOSED));
}

/// Runs `write` with the bar (if any) lifted off the terminal.
fn around_bar(write: impl FnOnce()) {
    let bar = BAR.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match bar.as_ref() {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

pub(super) fn set_bar(bar: Option<indicatif::ProgressBar>) {
    *BAR.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = bar;
}

fn write_to(stream: &mut impl Write, text: &str, closed: &AtomicBool) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    // Any failure to print (a closed pipe, a full disk behind a redirect) stops the
    // printing: the run's files and exit code are what a script relies on.
    if stream
        .write_all(text.as_bytes())
        .and_then(|()| stream.flush())
        .is_err()
    {
        closed.store(true, Ordering::Relaxed);
    }
}

/// `println!` to stdout that survives a closed pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::output::out(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that survives a closed pipe and a progress bar.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::output::err(&format!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, outln};

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose reader has gone, as `| head` leaves stdout.
    struct ClosedPipe(u32);

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            self.0 += 1;
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_stops_the_writing_without_a_panic() {
        let closed = AtomicBool::new(false);
        let mut pipe = ClosedPipe(0);
        write_to(&mut pipe, "redline · …\n", &closed);
        write_to(&mut pipe, "  requests: …\n", &closed);
        assert!(closed.load(Ordering::Relaxed));
        assert_eq!(pipe.0, 1, "nothing is tried after the pipe closed");
    }
}
