//! The pacer: releases an open stage's arrivals at their intended instants, from an OS
//! thread of its own.
//!
//! tokio's timer wheel has millisecond granularity, so an async sleep until an instant
//! wakes up to a millisecond late, plus whatever the runtime's workers are busy with;
//! at thousands of requests per second that is most of the send lag. A dedicated thread
//! sleeping on the kernel's high-resolution timer wakes within tens of microseconds and
//! hands each arrival to the runtime through a channel, where the waiting task is
//! woken at once. When the runtime falls behind, arrivals wait in the channel and the
//! delay shows as send lag, as it should.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Arrivals released ahead of the runtime taking them: enough to ride out a busy
/// moment, small enough that a stop is prompt.
const QUEUE: usize = 1024;
/// The longest single sleep, so that a stop is noticed even before a far arrival.
const SLICE: Duration = Duration::from_millis(10);

/// An arrival: its index in the stage's whole schedule (a segmented run releases only
/// its own share) and its offset from the stage's start.
pub type Arrival = (u64, Duration);

/// A running pacer; dropping it stops the thread.
pub struct Pacer {
    arrivals: mpsc::Receiver<Arrival>,
    stop: Arc<AtomicBool>,
}

impl Pacer {
    /// Releases each arrival of `schedule` when its offset (from `start`) comes.
    pub fn start(
        start: Instant,
        schedule: impl Iterator<Item = Arrival> + Send + 'static,
    ) -> std::io::Result<Pacer> {
        let (sender, arrivals) = mpsc::channel(QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("redline-pacer".into())
            .spawn(move || {
                for (index, offset) in schedule {
                    let due = start + offset;
                    loop {
                        if stopped.load(Ordering::Relaxed) {
                            return;
                        }
                        let now = Instant::now();
                        if now >= due {
                            break;
                        }
                        std::thread::sleep((due - now).min(SLICE));
                    }
                    if sender.blocking_send((index, offset)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Pacer { arrivals, stop })
    }

    /// The next arrival, once it is due; `None` after the last.
    pub async fn next(&mut self) -> Option<Arrival> {
        self.arrivals.recv().await
    }

    /// As [`Pacer::next`], or `None` as soon as `stop` fires.
    pub async fn next_unless(&mut self, stop: &CancellationToken) -> Option<Arrival> {
        tokio::select! {
            next = self.next() => next,
            _ = stop.cancelled() => None,
        }
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        // The thread sees this within a slice, or at once when it next sends.
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn releases_every_offset_in_order_and_never_early() {
        let start = Instant::now();
        let offsets: Vec<Arrival> = (0..50)
            .map(|i| (i, Duration::from_micros(i * 700)))
            .collect();
        let mut pacer = Pacer::start(start, offsets.clone().into_iter()).unwrap();
        let mut seen = Vec::new();
        while let Some(arrival) = pacer.next().await {
            assert!(start.elapsed() >= arrival.1, "released early");
            seen.push(arrival);
        }
        assert_eq!(seen, offsets);
    }
}
