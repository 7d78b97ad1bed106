//! What a run has done so far, for whoever draws its progress: counters the runner
//! bumps as requests are scheduled and end, and the stage it is in. It holds no part of
//! the run itself, so a reader that lingers (a progress bar being torn down) can never
//! keep the run from ending.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The stage being run.
#[derive(Debug, Clone, PartialEq)]
pub struct StageStatus {
    /// Index as run (a sweep runs as several stages).
    pub index: u32,
    /// When it started.
    pub started: Instant,
    /// How long it schedules, when bounded in time.
    pub planned: Option<Duration>,
    /// Its request (or session) budget, when it has one.
    pub budget: Option<u64>,
    /// The open-loop rate it offers, in `unit` per second.
    pub target_rate: Option<f64>,
    /// Requests ended (and failed) before it started, to count its own.
    pub done_before: u64,
    pub failed_before: u64,
}

/// The run's counters; shared between the runner and a progress display.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    scheduled: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    /// The schedule's planned length, when every stage is bounded in time.
    planned: Mutex<Option<Duration>>,
    stage: Mutex<Option<StageStatus>>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            started: Instant::now(),
            scheduled: AtomicU64::new(0),
            done: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            planned: Mutex::new(None),
            stage: Mutex::new(None),
        }
    }
}

/// A consistent reading of the counters.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressSnapshot {
    pub elapsed: Duration,
    pub planned: Option<Duration>,
    pub scheduled: u64,
    pub done: u64,
    pub failed: u64,
    pub stage: Option<StageStatus>,
}

impl ProgressSnapshot {
    pub fn in_flight(&self) -> u64 {
        self.scheduled.saturating_sub(self.done)
    }

    /// Requests ended since the stage began.
    pub fn stage_done(&self) -> u64 {
        self.stage
            .as_ref()
            .map_or(self.done, |s| self.done.saturating_sub(s.done_before))
    }

    pub fn stage_failed(&self) -> u64 {
        self.stage
            .as_ref()
            .map_or(self.failed, |s| self.failed.saturating_sub(s.failed_before))
    }
}

impl Progress {
    pub(super) fn scheduled(&self) {
        self.scheduled.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn ended(&self, ok: bool) {
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        // Release: a reader that sees the count also sees the failure before it.
        self.done.fetch_add(1, Ordering::Release);
    }

    pub(super) fn plan(&self, planned: Option<Duration>) {
        *self
            .planned
            .lock()
            .expect("never poisoned: no code panics holding it") = planned;
    }

    pub(super) fn enter_stage(
        &self,
        index: u32,
        planned: Option<Duration>,
        budget: Option<u64>,
        target_rate: Option<f64>,
    ) {
        let status = StageStatus {
            index,
            started: Instant::now(),
            planned,
            budget,
            target_rate,
            done_before: self.done.load(Ordering::Acquire),
            failed_before: self.failed.load(Ordering::Relaxed),
        };
        *self
            .stage
            .lock()
            .expect("never poisoned: no code panics holding it") = Some(status);
    }

    /// Requests scheduled and requests that have their record: equal once a run ends.
    pub fn balance(&self) -> (u64, u64) {
        (
            self.scheduled.load(Ordering::Relaxed),
            self.done.load(Ordering::Acquire),
        )
    }

    pub fn snapshot(&self) -> ProgressSnapshot {
        let done = self.done.load(Ordering::Acquire);
        ProgressSnapshot {
            elapsed: self.started.elapsed(),
            planned: *self.planned.lock().expect("never poisoned"),
            // Read after `done`, so in flight is never negative.
            scheduled: self.scheduled.load(Ordering::Relaxed).max(done),
            done,
            failed: self.failed.load(Ordering::Relaxed),
            stage: self.stage.lock().expect("never poisoned").clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_counts_its_own_requests() {
        let progress = Progress::default();
        for ok in [true, false, true] {
            progress.scheduled();
            progress.ended(ok);
        }
        progress.enter_stage(1, None, Some(10), None);
        progress.scheduled();
        progress.scheduled();
        progress.ended(false);
        let now = progress.snapshot();
        assert_eq!((now.scheduled, now.done, now.failed), (5, 4, 2));
        assert_eq!(
            (now.stage_done(), now.stage_failed(), now.in_flight()),
            (1, 1, 1)
        );
        assert_eq!(progress.balance(), (5, 4));
    }
}
