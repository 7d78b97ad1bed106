//! What a run stands up around its requests and takes down after them: the embedded
//! simulator and the chaos proxies in front of services with fault rules
//! ([`Servers`]), and the observers — live metrics, the trace receiver, the span
//! exporter ([`Observers`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::disrupt::ReplicaSet;
use super::services::{embedded_profile, proxy_counts, start_proxy, through_proxy, trace_report};
use super::sinks::SpanSink;
use super::{CollectOptions, flow};
use crate::chaos::{FaultLog, ProxyCounts, RunningProxy};
use crate::client::{HttpClient, RunClock};
use crate::prometheus::live::LiveMetrics;
use crate::scenario::flow::FlowPlan;
use crate::scenario::{Disruption, Endpoint, Scenario, Service};
use crate::sim::{EmbeddedSim, Profile, SimConfig};
use crate::trace::export::ExportCounts;
use crate::trace::graph::TraceReport;
use crate::trace::receiver::SpanStore;
use crate::workload::PromptSource;

/// The servers a run starts: one simulator for every `url: embedded` service, and a
/// chaos proxy in front of each service with fault rules (its traffic goes through
/// the proxy; records keep the service's own URL as the target).
pub(super) struct Servers {
    embedded: Option<(EmbeddedSim, String)>,
    proxies: BTreeMap<String, RunningProxy>,
    /// The replicas of `url: balanced` services, by service.
    pub(super) replicas: BTreeMap<String, Arc<tokio::sync::Mutex<ReplicaSet>>>,
    /// What the header says about them.
    pub(super) notes: Vec<String>,
}

impl Servers {
    /// Starts what the scenario needs; replicas' logs go to `dir`.
    pub(super) async fn start(scenario: &Scenario, dir: &Path) -> Result<Servers> {
        let mut servers = Servers {
            embedded: start_embedded(scenario).await?,
            proxies: BTreeMap::new(),
            replicas: BTreeMap::new(),
            notes: Vec::new(),
        };
        servers.start_balanced(scenario, dir).await?;
        for rule in &scenario.faults {
            let name = rule.spec.service.clone().unwrap_or_default();
            if servers.proxies.contains_key(&name) {
                continue;
            }
            let service = scenario.services.get(&name).unwrap_or(scenario.service());
            let proxy = start_proxy(scenario, service, &servers.url_of(service)).await?;
            servers.notes.push(format!(
                "chaos proxy for `{}` on {}; admin API on http://{}",
                service.name,
                proxy.addr,
                proxy.admin_addr.map_or(String::new(), |a| a.to_string())
            ));
            servers.proxies.insert(name, proxy);
        }
        Ok(servers)
    }

    /// Each `url: balanced` service: its replicas started (those with a command) and
    /// ready, then the balancer in front of them.
    async fn start_balanced(&mut self, scenario: &Scenario, dir: &Path) -> Result<()> {
        for service in scenario.called_services() {
            let Endpoint::Balanced { replicas, .. } = &service.endpoint else {
                continue;
            };
            let ready_within = scenario
                .disruptions
                .iter()
                .find_map(|d| match d {
                    Disruption::Restart {
                        service: name,
                        ready_within,
                        ..
                    } if *name == service.name => Some(*ready_within),
                    _ => None,
                })
                .unwrap_or(Duration::from_secs(60));
            let http = crate::client::http_client(&crate::client::Timeouts::default(), false);
            let mut set =
                ReplicaSet::start(&service.name, replicas, dir, &http, ready_within).await?;
            let proxy = start_proxy(scenario, service, "").await?;
            set.attach(proxy.chaos.pool.clone());
            self.notes.push(format!(
                "balancer for `{}` over {} replicas on {}; admin API on http://{}",
                service.name,
                replicas.len(),
                proxy.addr,
                proxy.admin_addr.map_or(String::new(), |a| a.to_string())
            ));
            self.proxies.insert(service.name.clone(), proxy);
            self.replicas
                .insert(service.name.clone(), Arc::new(tokio::sync::Mutex::new(set)));
        }
        Ok(())
    }

    /// Stops the replicas redline started.
    pub(super) async fn stop_replicas(&self) {
        for set in self.replicas.values() {
            set.lock().await.stop().await;
        }
    }

    /// The service's own base URL (a balanced service's is its balancer's).
    pub(super) fn url_of(&self, service: &Service) -> String {
        match &service.endpoint {
            Endpoint::Balanced { .. } => self
                .proxies
                .get(&service.name)
                .map(|p| p.base_url())
                .unwrap_or_default(),
            Endpoint::Embedded { .. } => self
                .embedded
                .as_ref()
                .map(|(sim, _)| match service.api {
                    crate::spec::ApiKind::QdrantGrpc => sim.qdrant_grpc_url(),
                    crate::spec::ApiKind::KserveGrpc => sim.kserve_grpc_url(),
                    _ => sim.base_url(),
                })
                .unwrap_or_default(),
            Endpoint::Url(url) => url.clone(),
            // No URL: named for what the run prints, by its program alone (its
            // arguments may hold a secret).
            Endpoint::Stdio { command } => {
                let program = command[0].rsplit('/').next().unwrap_or_default();
                format!("stdio:{program}")
            }
        }
    }

    /// The embedded simulator's base URL, when the run started one.
    pub(super) fn embedded_url(&self) -> Option<String> {
        self.embedded.as_ref().map(|(sim, _)| sim.base_url())
    }

    pub(super) fn model_of(&self, service: &Service) -> String {
        service
            .model
            .clone()
            .or_else(|| self.embedded.as_ref().map(|(_, model)| model.clone()))
            .unwrap_or_default()
    }

    /// Where requests to `name` go: through its proxy, if it has one.
    pub(super) fn request_base(&self, name: &str, base: String) -> String {
        if self.replicas.contains_key(name) {
            return base;
        }
        match self.proxies.get(name) {
            Some(proxy) => through_proxy(&base, proxy),
            None => base,
        }
    }

    /// The flow's runtime, its services reached as `request_base` says, with the
    /// tools of `tools: { from }` listed.
    pub(super) async fn flow_runtime(
        &self,
        plan: &Arc<FlowPlan>,
        scenario: &Scenario,
        baggage: hyper::header::HeaderValue,
        prompts: Arc<PromptSource>,
    ) -> Result<flow::FlowRuntime> {
        let mut urls = BTreeMap::new();
        let mut models = BTreeMap::new();
        for name in plan.services.keys() {
            let service = &scenario.services[name];
            let base = self.request_base(name, self.url_of(service));
            urls.insert(name.clone(), base);
            models.insert(name.clone(), self.model_of(service));
        }
        let mut runtime =
            flow::FlowRuntime::new(plan.clone(), urls, models, scenario, baggage, prompts)?;
        runtime.offer_listed_tools(scenario).await?;
        Ok(runtime)
    }

    /// The proxies' logs of what they injected, for the recorder to join.
    pub(super) fn fault_logs(&self) -> Vec<Arc<FaultLog>> {
        self.proxies.values().map(|p| p.chaos.log.clone()).collect()
    }

    pub(super) fn proxy_counts(&self) -> Vec<ProxyCounts> {
        self.proxies
            .iter()
            .map(|(service, proxy)| proxy_counts(service, proxy))
            .collect()
    }
}

async fn start_embedded(scenario: &Scenario) -> Result<Option<(EmbeddedSim, String)>> {
    let Some(profile) = embedded_profile(scenario) else {
        return Ok(None);
    };
    let profile = Profile::load(&profile)?;
    let model = scenario
        .service()
        .model
        .clone()
        .filter(|_| matches!(scenario.service().endpoint, Endpoint::Embedded { .. }))
        .unwrap_or_else(|| profile.model.clone());
    let sim = EmbeddedSim::start(SimConfig {
        profile,
        model: Some(model.clone()),
        seed: scenario.seed,
        tiers: scenario.sim_tiers.clone(),
        script: None,
        startup: None,
    })
    .await
    .context("cannot start the embedded simulator")?;
    Ok(Some((sim, model)))
}

/// What watches a run besides its records: live metrics, a trace receiver for the
/// services' spans, the exporter of redline's own spans.
pub(super) struct Observers {
    pub(super) live: Option<Arc<LiveMetrics>>,
    live_stop: CancellationToken,
    receiver: Option<Receiver>,
    receiver_stop: CancellationToken,
    exporter: Option<JoinHandle<ExportCounts>>,
}

struct Receiver {
    store: Arc<SpanStore>,
    server: JoinHandle<std::io::Result<()>>,
    grace: std::time::Duration,
}

/// What the observers need from the run's options.
pub(super) struct ObserverOptions {
    pub(super) metrics_listener: Option<tokio::net::TcpListener>,
    pub(super) otlp_endpoint: Option<hyper::Uri>,
    pub(super) otlp_tls: Option<crate::client::tls::TlsSettings>,
    pub(super) collect: Option<CollectOptions>,
}

impl Observers {
    /// Starts them; returns the sink the recorder sends spans to, when exporting.
    pub(super) fn start(
        options: ObserverOptions,
        scenario: &Scenario,
        model: &str,
        clock: RunClock,
        notes: &mut Vec<String>,
    ) -> Result<(Observers, Option<SpanSink>)> {
        let live_stop = CancellationToken::new();
        let live = options.metrics_listener.map(|listener| {
            let metrics = Arc::new(LiveMetrics::new());
            let stopped = live_stop.clone();
            tokio::spawn(crate::prometheus::live::serve(
                listener,
                metrics.clone(),
                async move { stopped.cancelled().await },
            ));
            metrics
        });
        // A trace receiver for the services' spans (and, unless told otherwise,
        // redline's).
        let receiver_stop = CancellationToken::new();
        let mut otlp_endpoint = options.otlp_endpoint;
        let receiver = match options.collect {
            Some(collect) => {
                let addr = collect.listener.local_addr()?;
                notes.push(format!(
                    "collecting OTLP/HTTP traces at http://{addr}/v1/traces"
                ));
                otlp_endpoint.get_or_insert(format!("http://{addr}/v1/traces").parse()?);
                Some(start_receiver(collect, receiver_stop.clone())?)
            }
            None => None,
        };
        let (exporter, sink) = match otlp_endpoint {
            Some(endpoint) => {
                let http = crate::client::http_client_with(
                    &scenario.timeouts,
                    false,
                    options.otlp_tls.as_ref(),
                );
                let (exporter, sink) = start_exporter(http, endpoint, scenario, model, clock);
                (Some(exporter), Some(sink))
            }
            None => (None, None),
        };
        let observers = Observers {
            live,
            live_stop,
            receiver,
            receiver_stop,
            exporter,
        };
        Ok((observers, sink))
    }

    /// Stops them once the records are in: what the exporter sent, and the graph of
    /// the traces received (after their grace, or at once after a stop).
    pub(super) async fn finish(
        self,
        stop: &CancellationToken,
        records: &Path,
    ) -> Result<(Option<ExportCounts>, Option<TraceReport>)> {
        self.live_stop.cancel();
        let otlp = match self.exporter {
            Some(exporter) => Some(exporter.await.context("the span exporter failed")?),
            None => None,
        };
        let Some(Receiver {
            store,
            server,
            grace,
        }) = self.receiver
        else {
            return Ok((otlp, None));
        };
        tokio::select! {
            _ = tokio::time::sleep(grace) => {}
            _ = stop.cancelled() => {}
        }
        self.receiver_stop.cancel();
        let _ = server.await;
        let mut report = trace_report(&store.path, records)?;
        report.receiver = Some(store.stats.counts());
        Ok((otlp, Some(report)))
    }
}

fn start_receiver(collect: CollectOptions, stop: CancellationToken) -> Result<Receiver> {
    let store = Arc::new(
        SpanStore::create(&collect.dir, 5_000_000)
            .with_context(|| format!("cannot write to {}", collect.dir.display()))?,
    );
    let server = tokio::spawn(
        axum::serve(collect.listener, crate::trace::receiver::app(store.clone()))
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .into_future(),
    );
    Ok(Receiver {
        store,
        server,
        grace: collect.grace,
    })
}

fn start_exporter(
    http: HttpClient,
    endpoint: hyper::Uri,
    scenario: &Scenario,
    model: &str,
    clock: RunClock,
) -> (JoinHandle<ExportCounts>, SpanSink) {
    let (sender, spans) = mpsc::unbounded_channel();
    let exporter = tokio::spawn(crate::trace::export::export(
        http,
        endpoint,
        scenario.name.clone(),
        spans,
    ));
    // The records' clock in Unix time, for span timestamps.
    let origin_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        .saturating_sub(clock.start().elapsed().as_nanos() as u64)
        + clock
            .start()
            .saturating_duration_since(Instant::now())
            .as_nanos() as u64;
    let sink = SpanSink::new(sender, model.to_owned(), scenario.name.clone(), origin_ns);
    (exporter, sink)
}
