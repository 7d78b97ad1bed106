//! Whole lines of a file or stdin, read on a thread of their own; with `follow`, a
//! file is read on as it grows (a run's records, a service's log), a line cut short
//! waiting for its end.

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How often a followed file is looked at again once its end is reached.
const POLL: Duration = Duration::from_millis(200);
/// Lines read ahead of the watcher: bounded, so a fast file cannot outgrow memory.
const AHEAD: usize = 4_096;

pub struct Line {
    /// 1-based.
    pub number: u64,
    pub text: String,
}

pub struct Lines {
    rx: mpsc::Receiver<Line>,
    truncated: Arc<AtomicBool>,
    stop: CancellationToken,
}

impl Lines {
    /// `path` none or `-`: stdin.
    pub fn open(path: Option<&Path>, follow: bool, stop: CancellationToken) -> Result<Lines> {
        let reader: Box<dyn BufRead + Send> = match path.filter(|p| *p != Path::new("-")) {
            Some(path) => Box::new(std::io::BufReader::new(
                std::fs::File::open(path)
                    .with_context(|| format!("cannot read {}", path.display()))?,
            )),
            None => Box::new(std::io::BufReader::new(std::io::stdin())),
        };
        let (tx, rx) = mpsc::channel(AHEAD);
        let truncated = Arc::new(AtomicBool::new(false));
        let (flag, until) = (truncated.clone(), stop.clone());
        // A thread of its own, not the runtime's blocking pool: a read of stdin cannot
        // be interrupted, and must not keep the process from exiting.
        std::thread::spawn(move || read(reader, follow, &until, &tx, &flag));
        Ok(Lines {
            rx,
            truncated,
            stop,
        })
    }

    /// The next whole line; none at the end (or once stopped, when following).
    pub async fn next(&mut self) -> Option<Line> {
        tokio::select! {
            line = self.rx.recv() => line,
            _ = self.stop.cancelled() => None,
        }
    }

    /// The file ended in a line without its newline (left out).
    pub fn truncated_last_line(&self) -> bool {
        self.truncated.load(Ordering::Relaxed)
    }
}

fn read(
    mut reader: Box<dyn BufRead + Send>,
    follow: bool,
    stop: &CancellationToken,
    tx: &mpsc::Sender<Line>,
    truncated: &AtomicBool,
) {
    let mut text = String::new();
    let mut number = 0;
    loop {
        match reader.read_line(&mut text) {
            Ok(0) if follow && !stop.is_cancelled() => std::thread::sleep(POLL),
            Ok(0) | Err(_) => {
                truncated.store(!text.trim().is_empty(), Ordering::Relaxed);
                return;
            }
            // A line without its end is still being written: read on.
            Ok(_) if !text.ends_with('\n') => {}
            Ok(_) => {
                number += 1;
                if !text.trim().is_empty() {
                    let line = Line {
                        number,
                        text: std::mem::take(&mut text),
                    };
                    if tx.blocking_send(line).is_err() {
                        return;
                    }
                }
                text.clear();
            }
        }
    }
}
