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

/// What the pacer's thread reads and sleeps on: the OS clock in a run. A test gives
/// one of its own, on which every release is exact (tokio's paused clock cannot
/// reach a thread outside the runtime).
pub trait PaceClock: Send + 'static {
    fn now(&self) -> Instant;
    fn sleep(&self, duration: Duration);
}

/// The OS clock, and the kernel's high-resolution sleep.
pub struct OsClock;

impl PaceClock for OsClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

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
        Pacer::start_on(OsClock, start, schedule)
    }

    /// As [`Pacer::start`], on `clock`.
    pub fn start_on(
        clock: impl PaceClock,
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
                        let now = clock.now();
                        if now >= due {
                            break;
                        }
                        clock.sleep((due - now).min(SLICE));
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

    /// A clock that moves only when the pacer sleeps, noting each sleep; each sleep
    /// also takes `real` of the OS's time.
    #[derive(Clone)]
    struct Virtual {
        now: Arc<std::sync::Mutex<Instant>>,
        sleeps: Arc<std::sync::Mutex<Vec<Duration>>>,
        real: Duration,
    }

    impl Virtual {
        fn at(start: Instant, real: Duration) -> Virtual {
            Virtual {
                now: Arc::new(std::sync::Mutex::new(start)),
                sleeps: Arc::default(),
                real,
            }
        }
    }

    impl PaceClock for Virtual {
        fn now(&self) -> Instant {
            *self.now.lock().unwrap()
        }

        fn sleep(&self, duration: Duration) {
            *self.now.lock().unwrap() += duration;
            self.sleeps.lock().unwrap().push(duration);
            std::thread::sleep(self.real);
        }
    }

    #[tokio::test]
    async fn each_arrival_is_released_at_its_instant_exactly_in_slices_of_at_most_10ms() {
        let start = Instant::now();
        let clock = Virtual::at(start, Duration::ZERO);
        // Arrivals 0, 3 ms, 3 ms again, 25 ms and 1 s after the start.
        let offsets: Vec<Arrival> = [0, 3, 3, 25, 1000]
            .into_iter()
            .enumerate()
            .map(|(i, ms)| (i as u64, Duration::from_millis(ms)))
            .collect();
        let mut pacer = Pacer::start_on(clock.clone(), start, offsets.clone().into_iter()).unwrap();
        let mut released = Vec::new();
        while let Some(arrival) = pacer.next().await {
            released.push(arrival);
        }
        assert_eq!(released, offsets);
        let ms = |n| Duration::from_millis(n);
        let sleeps = clock.sleeps.lock().unwrap().clone();
        let mut expected = vec![ms(3), ms(10), ms(10), ms(2)];
        expected.extend(std::iter::repeat_n(ms(10), 97).chain([ms(5)]));
        assert_eq!(
            sleeps, expected,
            "no sleep past a due arrival, none over a slice"
        );
        assert_eq!(
            clock.now(),
            start + ms(1000),
            "the last released at its instant"
        );
    }

    #[test]
    fn dropping_the_pacer_stops_its_thread_within_a_slice() {
        // An arrival an hour away: 360,000 slices, each a real millisecond, were the
        // stop not heard (six minutes).
        let start = Instant::now();
        let clock = Virtual::at(start, Duration::from_millis(1));
        let far = std::iter::once((0, Duration::from_secs(3600)));
        let pacer = Pacer::start_on(clock.clone(), start, far).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(pacer);
        // The thread holds the clock until it returns.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&clock.now) > 1 {
            assert!(Instant::now() < deadline, "the pacer's thread did not stop");
            std::thread::sleep(Duration::from_millis(1));
        }
        let sleeps = clock.sleeps.lock().unwrap();
        assert!(sleeps.len() < 10_000, "{} slices", sleeps.len());
        assert!(sleeps.iter().all(|s| *s == SLICE));
    }
}
