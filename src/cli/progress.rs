//! The progress bar a person sees while a long job runs: drawn on stderr, only on a
//! terminal, never with `--quiet`, in plain text under `NO_COLOR`, and cleared before
//! the report is printed. It reads counters and owns nothing of the job, so it can be
//! stopped at any moment.

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::runner::{Progress, ProgressSnapshot};
use crate::schedule::Unit;

/// A short bar, then the figures, most important first: a narrow terminal cuts the
/// line from its end.
const RUN_TEMPLATE: &str = "{prefix} [{bar:16.cyan/blue}] {wide_msg}";
const COUNT_TEMPLATE: &str = "{prefix} [{bar:16.cyan/blue}] {pos}/{len}  {wide_msg}";
const BYTES_TEMPLATE: &str = "{prefix} [{bar:16.cyan/blue}] {bytes}/{total_bytes}  {wide_msg}";
/// How often the bar is redrawn.
const TICK: Duration = Duration::from_millis(200);
/// The window the achieved rate is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(5);

/// Whether to draw: on a terminal, unless told to be quiet.
pub(super) fn wanted(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// A bar being drawn by a task of its own.
pub(super) struct Drawer {
    bar: ProgressBar,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Drawer {
    fn start(bar: ProgressBar, mut redraw: impl FnMut(&ProgressBar) + Send + 'static) -> Drawer {
        super::output::set_bar(Some(bar.clone()));
        let stop = CancellationToken::new();
        let (stopped, drawn) = (stop.clone(), bar.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            loop {
                tokio::select! {
                    _ = tick.tick() => redraw(&drawn),
                    _ = stopped.cancelled() => break,
                }
            }
        });
        Drawer { bar, stop, task }
    }

    /// A bar over a load test's progress.
    pub(super) fn for_run(progress: Arc<Progress>, unit: Unit) -> Drawer {
        let bar = new_bar(RUN_TEMPLATE);
        let mut rate = WindowRate::default();
        Drawer::start(bar, move |bar| {
            let now = progress.snapshot();
            let achieved = rate.observe(Instant::now(), now.done);
            draw_run(bar, &now, achieved, unit);
        })
    }

    /// A bar over bytes read of a file of `total` bytes (`datagen`, `check`).
    pub(super) fn for_bytes(what: &'static str, read: Arc<AtomicU64>, total: u64) -> Drawer {
        Drawer::for_share(BYTES_TEMPLATE, what, read, total)
    }

    /// A bar over a count of things done (`replay`).
    pub(super) fn for_count(what: &'static str, done: Arc<AtomicU64>, total: u64) -> Drawer {
        Drawer::for_share(COUNT_TEMPLATE, what, done, total)
    }

    /// `done` of `total` in `template`, with the time taken and the time left.
    fn for_share(template: &str, what: &'static str, done: Arc<AtomicU64>, total: u64) -> Drawer {
        let bar = new_bar(template);
        bar.set_prefix(what);
        bar.set_length(total.max(1));
        let started = Instant::now();
        Drawer::start(bar, move |bar| {
            let done = done.load(Ordering::Relaxed);
            bar.set_position(done.min(total));
            let elapsed = started.elapsed().as_secs_f64();
            let eta = (done > 0 && total > done)
                .then(|| elapsed * (total - done) as f64 / done as f64)
                .map_or(String::new(), |s| format!("  ETA {}", clock(s)));
            bar.set_message(format!("{}{eta}", clock(elapsed)));
        })
    }

    /// Stops drawing and clears the bar, so the report below it is not garbled.
    pub(super) async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
        super::output::set_bar(None);
        self.bar.finish_and_clear();
    }
}

fn new_bar(template: &str) -> ProgressBar {
    // Five redraws a second at most, however many fields change at once.
    let bar = ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr_with_hz(5));
    // The templates are constants; a bad one is a bug caught by the tests below.
    let style = ProgressStyle::with_template(template)
        .expect("a valid progress template")
        .progress_chars("=> ");
    bar.set_style(style);
    bar
}

/// Ended requests per second over the last [`RATE_WINDOW`].
#[derive(Default)]
struct WindowRate {
    seen: VecDeque<(Instant, u64)>,
}

impl WindowRate {
    fn observe(&mut self, now: Instant, done: u64) -> Option<f64> {
        self.seen.push_back((now, done));
        while self
            .seen
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RATE_WINDOW)
        {
            self.seen.pop_front();
        }
        let (first_at, first_done) = *self.seen.front()?;
        let span = now.duration_since(first_at).as_secs_f64();
        (span >= 1.0).then(|| done.saturating_sub(first_done) as f64 / span)
    }
}

fn draw_run(bar: &ProgressBar, now: &ProgressSnapshot, achieved: Option<f64>, unit: Unit) {
    let Some(stage) = &now.stage else {
        bar.set_prefix("starting");
        return;
    };
    bar.set_prefix(format!("stage {}", stage.index));
    let in_stage = stage.started.elapsed();
    // The bar fills with the stage's time when it is bounded in time, else with its
    // budget of requests.
    match (stage.planned, stage.budget) {
        (Some(planned), _) => {
            bar.set_length(planned.as_millis().max(1) as u64);
            bar.set_position(in_stage.as_millis().min(planned.as_millis()) as u64);
        }
        (None, Some(budget)) => {
            bar.set_length(budget.max(1));
            bar.set_position(now.stage_done().min(budget));
        }
        (None, None) => {}
    }
    let time = match stage.planned {
        Some(planned) => format!(
            "{}/{}",
            clock(in_stage.as_secs_f64()),
            clock(planned.as_secs_f64())
        ),
        None => clock(in_stage.as_secs_f64()),
    };
    let rate = match (achieved, stage.target_rate, unit) {
        (Some(a), Some(t), Unit::Requests) => format!("  {a:.1}/{t:.1} req/s"),
        (a, Some(t), _) => format!(
            "{}  target {t:.1} {}",
            a.map_or(String::new(), |a| format!("  {a:.1} req/s")),
            unit.per_second()
        ),
        (Some(a), None, _) => format!("  {a:.1} req/s"),
        (None, None, _) => String::new(),
    };
    let eta = now
        .planned
        .map(|p| p.saturating_sub(now.elapsed))
        .filter(|left| !left.is_zero())
        .map_or(String::new(), |left| {
            format!("  ETA {}", clock(left.as_secs_f64()))
        });
    bar.set_message(format!(
        "{time}  {}/{} done  {} failed  {} in flight{rate}{eta}",
        now.stage_done(),
        now.scheduled.saturating_sub(stage.done_before),
        now.stage_failed(),
        now.in_flight(),
    ));
}

/// `42s`, `3m05s`, `1h02m`: short enough for a status line.
fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..60 => format!("{:.1}s", seconds.max(0.0)),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_read_short() {
        assert_eq!(clock(4.26), "4.3s");
        assert_eq!(clock(185.0), "3m05s");
        assert_eq!(clock(3720.0), "1h02m");
    }

    #[test]
    fn the_templates_parse() {
        // new_bar panics on a bad template: build each once.
        let _ = new_bar(RUN_TEMPLATE);
        let _ = new_bar(BYTES_TEMPLATE);
    }

    #[test]
    fn the_rate_is_over_the_last_seconds() {
        let mut rate = WindowRate::default();
        let start = Instant::now();
        assert_eq!(rate.observe(start, 0), None, "no span yet");
        // 4 per second for 10 s, then 10 per second: the window sees only the latter.
        for second in 1..=10u64 {
            rate.observe(start + Duration::from_secs(second), second * 4);
        }
        let mut last = None;
        for second in 11..=20u64 {
            last = rate.observe(start + Duration::from_secs(second), 40 + (second - 10) * 10);
        }
        assert_eq!(last, Some(10.0));
    }
}
