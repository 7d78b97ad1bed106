//! The run's streaming SLOs: the recorder feeds each record to the monitor, which
//! closes windows as time passes (every 200 ms); each episode that opens, escalates or closes goes to
//! `drift.jsonl` and to whoever prints it, and an opening takes the spec's actions —
//! stop the run, or call a webhook (in a task of its own, so a slow or failing hook
//! never holds up the records).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{Every, Findings, Pending, RecordSink, SoFar};
use crate::client::{self, HttpClient, RunClock, Timeouts};
use crate::prometheus::live::{LiveMetrics, WindowGauges};
use crate::record::Record;
use crate::slo::Aborted;
use crate::slo::streaming::{
    Action, Change, DriftSummary, Episode, Monitor, Severity, StreamingPlan, Webhook,
};

/// Told of every change, to print it.
pub type OnDrift = Box<dyn Fn(&Change) + Send + Sync>;

/// How often windows are closed and the gauges set.
const TICK_EVERY: Duration = Duration::from_millis(200);

/// How long the end of a run waits for webhook calls still under way.
const WEBHOOK_DRAIN: Duration = Duration::from_secs(5);

/// The monitor and what it acts on.
pub(in crate::runner) struct Drift {
    monitor: Monitor,
    every: Every,
    clock: RunClock,
    log: std::io::BufWriter<std::fs::File>,
    on_change: Option<OnDrift>,
    stop: CancellationToken,
    http: HttpClient,
    hooks: JoinSet<()>,
    calls: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    /// The run's `/metrics`, when served: each series' latest window as gauges.
    live: Option<Arc<LiveMetrics>>,
    /// The first episode that stopped the run (`on_violation: [abort]`).
    aborted: Option<Aborted>,
}

/// One line of `drift.jsonl`.
#[derive(serde::Serialize)]
struct Line<'a> {
    event: &'static str,
    episode: &'a Episode,
}

impl Drift {
    /// Writes `drift.jsonl` at `path`.
    pub(in crate::runner) fn start(
        plan: StreamingPlan,
        path: &Path,
        clock: RunClock,
        on_change: Option<OnDrift>,
        live: Option<Arc<LiveMetrics>>,
        stop: CancellationToken,
    ) -> Result<Drift> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Drift {
            monitor: Monitor::new(plan),
            every: Every::new(TICK_EVERY),
            clock,
            log: std::io::BufWriter::new(file),
            on_change,
            stop,
            http: client::http_client(&Timeouts::default(), false),
            hooks: JoinSet::new(),
            calls: Arc::default(),
            failures: Arc::default(),
            live,
            aborted: None,
        })
    }

    /// Closes the windows that have ended by now and acts on what changed.
    fn close_windows(&mut self) -> Result<()> {
        let changes = self.monitor.advance(self.clock.timer_now_us());
        for change in &changes {
            self.act(change)?;
        }
        // A handful of gauges: set at every tick, whether or not a window closed.
        if let Some(live) = &self.live {
            for (track, point, severity) in self.monitor.latest() {
                let state = match severity {
                    None => 0,
                    Some(Severity::Warn) => 1,
                    Some(Severity::Critical) => 2,
                };
                let gauges = WindowGauges {
                    value: point.value,
                    threshold: point.threshold,
                    state,
                };
                live.set_window(&track.series, &track.group, track.unit.as_str(), gauges);
            }
        }
        Ok(())
    }

    /// Closes the windows that ended within the run, waits a bounded time for the
    /// webhook calls, and sums up.
    async fn summarize(mut self, end_us: u64) -> Result<(DriftSummary, Option<Aborted>)> {
        let (mut summary, changes) = self.monitor.finish(end_us);
        for change in &changes {
            self.act(change)?;
        }
        self.log.flush()?;
        let drained = tokio::time::timeout(WEBHOOK_DRAIN, async {
            while self.hooks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            // Calls still under way count as failed: the run does not wait longer.
            self.failures
                .fetch_add(self.hooks.len() as u64, Ordering::Relaxed);
            self.hooks.abort_all();
        }
        summary.webhook_calls = self.calls.load(Ordering::Relaxed);
        summary.webhook_failures = self.failures.load(Ordering::Relaxed);
        Ok((summary, self.aborted))
    }

    fn act(&mut self, change: &Change) -> Result<()> {
        let (event, episode) = match change {
            Change::Opened(e) => ("opened", e),
            Change::Escalated(e) => ("escalated", e),
            Change::Closed(e) => ("closed", e),
        };
        serde_json::to_writer(&mut self.log, &Line { event, episode })?;
        self.log.write_all(b"\n")?;
        self.log.flush()?;
        if let Some(print) = &self.on_change {
            print(change);
        }
        let Change::Opened(episode) = change else {
            return Ok(());
        };
        for action in self.monitor.plan().actions.clone() {
            match action {
                Action::Abort if self.aborted.is_none() => {
                    self.aborted = Some(Aborted {
                        at_s: episode.opened_s,
                        breaches: Vec::new(),
                        episode: Some(episode.clone()),
                    });
                    self.stop.cancel();
                }
                Action::Abort => {}
                Action::Webhook(hook) => {
                    let body = body_of(&hook, episode)?;
                    let (http, calls, failures) =
                        (self.http.clone(), self.calls.clone(), self.failures.clone());
                    self.hooks.spawn(async move {
                        calls.fetch_add(1, Ordering::Relaxed);
                        if !call(&http, &hook, body).await {
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            }
        }
        Ok(())
    }
}

impl RecordSink for Drift {
    fn observe(&mut self, record: &Record) -> Result<()> {
        self.monitor.observe(record);
        Ok(())
    }

    fn next_tick(&self) -> Option<tokio::time::Instant> {
        Some(self.every.due())
    }

    fn tick<'a>(&'a mut self, _so_far: SoFar<'a>) -> Pending<'a, Result<()>> {
        self.every.taken();
        let closed = self.close_windows();
        Box::pin(async { closed })
    }

    /// The windows that ended within the schedule closed; an episode that stopped
    /// the run counts only if nothing stopped it before.
    fn finish<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        Box::pin(async move {
            let end_us = findings.elapsed.as_micros() as u64;
            let (summary, aborted) = self.summarize(end_us).await?;
            findings.drift = Some(summary);
            if findings.aborted.is_none() {
                findings.aborted = aborted;
            }
            Ok(())
        })
    }
}

/// The webhook's body: its template with the episode, else the episode as JSON.
fn body_of(hook: &Webhook, episode: &Episode) -> Result<Bytes> {
    let json = serde_json::to_string(episode)?;
    let Some(template) = &hook.body else {
        return Ok(Bytes::from(json));
    };
    let env = minijinja::Environment::new();
    let context = minijinja::context! { episode => minijinja::Value::from_serialize(episode) };
    let rendered = env
        .render_str(template, context)
        .context("rendering the webhook's body")?;
    Ok(Bytes::from(rendered))
}

/// One episode's call: the first try and up to `retries` more, 250 ms apart and
/// doubling, each bounded by the hook's timeout. True when a try got a 2xx.
async fn call(http: &HttpClient, hook: &Webhook, body: Bytes) -> bool {
    let mut pause = Duration::from_millis(250);
    for attempt in 0..=hook.retries {
        if attempt > 0 {
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
        let request = hyper::Request::builder()
            .method(hook.method.clone())
            .uri(hook.url.clone())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body.clone()))
            .expect("the URL and method were validated with the spec");
        let sent = tokio::time::timeout(hook.timeout, client::send(http, request)).await;
        if let Ok(Ok(response)) = sent
            && response.status().is_success()
        {
            return true;
        }
    }
    false
}
