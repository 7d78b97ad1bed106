//! The chaos proxy: a fault-injecting reverse proxy that knows HTTP and token streams.
//!
//! Faults are decided per request, never per connection, so "5 %" means 5 % of
//! requests however a keep-alive pool spreads them (toxiproxy's `toxicity` is per
//! connection). Each decision is seeded by the rule, the seed and the request's
//! `traceparent`, so a run with the same seed gets the same faults. Every injection is
//! logged with the request's `traceparent` and named in an `x-redline-fault` response
//! header; a run joins the log to its records.
//!
//! # Layout
//! - [`balance`] — the upstreams: round robin or least in flight, passive ejection
//! - [`rules`] — validated rules, matching and the per-request roll
//! - [`proxy`] — the request path: decide, delay or answer, forward, shape
//! - [`shape`] — response-body faults as the body streams
//! - [`log`] — what was injected, by request
//! - [`tap`] — watching exchanges (a recorder) and mirroring them to a shadow
//! - [`admin`] — the live admin API

pub mod admin;
pub mod balance;
pub mod grpc;
pub mod log;
pub mod proxy;
pub mod rules;
pub mod shape;
pub mod tap;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use hyper::Uri;
use hyper::service::service_fn;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto::Builder as ConnectionBuilder;
use tokio::net::TcpListener;

use hyper::header::{self, HeaderMap, HeaderName};

use crate::spec::Problems;
use crate::spec::error::{SpecError, SpecErrors};
use crate::spec::faults::RulesFile;
pub use log::FaultLog;
pub use proxy::Chaos;
pub use rules::{Rule, RuleDef};
pub use tap::{Tap, Watch};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body the proxy passes on: the upstream's, shaped, or one of its own.
pub type ProxyBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, BoxError>;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The names present are looked at once and only those removed: removing the eight
    // standard names each time, most of them absent, cost 4,100 instructions a
    // proxied request under callgrind (each removal hashes its name).
    let mut named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    named.extend(headers.keys().filter(|name| is_hop_by_hop(name)).cloned());
    for name in named {
        headers.remove(name);
    }
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    const HOP_BY_HOP: [HeaderName; 7] = [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ];
    HOP_BY_HOP.contains(name) || name.as_str() == "keep-alive"
}

/// How to start a proxy.
pub struct ProxyConfig {
    /// One upstream, or the replicas of one service.
    pub upstreams: Vec<Uri>,
    pub balance: balance::Balance,
    pub upstream_http2: bool,
    pub listen: SocketAddr,
    /// The admin API's address; none for no admin API.
    pub admin: Option<SocketAddr>,
    pub rules: Vec<Rule>,
    pub seed: u64,
    pub allow_header_faults: bool,
    pub log: Arc<FaultLog>,
    /// Terminate TLS from clients with this.
    pub tls: Option<crate::net::ServerTls>,
    /// Certificates for an https upstream (re-encrypting); none: the system's roots.
    pub upstream_tls: Option<crate::client::tls::TlsSettings>,
    /// Sees every exchange (a recorder).
    pub tap: Option<Arc<dyn Tap>>,
    /// Copies a share of the requests to a shadow.
    pub mirror: Option<tap::MirrorConfig>,
}

/// A proxy serving on its own tasks until dropped.
pub struct RunningProxy {
    pub addr: SocketAddr,
    pub admin_addr: Option<SocketAddr>,
    https: bool,
    pub chaos: Arc<Chaos>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl RunningProxy {
    pub async fn start(config: ProxyConfig) -> Result<RunningProxy> {
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let addr = listener.local_addr()?;
        let https = config.tls.is_some();
        let mut chaos = Chaos::new(
            balance::Pool::new(&config.upstreams, config.balance),
            config.upstream_http2,
            config.upstream_tls.as_ref(),
            config.rules,
            config.seed,
            config.allow_header_faults,
            config.log,
        );
        chaos.tap = config.tap;
        chaos.mirror = config
            .mirror
            .map(|m| tap::Mirror::new(m, config.upstream_tls.as_ref(), config.seed));
        let chaos = Arc::new(chaos);
        let admin_addr = match config.admin {
            Some(admin) => {
                let admin = TcpListener::bind(admin)
                    .await
                    .with_context(|| format!("cannot listen on {admin} for the admin API"))?;
                let admin_addr = admin.local_addr()?;
                let app = admin::app(chaos.clone());
                tokio::spawn(async move {
                    let _ = axum::serve(admin, app).await;
                });
                Some(admin_addr)
            }
            None => None,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, config.tls, chaos.clone(), async move {
            let _ = stopped.await;
        }));
        Ok(RunningProxy {
            addr,
            admin_addr,
            https,
            chaos,
            stop: Some(stop),
        })
    }

    pub fn base_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Accepts connections (HTTP/1.1 and HTTP/2) until `shutdown`, then gives open ones a
/// moment to finish.
pub async fn serve(
    listener: TcpListener,
    tls: Option<crate::net::ServerTls>,
    chaos: Arc<Chaos>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let service = move || {
        chaos.counters.connections.fetch_add(1, Ordering::Relaxed);
        let chaos = chaos.clone();
        let lanes = chaos.lanes();
        service_fn(move |request| chaos.clone().handle(lanes.clone(), request))
    };
    // Held (`timeout`) requests would keep a graceful shutdown waiting for ever.
    crate::net::accept_loop(
        listener,
        tls,
        ConnectionBuilder::new(TokioExecutor::new()),
        service,
        shutdown,
        Some(Duration::from_secs(1)),
    )
    .await;
}

/// Checks an upstream URL: `http://` with a host, and on loopback unless allowed
/// otherwise (a chaos proxy aimed at someone else's service is an attack tool).
pub fn upstream_uri(url: &str, allow_remote: bool) -> Result<Uri> {
    let uri: Uri = url
        .parse()
        .with_context(|| format!("upstream `{url}` is not a URL"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => bail!("upstream `{url}`: the proxy speaks http and https, not `{other}`"),
        None => bail!("upstream `{url}` needs a scheme: write `http://{url}`"),
    }
    let Some(host) = uri.host() else {
        bail!("upstream `{url}` has no host");
    };
    if !allow_remote && !is_loopback(host) {
        bail!(
            "upstream `{url}` is not on loopback; the proxy only injects faults into services on this machine unless you pass --allow-remote-upstream"
        );
    }
    Ok(uri)
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Reads and validates a rules file: every problem, with file, line and field.
pub fn load_rules(path: &str) -> Result<(RulesFile, Vec<Rule>), SpecErrors> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SpecErrors::unreadable(path, "rules file", &e))?;
    parse_rules(path, &text)
}

pub fn parse_rules(path: &str, text: &str) -> Result<(RulesFile, Vec<Rule>), SpecErrors> {
    let file: RulesFile = yaml_serde::from_str(text)
        .map_err(|e| SpecErrors(vec![SpecError::from_yaml(path, &e, 0)]))?;
    let mut problems = Problems::new();
    let mut rules = Vec::new();
    for (i, spec) in file.rules.iter().enumerate() {
        let at = format!("rules[{i}]");
        if spec.service.is_some() {
            problems.add(
                &format!("{at}.service"),
                "a rules file serves one upstream: `service` belongs to a spec's `faults:`".into(),
                Some("remove `service`".into()),
            );
        }
        if file.rules[..i].iter().any(|r| r.name == spec.name) {
            problems.add(
                &format!("{at}.name"),
                format!("a rule named `{}` comes earlier", spec.name),
                Some("give every rule its own name".into()),
            );
        }
        match Rule::validate(spec, &at) {
            Ok(rule) => rules.push(rule),
            Err(found) => problems.extend(found),
        }
    }
    if problems.is_empty() {
        Ok((file, rules))
    } else {
        Err(problems.located(path, text))
    }
}

/// What the chaos proxy counted on its side.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ProxyCounts {
    /// The service it stood in front of.
    pub service: String,
    /// Where it listened, and its admin API.
    pub addr: String,
    pub admin_addr: Option<String>,
    pub connections: u64,
    pub requests: u64,
    /// Requests the upstream did not answer (the proxy answered 502).
    pub upstream_errors: u64,
    /// Injections no record claimed.
    pub unclaimed_faults: u64,
    /// Per rule: (name, fault, requests matched, faults injected).
    pub rules: Vec<(String, String, u64, u64)>,
    /// Per upstream, when it balanced over replicas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<UpstreamCount>,
}

/// What one replica behind the proxy saw.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct UpstreamCount {
    /// `scheme://authority` of the replica.
    pub origin: String,
    /// Tries sent to it (a resent request counts at each replica it went to).
    pub requests: u64,
    /// Refused or broken connections and 502/503/504 answers.
    pub failures: u64,
    /// Times passive health checks left it out.
    pub ejections: u64,
    /// Requests it did not take that went on to another replica.
    pub retried: u64,
}

impl UpstreamCount {
    pub fn of_pool(pool: &balance::Pool) -> Vec<UpstreamCount> {
        use std::sync::atomic::Ordering::Relaxed;
        if pool.upstreams.len() < 2 {
            return Vec::new();
        }
        pool.upstreams
            .iter()
            .map(|u| UpstreamCount {
                origin: u.origin.clone(),
                requests: u.counts.requests.load(Relaxed),
                failures: u.counts.failures.load(Relaxed),
                ejections: u.counts.ejections.load(Relaxed),
                retried: u.counts.retried.load(Relaxed),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_outside_loopback_need_permission() {
        assert!(upstream_uri("http://127.0.0.1:8000", false).is_ok());
        assert!(upstream_uri("http://localhost:8000/v1", false).is_ok());
        assert!(upstream_uri("http://[::1]:8000", false).is_ok());
        let remote = upstream_uri("http://10.0.0.5:8000", false).unwrap_err();
        assert!(
            remote.to_string().contains("--allow-remote-upstream"),
            "{remote}"
        );
        assert!(upstream_uri("http://10.0.0.5:8000", true).is_ok());
        assert!(
            upstream_uri("https://127.0.0.1", false).is_ok(),
            "the proxy re-encrypts to https"
        );
        assert!(upstream_uri("ftp://127.0.0.1", false).is_err());
    }

    #[test]
    fn a_bad_rules_file_names_file_line_field_and_fix() {
        let text = "seed: 1\nrules:\n  - name: slow\n    delay: { probability: 1.2, min_ms: 800, max_ms: 300 }\n  - name: slow\n    explode: { probability: 0.1 }\n";
        let errors = parse_rules("rules.yaml", text).unwrap_err().to_string();
        assert!(
            errors.contains("rules.yaml:6:5: rules[1]: unknown field `explode`"),
            "{errors}"
        );
        let text = "rules:\n  - name: slow\n    delay: { probability: 1.2, min_ms: 800, max_ms: 300 }\n  - name: slow\n    drop_done: { probability: 0.1 }\n";
        let errors = parse_rules("rules.yaml", text).unwrap_err().to_string();
        assert_eq!(
            errors,
            "3 problems in the spec:\n\
             rules.yaml:3:14: rules[0].delay.probability: probability 1.2 is not between 0 and 1\n  fix: write a chance per request: 0.05 for 5 %\n\
             rules.yaml:3:32: rules[0].delay.min_ms: min_ms 800 and max_ms 300 do not make a range\n  fix: write 0 <= min_ms <= max_ms, e.g. `min_ms: 300, max_ms: 800`\n\
             rules.yaml:4:5: rules[1].name: a rule named `slow` comes earlier\n  fix: give every rule its own name\n"
        );
    }
}
