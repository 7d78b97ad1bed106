//! What acts beside the load rather than on its records, as [`Attachment`]s: the
//! disruptions (replica restarts, hooks), the feedback controller that sets the mix's
//! rates, and the scraper of the server's Prometheus metrics.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::disrupt::{self, ReplicaSet};
use super::feedback::{self, LiveRates};
use super::sinks::{Attachment, Findings, Pending};
use crate::client::{HttpClient, RunClock};
use crate::prometheus::live::LiveMetrics;
use crate::prometheus::scrape::ServerMetrics;
use crate::results::{DisruptionStep, FeedbackReport};
use crate::scenario::feedback::GaugeSource;
use crate::scenario::{Disruption, Scenario, Workload};

/// A task an attachment started, and what stops it.
struct Started<T> {
    task: JoinHandle<T>,
    stop: CancellationToken,
}

impl<T: Send + 'static> Started<T> {
    fn spawn(stop: CancellationToken, task: impl Future<Output = T> + Send + 'static) -> Self {
        Started {
            task: tokio::spawn(task),
            stop,
        }
    }

    async fn stop(this: Option<Self>, what: &str) -> Result<Option<T>> {
        let Some(started) = this else {
            return Ok(None);
        };
        started.stop.cancel();
        let ended = started.task.await;
        Ok(Some(ended.with_context(|| format!("the {what} failed"))?))
    }
}

/// The spec's disruptions, run on their schedule until the schedule ends.
pub(super) struct Disruptions {
    plan: Vec<Disruption>,
    sets: BTreeMap<String, Arc<tokio::sync::Mutex<ReplicaSet>>>,
    clock: RunClock,
    until: Option<Duration>,
    stop: CancellationToken,
    started: Option<Started<Vec<DisruptionStep>>>,
}

impl Disruptions {
    pub(super) fn new(
        plan: Vec<Disruption>,
        sets: BTreeMap<String, Arc<tokio::sync::Mutex<ReplicaSet>>>,
        clock: RunClock,
        until: Option<Duration>,
        stop: &CancellationToken,
    ) -> Disruptions {
        Disruptions {
            plan,
            sets,
            clock,
            until,
            stop: stop.child_token(),
            started: None,
        }
    }
}

impl Attachment for Disruptions {
    fn start(&mut self) -> Result<()> {
        let run = disrupt::run(
            std::mem::take(&mut self.plan),
            self.sets.clone(),
            self.clock,
            self.until,
            self.stop.clone(),
        );
        self.started = Some(Started::spawn(self.stop.clone(), run));
        Ok(())
    }

    /// The steps taken, for availability to put failures down to.
    fn stop<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        Box::pin(async move {
            let steps = Started::stop(self.started, "disruptions' task").await?;
            findings.steps = steps.unwrap_or_default();
            Ok(())
        })
    }
}

/// The feedback controller: reads the gauge and sets the mix's live rates.
pub(super) struct FeedbackControl {
    ready: Option<feedback::Controller>,
    started: Option<Started<FeedbackReport>>,
}

impl FeedbackControl {
    /// The controller, when the spec has `feedback`, writing `feedback.jsonl` at
    /// `log`; its gauge `embedded` reads the embedded simulator's, when the run
    /// started one.
    pub(super) fn of(
        scenario: &Scenario,
        rates: Option<&Arc<LiveRates>>,
        embedded_url: Option<String>,
        metrics: Option<Arc<LiveMetrics>>,
        clock: RunClock,
        log: PathBuf,
    ) -> Result<Option<FeedbackControl>> {
        let (Some(plan), Some(rates)) = (scenario.feedback.clone(), rates.cloned()) else {
            return Ok(None);
        };
        let source = match (&plan.gauge, embedded_url) {
            (GaugeSource::Embedded, Some(base)) => {
                GaugeSource::Url(format!("{base}/redline/nvidia-smi"))
            }
            (other, _) => other.clone(),
        };
        let services = match &scenario.workload {
            Workload::Mix(entries) => entries.iter().map(|e| e.service.clone()).collect(),
            _ => Vec::new(),
        };
        let file = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let controller = feedback::Controller {
            gauge: feedback::Gauge {
                source,
                reduce: plan.reduce,
                http: crate::client::http_client(&crate::client::Timeouts::default(), false),
            },
            plan,
            services,
            rates,
            metrics,
            clock,
            log: std::io::BufWriter::new(file),
        };
        Ok(Some(FeedbackControl {
            ready: Some(controller),
            started: None,
        }))
    }
}

impl Attachment for FeedbackControl {
    fn start(&mut self) -> Result<()> {
        let controller = self.ready.take().context("the controller started twice")?;
        let stop = CancellationToken::new();
        self.started = Some(Started::spawn(stop.clone(), controller.run(stop)));
        Ok(())
    }

    fn stop<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        Box::pin(async move {
            findings.feedback = Started::stop(self.started, "feedback controller").await?;
            Ok(())
        })
    }
}

/// Scrapes the server's Prometheus metrics through the run, when the spec asks.
pub(super) struct Scraper {
    url: hyper::Uri,
    interval: Duration,
    http: HttpClient,
    clock: RunClock,
    started: Option<Started<ServerMetrics>>,
}

impl Scraper {
    /// The scraper, when the spec has `scrape`: its URL, else `/metrics` on the target.
    pub(super) fn of(
        scenario: &Scenario,
        http: &HttpClient,
        base_url: &str,
        clock: RunClock,
    ) -> Result<Option<Scraper>> {
        let Some(plan) = &scenario.scrape else {
            return Ok(None);
        };
        let url = match &plan.url {
            Some(url) => url.clone(),
            None => format!("{base_url}/metrics")
                .parse()
                .context("building the metrics URL")?,
        };
        Ok(Some(Scraper {
            url,
            interval: plan.interval,
            http: http.clone(),
            clock,
            started: None,
        }))
    }
}

impl Attachment for Scraper {
    fn start(&mut self) -> Result<()> {
        let stop = CancellationToken::new();
        let scrape = crate::prometheus::scrape::scrape(
            self.http.clone(),
            self.url.clone(),
            self.interval,
            self.clock,
            stop.clone(),
        );
        self.started = Some(Started::spawn(stop, scrape));
        Ok(())
    }

    fn stop<'a>(self: Box<Self>, findings: &'a mut Findings) -> Pending<'a, Result<()>> {
        Box::pin(async move {
            findings.server_metrics = Started::stop(self.started, "metrics scraper").await?;
            Ok(())
        })
    }
}
