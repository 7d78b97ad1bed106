//! Where a run's requests go and how they are named: the simulator the embedded
//! services share, chaos proxies in front of services with fault rules, the W3C trace
//! identity of requests (`traceparent`, `baggage`), and the report of traces collected
//! during the run.

use super::*;
use crate::chaos::ProxyCounts;

/// The graph of the spans collected during the run, joined to its records.
pub(super) fn trace_report(
    spans: &std::path::Path,
    records: &std::path::Path,
) -> Result<crate::trace::graph::TraceReport> {
    let text = std::fs::read_to_string(spans).unwrap_or_default();
    let spans = crate::trace::graph::parse_spans(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", spans.display()))?;
    let mut all = Vec::new();
    crate::record::read_records(records, None, |r| all.push(r))?;
    let records = all;
    Ok(crate::trace::graph::TraceReport {
        graph: crate::trace::graph::build(&spans),
        join: crate::trace::graph::join(&spans, &records),
        receiver: None,
    })
}

/// What the run is about to do, for the lines printed before it starts.
pub(super) fn header_of(
    scenario: &Scenario,
    target: &str,
    model: &str,
    notes: Vec<String>,
) -> super::Header {
    super::Header {
        name: scenario.name.clone(),
        target: target.to_owned(),
        model: model.to_owned(),
        stages: scenario
            .stages
            .iter()
            .map(|s| s.describe(scenario.unit()))
            .collect(),
        planned: scenario.planned_duration(),
        notes: scenario.warnings().into_iter().chain(notes).collect(),
    }
}

/// The profile of the simulator `url: embedded` services share, if any is embedded:
/// the main service's, else the first embedded flow service's that names one.
pub(super) fn embedded_profile(scenario: &Scenario) -> Option<String> {
    scenario
        .called_services()
        .filter_map(|s| match &s.endpoint {
            Endpoint::Embedded { profile } => Some(profile.clone()),
            Endpoint::Url(_) | Endpoint::Balanced { .. } | Endpoint::Stdio { .. } => None,
        })
        .next()
}

/// A proxy in front of `service`: its fault rules, and its replicas balanced when it
/// is `url: balanced` (else its one upstream at `base_url`).
pub(super) async fn start_proxy(
    scenario: &Scenario,
    service: &Service,
    base_url: &str,
) -> Result<RunningProxy> {
    let rules = scenario
        .faults
        .iter()
        .filter(|def| def.spec.service.as_deref() == Some(service.name.as_str()))
        .map(|def| Rule::new(def.clone()))
        .collect();
    let (urls, balance) = match &service.endpoint {
        Endpoint::Balanced { replicas, balance } => {
            (replicas.iter().map(|r| r.url.as_str()).collect(), *balance)
        }
        _ => (vec![base_url], Default::default()),
    };
    let mut upstreams = Vec::new();
    for url in urls {
        let upstream = upstream_uri(url, false)?;
        upstreams.push(
            format!(
                "{}://{}",
                upstream.scheme_str().unwrap_or("http"),
                upstream.authority().map_or("", |a| a.as_str())
            )
            .parse()?,
        );
    }
    let proxy = RunningProxy::start(ProxyConfig {
        upstreams,
        balance,
        upstream_http2: service.http2,
        listen: ([127, 0, 0, 1], 0).into(),
        admin: Some(([127, 0, 0, 1], 0).into()),
        rules,
        seed: scenario.seed,
        allow_header_faults: false,
        log: Arc::new(FaultLog::for_run()),
        tls: None,
        upstream_tls: service.tls.clone(),
        tap: None,
        mirror: None,
    })
    .await
    .context("cannot start the chaos proxy")?;
    Ok(proxy)
}

/// The service's base URL with the proxy's address in place of the service's.
pub(super) fn through_proxy(base_url: &str, proxy: &RunningProxy) -> String {
    let path = base_url
        .parse::<hyper::Uri>()
        .map(|u| u.path().trim_end_matches('/').to_owned())
        .unwrap_or_default();
    format!("{}{path}", proxy.base_url())
}

pub(super) fn proxy_counts(service: &str, proxy: &RunningProxy) -> ProxyCounts {
    let stats = proxy.chaos.stats();
    ProxyCounts {
        service: service.to_owned(),
        addr: proxy.addr.to_string(),
        admin_addr: proxy.admin_addr.map(|a| a.to_string()),
        connections: stats.connections,
        requests: stats.requests,
        upstream_errors: stats.upstream_errors,
        unclaimed_faults: proxy.chaos.log.unclaimed(),
        upstreams: crate::chaos::UpstreamCount::of_pool(&proxy.chaos.pool),
        rules: stats
            .rules
            .into_iter()
            .map(|r| (r.name, r.fault.to_owned(), r.matched, r.injected))
            .collect(),
    }
}

/// The `baggage` header name.
pub(super) static BAGGAGE: hyper::header::HeaderName =
    hyper::header::HeaderName::from_static("baggage");

/// A number new to each run (not from the seed: two runs of one spec are two runs).
pub fn new_run_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    mix_seed(&[nanos, u64::from(std::process::id())])
}

/// `redline.run_id=…,redline.scenario=…`: the run's ID and the scenario's name.
pub(super) fn baggage_of(run_id: u64, scenario: &str) -> HeaderValue {
    let scenario = crate::chaos::proxy::baggage_value(scenario);
    HeaderValue::try_from(format!(
        "redline.run_id={run_id:016x},redline.scenario={scenario}"
    ))
    .expect("percent-encoded ASCII is a valid header value")
}
