//! A run in three phases. [`Run::prepare`] stands up the servers, joins the
//! coordinator, and starts the recorder with the run's sinks; [`Run::execute`] starts
//! the attachments and runs the stages; [`Run::finish`] stops the attachments, closes
//! the records, finishes every sink into the [`Findings`], and takes down what
//! `prepare` stood up.

use super::beside::{Disruptions, FeedbackControl, Scraper};
use super::sinks::{
    AbortGate, Attachment, AvailabilityTally, CoordinatorPush, Drift, Findings, JsonLines,
    RecordSink, Samples,
};
use super::*;
use crate::folder::RunFolder;

/// A run, prepared.
pub(super) struct Run {
    shared: Arc<Shared>,
    servers: Servers,
    observers: Observers,
    recorder: tokio::task::JoinHandle<Result<Recorded>>,
    attachments: Vec<Box<dyn Attachment>>,
    records_path: PathBuf,
    base_url: String,
    model: String,
}

/// How long a worker waits at the coordinator's barrier for the others to join (pods
/// of an Indexed Job may be scheduled minutes apart).
const JOIN_PATIENCE: Duration = Duration::from_secs(600);

/// What the sinks are made from, besides the scenario.
struct SinkParts {
    file: std::fs::File,
    live: Option<Arc<LiveMetrics>>,
    spans: Option<super::sinks::SpanSink>,
    on_drift: Option<OnDrift>,
    coordinator: Option<crate::coordinator::worker::Link>,
}

impl Run {
    /// Everything up to the first request: servers, the run ID, the recorder and its
    /// sinks, the header told to `on_start`.
    pub(super) async fn prepare(
        scenario: Scenario,
        options: RunOptions,
        stop: &CancellationToken,
    ) -> Result<Run> {
        let out_dir = options
            .records_path
            .parent()
            .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf);
        let servers = Servers::start(&scenario, &out_dir).await?;
        let run_id = match join(options.coordinator.clone(), options.run_id, stop).await {
            Ok(id) => id,
            Err(e) => {
                servers.stop_replicas().await;
                return Err(e);
            }
        };
        let base_url = servers.url_of(scenario.service());
        let model = servers.model_of(scenario.service());
        // W3C baggage on every request: which run and scenario sent it, so the
        // services' own spans and logs can be told apart by run.
        let baggage = baggage_of(run_id, &scenario.name);
        let target = build_target(&scenario, &servers, &baggage)?;
        let work = work_of(&scenario, &servers, baggage, &target).await?;
        let records_path = options.records_path.clone();
        let file = std::fs::File::create(&records_path)
            .with_context(|| format!("cannot create {}", records_path.display()))?;
        let clock = RunClock::new(Instant::now() + Duration::from_millis(20));
        let mut notes = servers.notes.clone();
        let observer_options = ObserverOptions {
            metrics_listener: options.metrics_listener,
            otlp_endpoint: options.otlp_endpoint,
            otlp_tls: options.otlp_tls,
            collect: options.collect,
        };
        let (observers, spans) =
            Observers::start(observer_options, &scenario, &model, clock, &mut notes)?;
        let parts = SinkParts {
            file,
            live: observers.live.clone(),
            spans,
            on_drift: options.on_drift,
            coordinator: options.coordinator,
        };
        let recorder = Recorder {
            faults: servers.fault_logs(),
            aggregator: scenario.aggregator(),
            sinks: sinks_of(&scenario, parts, &records_path, clock, stop)?,
        };
        let (records, inbox) = mpsc::unbounded_channel();
        let recorder = tokio::spawn(record(inbox, recorder));
        let shared = share(
            scenario,
            target,
            work,
            run_id,
            clock,
            records,
            options.progress,
        );
        shared.progress.plan(shared.planned_end);
        if let Some(on_start) = options.on_start {
            on_start(&header_of(&shared.scenario, &base_url, &model, notes));
        }
        let attachments = attachments_of(
            &shared,
            &servers,
            &observers,
            &base_url,
            &records_path,
            stop,
        )?;
        Ok(Run {
            shared,
            servers,
            observers,
            recorder,
            attachments,
            records_path,
            base_url,
            model,
        })
    }

    /// Starts the attachments and runs the stages; what ran, and the schedule's end.
    pub(super) async fn execute(
        &mut self,
        stop: &CancellationToken,
    ) -> (Result<Vec<ExecutedStage>>, Duration) {
        for attachment in &mut self.attachments {
            if let Err(e) = attachment.start() {
                return (Err(e), self.shared.clock.start().elapsed());
            }
        }
        let executed = run_stages(&self.shared, stop).await;
        (executed, self.shared.clock.start().elapsed())
    }

    /// Stops the attachments, closes the records, finishes the sinks, settles the
    /// token counts and takes the servers down.
    pub(super) async fn finish(
        self,
        executed: Result<Vec<ExecutedStage>>,
        elapsed: Duration,
        stop: &CancellationToken,
    ) -> Result<RunResult> {
        let mut findings = Findings {
            elapsed,
            ..Findings::default()
        };
        let stopped = stop_all(self.attachments, &mut findings).await;
        let executed = match stopped.and(executed) {
            Ok(executed) => executed,
            Err(e) => {
                self.servers.stop_replicas().await;
                return Err(e);
            }
        };
        let recorded = close_recorder(&self.shared, self.recorder).await?;
        let evidence = finish_sinks(recorded, &mut findings).await?;
        let aggregator = findings.aggregator.take().expect("the statistics finished");
        let (aggregator, token_settlement) = settle_tokens(
            &self.shared,
            evidence,
            aggregator,
            &self.records_path,
            &self.base_url,
            &self.model,
        )
        .await?;
        let (otlp, traces) = self.observers.finish(stop, &self.records_path).await?;
        let proxies = self.servers.proxy_counts();
        self.servers.stop_replicas().await;
        if !aggregator.counts.balanced() {
            anyhow::bail!(
                "internal error: outcomes do not add up to the scheduled requests: {:?}",
                aggregator.counts
            );
        }
        let mut warnings = self.shared.scenario.warnings();
        warnings.append(&mut findings.warnings);
        Ok(RunResult {
            aggregator,
            token_settlement,
            warnings,
            interrupted: stop.is_cancelled() && findings.aborted.is_none(),
            aborted: findings.aborted,
            server_metrics: findings.server_metrics,
            elapsed,
            target_url: self.base_url,
            model: self.model,
            stages: executed,
            proxies,
            otlp,
            traces,
            samples: findings.samples,
            drift: findings.drift,
            availability: findings.availability,
            feedback: findings.feedback,
        })
    }
}

/// The run's ID: the coordinator's, once every worker has joined (so they start
/// together), else the caller's or a new one.
async fn join(
    coordinator: Option<crate::coordinator::worker::Link>,
    run_id: Option<u64>,
    stop: &CancellationToken,
) -> Result<u64> {
    let Some(link) = coordinator else {
        return Ok(run_id.unwrap_or_else(new_run_id));
    };
    tokio::select! {
        joined = link.join(JOIN_PATIENCE) => joined.map_err(anyhow::Error::msg),
        () = stop.cancelled() => {
            anyhow::bail!("stopped while waiting for the other workers at the coordinator")
        }
    }
}

/// The run's sinks, in the order they hear each record and finish: the pusher's stop
/// counts before a streaming SLO's, as it did before the run had sinks.
fn sinks_of(
    scenario: &Scenario,
    parts: SinkParts,
    records_path: &std::path::Path,
    clock: RunClock,
    stop: &CancellationToken,
) -> Result<Vec<Box<dyn RecordSink>>> {
    let mut sinks: Vec<Box<dyn RecordSink>> = vec![Box::new(JsonLines::new(parts.file))];
    if let Some(live) = &parts.live {
        sinks.push(Box::new(live.clone()));
    }
    if let Some(spans) = parts.spans {
        sinks.push(Box::new(spans));
    }
    let pushing = parts.coordinator.is_some();
    if let Some(link) = parts.coordinator {
        let pusher = crate::coordinator::worker::Pusher::new(
            link,
            scenario.aggregator(),
            stop.clone(),
            clock,
        );
        sinks.push(Box::new(CoordinatorPush::new(pusher)));
    }
    if let Some(plan) = &scenario.streaming {
        let log = RunFolder::of_records(records_path).drift();
        let drift = Drift::start(
            plan.clone(),
            &log,
            clock,
            parts.on_drift,
            parts.live,
            stop.clone(),
        )?;
        sinks.push(Box::new(drift));
    }
    if !scenario.disruptions.is_empty() {
        sinks.push(Box::new(AvailabilityTally::default()));
    }
    sinks.push(Box::new(Samples::default()));
    // With a coordinator the SLOs are judged on the whole run, there.
    if let Some(gate) =
        AbortGate::of(scenario.slos.as_ref(), stop, clock.start()).filter(|_| !pushing)
    {
        sinks.push(Box::new(gate));
    }
    Ok(sinks)
}

/// What every request task shares.
fn share(
    scenario: Scenario,
    target: Target,
    work: Work,
    run_id: u64,
    clock: RunClock,
    records: mpsc::UnboundedSender<Inbox>,
    progress: Option<Arc<Progress>>,
) -> Arc<Shared> {
    let rates = scenario
        .feedback
        .as_ref()
        .map(|plan| Arc::new(feedback::LiveRates::new(&plan.initial_rates())));
    Arc::new(Shared {
        http: scenario.service().http_client(&scenario.timeouts),
        target,
        rates,
        work,
        planned_end: scenario.planned_duration(),
        in_flight: Arc::new(Semaphore::new(scenario.max_in_flight as usize)),
        abort: CancellationToken::new(),
        progress: progress.unwrap_or_default(),
        next_seq: AtomicU64::new(0),
        dynamic_seq_base: scenario.segment.seq_base(),
        next_session: AtomicU64::new(0),
        trace_key: match scenario.trace_ids {
            TraceIds::PerRun => run_id,
            TraceIds::Seeded => 0,
        },
        clock,
        records,
        scenario,
    })
}

/// What acts beside the load, in the order it stops: the disruptions, the feedback
/// controller, the scraper.
fn attachments_of(
    shared: &Arc<Shared>,
    servers: &Servers,
    observers: &Observers,
    base_url: &str,
    records_path: &std::path::Path,
    stop: &CancellationToken,
) -> Result<Vec<Box<dyn Attachment>>> {
    let scenario = &shared.scenario;
    let mut attachments: Vec<Box<dyn Attachment>> = Vec::new();
    if !scenario.disruptions.is_empty() {
        attachments.push(Box::new(Disruptions::new(
            scenario.disruptions.clone(),
            servers.replicas.clone(),
            shared.clock,
            shared.planned_end,
            stop,
        )));
    }
    let feedback = FeedbackControl::of(
        scenario,
        shared.rates.as_ref(),
        servers.embedded_url(),
        observers.live.clone(),
        shared.clock,
        RunFolder::of_records(records_path).feedback(),
    )?;
    if let Some(control) = feedback {
        attachments.push(Box::new(control));
    }
    if let Some(scraper) = Scraper::of(scenario, &shared.http, base_url, shared.clock)? {
        attachments.push(Box::new(scraper));
    }
    Ok(attachments)
}

/// Stops each attachment, in order; the first failure, after all have stopped.
async fn stop_all(attachments: Vec<Box<dyn Attachment>>, findings: &mut Findings) -> Result<()> {
    let mut first_failure = Ok(());
    for attachment in attachments {
        let stopped = attachment.stop(findings).await;
        if first_failure.is_ok() {
            first_failure = stopped;
        }
    }
    first_failure
}

/// Every request task has ended: closes the recorder's inbox explicitly, whoever
/// still holds a share of the run, and checks that each scheduled request has its
/// one record.
async fn close_recorder(
    shared: &Shared,
    recorder: tokio::task::JoinHandle<Result<Recorded>>,
) -> Result<Recorded> {
    let _ = shared.records.send(Inbox::Close);
    let collected = recorder.await.context("the recorder failed")??;
    let (scheduled, recorded) = shared.progress.balance();
    if scheduled != recorded {
        anyhow::bail!(
            "internal error: {scheduled} requests were scheduled but {recorded} have a record"
        );
    }
    Ok(collected)
}

/// Finishes the statistics and then every sink, in their order; the token evidence
/// the recorder kept.
async fn finish_sinks(
    recorded: Recorded,
    findings: &mut Findings,
) -> Result<tokens::TokenEvidence> {
    findings.aborted = recorded.aborted;
    let statistics: Box<dyn RecordSink> = Box::new(recorded.aggregator);
    statistics.finish(findings).await?;
    for sink in recorded.sinks {
        sink.finish(findings).await?;
    }
    Ok(recorded.evidence)
}

/// Settles the counts of answers without usage; when they changed, the statistics
/// are rebuilt from the settled records.
async fn settle_tokens(
    shared: &Shared,
    evidence: tokens::TokenEvidence,
    aggregator: Aggregator,
    records_path: &std::path::Path,
    base_url: &str,
    model: &str,
) -> Result<(Aggregator, Option<crate::record::TokenSettlement>)> {
    let settlement = tokens::settle(evidence, records_path, &shared.http, base_url, model).await?;
    let changed = settlement
        .as_ref()
        .is_some_and(|s| matches!(s.source, TokenSource::Events | TokenSource::ServerTokenizer));
    if !changed {
        return Ok((aggregator, settlement));
    }
    let mut rebuilt = shared.scenario.aggregator();
    crate::record::read_records(records_path, None, |r| rebuilt.add(&r))?;
    Ok((rebuilt, settlement))
}
