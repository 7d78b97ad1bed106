//! The reverse proxy: each request is matched against the rules, rolled, and then
//! delayed, answered in the upstream's place, or forwarded with its response shaped
//! on the way back. Bodies stream through unbuffered unless a rule must rewrite JSON.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::client::chain_message;
use crate::client::lane::Lane;
use crate::client::tls::{Alpn, Connector};
use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::http::uri::PathAndQuery;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use serde_json::Value;

use super::balance::{InFlight, Pool, is_gateway_failure};
use super::log::{FaultLog, RequestId};
use super::rules::{AbortHow, Action, CutEnd, EmptyTarget, FixedFault, RpcCall, Rule};
use super::shape::{Shaping, StreamFormat};
use super::{BoxError, ProxyBody, strip_hop_by_hop};
use crate::record::{FAULT_HEADER, InjectedFault};
use crate::seed::{fnv64, mix_seed};
use crate::spec::faults::DelayAt;

mod told;

pub use told::baggage_value;
use told::*;

/// Request headers that ask for a fault, when the proxy allows it.
const HEADER_FAULT_PREFIX: &str = "x-redline-fault-";
/// Longest JSON answer `empty_result` rewrites (it must hold the whole answer).
const MAX_REWRITE_BYTES: usize = 64 << 20;
/// How long `abort: { timeout: true }` holds a request before resetting it, so a
/// client without a timeout cannot pin the proxy's memory for ever.
const LONGEST_HANG: Duration = Duration::from_secs(600);
/// How long the proxy waits for a connection (and TLS handshake) to its upstream.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request body kept to resend to another replica; a larger one (or one of
/// unknown length) streams through once, unretried.
const MAX_RETRY_BODY: u64 = 8 << 20;

/// A request body on its way upstream: streamed through, or kept to be resent.
type UpstreamBody = Either<Incoming, Full<Bytes>>;

/// One caller connection's upstream connections, one per upstream, each opened at its
/// first use. An HTTP/1.1 caller sends one request at a time, so its connection needs
/// no pool, as a closed-loop slot of the client needs none (`client::lane`): under
/// callgrind the shared pool cost 11,600 instructions a request. They close with the
/// caller's connection. HTTP/2 (from the caller or to the upstream) uses the pool.
pub struct Lanes(Vec<Lane<UpstreamBody>>);

impl Lanes {
    /// The lanes for a request of `version`: none for HTTP/2, whose requests overlap.
    fn for_version(&self, version: hyper::Version) -> Option<&Lanes> {
        (!self.0.is_empty() && version < hyper::Version::HTTP_2).then_some(self)
    }
}

/// Why an upstream did not answer a try.
struct Unanswered {
    /// No connection was made, so the request cannot have reached it.
    connecting: bool,
    message: String,
}

/// What a request's fault rolls are keyed on: the parent span ID of its
/// `traceparent` (`00-<trace-id>-<parent-id>-<flags>`), which redline draws from the
/// seed and the request's position; its trace ID is new to each run. So a run
/// replays with its faults, and two runs never share a trace. A header of another
/// shape is keyed whole.
fn roll_key(traceparent: &[u8]) -> &[u8] {
    std::str::from_utf8(traceparent)
        .ok()
        .and_then(crate::trace::context::parse)
        .map_or(traceparent, |context| context.span_id.as_bytes())
}

/// Counters of the proxy as a whole.
#[derive(Debug, Default)]
pub struct ProxyCounters {
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    /// Requests the upstream could not answer (answered 502 by the proxy).
    pub upstream_errors: AtomicU64,
    /// Faults asked for by request headers.
    pub header_faults: AtomicU64,
}

/// Everything the proxy's connections share.
pub struct Chaos {
    /// The upstreams and their balancing.
    pub pool: Arc<Pool>,
    client: Client<Connector, UpstreamBody>,
    /// Set for HTTP/1.1 upstreams: what a caller connection's lanes connect with.
    lane_connector: Option<Connector>,
    pub rules: RwLock<Arc<Vec<Arc<Rule>>>>,
    pub seed: u64,
    pub allow_header_faults: bool,
    pub log: Arc<FaultLog>,
    pub counters: ProxyCounters,
    started: Instant,
    next_key: AtomicU64,
    /// Sees every exchange (a recorder), when set.
    pub tap: Option<Arc<dyn super::tap::Tap>>,
    /// Copies a share of the requests to a shadow, when set.
    pub mirror: Option<super::tap::Mirror>,
}

impl Chaos {
    pub fn new(
        pool: Pool,
        upstream_http2: bool,
        upstream_tls: Option<&crate::client::tls::TlsSettings>,
        rules: Vec<Rule>,
        seed: u64,
        allow_header_faults: bool,
        log: Arc<FaultLog>,
    ) -> Chaos {
        let alpn = if upstream_http2 {
            Alpn::Http2
        } else {
            Alpn::Http1
        };
        let connector = Connector::new(UPSTREAM_CONNECT_TIMEOUT, upstream_tls, alpn);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .http2_only(upstream_http2)
            .build(connector.clone());
        Chaos {
            pool: Arc::new(pool),
            client,
            lane_connector: (!upstream_http2).then_some(connector),
            rules: RwLock::new(Arc::new(rules.into_iter().map(Arc::new).collect())),
            seed,
            allow_header_faults,
            log,
            counters: ProxyCounters::default(),
            started: Instant::now(),
            next_key: AtomicU64::new(0),
            tap: None,
            mirror: None,
        }
    }

    /// A rolled fault the response gave no hold for (a stream fault on a JSON answer,
    /// an `empty_result` on one without the list): not counted as injected.
    fn unapplied(&self, rule: &str) {
        if let Some(rule) = self.rules().iter().find(|r| r.name() == rule) {
            let _ = rule
                .injected
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    pub fn rules(&self) -> Arc<Vec<Arc<Rule>>> {
        self.rules
            .read()
            .expect("rules are swapped whole; a panic cannot leave them half-written")
            .clone()
    }

    /// The upstream connections of one caller's connection, none yet: see [`Lanes`].
    pub fn lanes(&self) -> Arc<Lanes> {
        let lanes = match &self.lane_connector {
            Some(connector) => (0..self.pool.upstreams.len())
                .map(|_| Lane::new(connector.clone()))
                .collect(),
            None => Vec::new(),
        };
        Arc::new(Lanes(lanes))
    }

    /// Handles one request, which came on a caller's connection with `lanes`. An `Err`
    /// makes hyper drop the connection (HTTP/1.1) or reset the stream (HTTP/2): that is
    /// how `abort: { reset: true }` is done.
    pub async fn handle(self: Arc<Self>, lanes: Arc<Lanes>, request: Request<Incoming>) -> Answer {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let (mut head, body) = request.into_parts();
        let grpc = super::grpc::is_call(&head);
        let (body, rpc) = match self.read_rpc(&head, body).await {
            Ok(read) => read,
            Err(message) => return Ok(proxy_error(grpc, StatusCode::PAYLOAD_TOO_LARGE, &message)),
        };
        let (mut plan, named) = match self.decide(&mut head, rpc.as_ref()) {
            Ok(decided) => decided,
            Err(message) => return Ok(proxy_error(grpc, StatusCode::BAD_REQUEST, &message)),
        };
        plan.grpc = grpc;
        let id = named.id();
        if let Some(answer) = plan.before_upstream().await {
            return answer;
        }
        add_fault_baggage(&mut head.headers, &plan.noted);
        let lanes = lanes.for_version(head.version);
        let (body, mut watch) = match self.watch(&head, body).await {
            Ok(watched) => watched,
            Err(message) => return Ok(proxy_error(grpc, StatusCode::PAYLOAD_TOO_LARGE, &message)),
        };
        let (response, in_flight) = match self.forward(head, body, lanes).await {
            Ok(answered) => answered,
            Err(error) => {
                if let Some(watch) = &mut watch {
                    watch.end(Some(format!("the upstream did not answer: {error}")));
                }
                self.counters
                    .upstream_errors
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(proxy_error(
                    grpc,
                    StatusCode::BAD_GATEWAY,
                    &format!("the upstream did not answer: {error}"),
                ));
            }
        };
        if !plan.response_delay.is_zero() {
            tokio::time::sleep(plan.response_delay).await;
        }
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // The replica counts the request in flight until its body ends or is dropped.
        let mut body: ProxyBody = body
            .map_err(|e| Box::new(e) as BoxError)
            .map_frame(move |frame| {
                let _held = &in_flight;
                frame
            })
            .boxed_unsync();
        if let Some((rule, target)) = plan.empty_result.take() {
            body = match self
                .empty_result(&mut plan, &id, (rule, target), &mut parts, body)
                .await
            {
                Ok(body) => body,
                Err(answer) => return answer,
            };
        }
        let body = self.shape(&mut plan, &id, &mut parts, body);
        if let Some(value) = fault_header(&plan.noted) {
            parts
                .headers
                .insert(HeaderName::from_static(FAULT_HEADER), value);
        }
        let body = match watch {
            Some(mut watch) => {
                watch.head(parts.status.as_u16(), &parts.headers);
                super::tap::watched(body, watch)
            }
            None => body,
        };
        Ok(Response::from_parts(parts, body))
    }

    /// When a rule must see MCP requests, a POST's body read whole (up to
    /// [`MAX_RETRY_BODY`]) and its JSON-RPC message, if it is one; else the body
    /// streams through unread. `Err` is why it could not be read.
    async fn read_rpc(
        &self,
        head: &Parts,
        body: Incoming,
    ) -> Result<(UpstreamBody, Option<RpcCall>), String> {
        let wanted = head.method == hyper::Method::POST
            && self.rules().iter().any(|rule| rule.def.needs_rpc());
        if !wanted {
            return Ok((Either::Left(body), None));
        }
        let limited = http_body_util::Limited::new(body, MAX_RETRY_BODY as usize);
        let bytes = match limited.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) => return Err(format!("the request's body could not be read: {error}")),
        };
        let rpc = RpcCall::of(&bytes);
        Ok((Either::Right(Full::new(bytes)), rpc))
    }

    /// With a tap or a mirror, the request's body read whole, shown to the tap and
    /// copied to the shadow: the body to forward and the watch of its answer. Without,
    /// the body streams through untouched. `Err` is why it could not be read.
    async fn watch(
        &self,
        head: &Parts,
        body: UpstreamBody,
    ) -> Result<(UpstreamBody, Option<Box<dyn super::tap::Watch>>), String> {
        if self.tap.is_none() && self.mirror.is_none() {
            return Ok((body, None));
        }
        let bytes = match body {
            Either::Left(body) => super::tap::capture(body).await?,
            Either::Right(full) => match full.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(never) => match never {},
            },
        };
        let mirror = self.mirror.as_ref().filter(|m| m.rolls(head));
        let (watch, shadow) = match &self.tap {
            Some(tap) => {
                let (watch, shadow) = tap.request(head, &bytes, mirror.is_some());
                (Some(watch), shadow)
            }
            None => (None, None),
        };
        if let Some(mirror) = mirror {
            mirror.send(head, bytes.clone(), shadow);
        }
        Ok((Either::Right(Full::new(bytes)), watch))
    }

    /// Rolls every rule (and the header faults) for a request: what to do to it, and
    /// its name for the fault log.
    fn decide(&self, head: &mut Parts, rpc: Option<&RpcCall>) -> Result<(Plan, Named), String> {
        let key = match head.headers.get("traceparent") {
            Some(tp) => fnv64(roll_key(tp.as_bytes())),
            None => mix_seed(&[0x006b_6579, self.next_key.fetch_add(1, Ordering::Relaxed)]),
        };
        let mut decided = self.header_faults(&mut head.headers)?;
        let since_start = self.started.elapsed();
        for rule in self.rules().iter() {
            if let Some(action) = rule.roll((head, rpc), key, self.seed, since_start) {
                decided.push((rule.name().to_owned(), action));
            }
        }
        // Naming the request for the fault log costs allocations: only for requests a
        // fault was rolled for (the rest pass with nothing to note).
        let named = if decided.is_empty() {
            Named::default()
        } else {
            Named::of(head)
        };
        let mut plan = Plan {
            rpc_id: rpc.and_then(|r| r.id.clone()),
            ..Plan::default()
        };
        for (rule, action) in decided {
            plan.add(&self.log, &named.id(), rule, action);
        }
        Ok((plan, named))
    }

    /// `empty_result`: the whole answer read (bounded) and its list emptied: the JSON
    /// list at the rule's path, or in a gRPC answer the repeated field of each message
    /// (its trailers, which carry the status, kept). `Err` is the answer to give
    /// instead (the body broke, or is too large to rewrite).
    async fn empty_result(
        &self,
        plan: &mut Plan,
        id: &RequestId<'_>,
        (rule, target): (String, EmptyTarget),
        parts: &mut hyper::http::response::Parts,
        mut body: ProxyBody,
    ) -> Result<ProxyBody, Answer> {
        let mut whole = bytes::BytesMut::new();
        let mut trailers = None;
        while let Some(frame) = body.frame().await {
            match frame.map_err(Err)?.into_data() {
                Ok(data) => whole.extend_from_slice(&data),
                Err(frame) => trailers = frame.into_trailers().ok().or(trailers),
            }
            if whole.len() > MAX_REWRITE_BYTES {
                return Err(Ok(proxy_error(
                    plan.grpc,
                    StatusCode::BAD_GATEWAY,
                    "the answer is too large for `empty_result` to rewrite",
                )));
            }
        }
        let bytes = whole.freeze();
        let rewritten = if plan.grpc {
            crate::grpc::body_without_field(&bytes, target.grpc_field)
        } else {
            empty_list(&bytes, &target.json_path)
        };
        if rewritten.is_some() {
            plan.noted
                .push(note(&self.log, id, rule, "empty_result", None));
            parts.headers.remove(header::CONTENT_LENGTH);
        } else {
            self.unapplied(&rule);
        }
        let frames = [
            Some(Frame::data(rewritten.unwrap_or(bytes))),
            trailers.map(Frame::trailers),
        ];
        let frames = frames.into_iter().flatten().map(Ok::<_, BoxError>);
        Ok(StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync())
    }

    /// The body with the planned shaping: event faults only on an event stream (SSE,
    /// newline-delimited JSON, gRPC messages; on any other body they would be noise),
    /// bandwidth and slicing on any.
    fn shape(
        &self,
        plan: &mut Plan,
        id: &RequestId<'_>,
        parts: &mut hyper::http::response::Parts,
        body: ProxyBody,
    ) -> ProxyBody {
        let format = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(StreamFormat::of);
        let mut shaping = std::mem::take(&mut plan.shaping);
        if format.is_some() {
            for (rule, fault, added_ms) in plan.event_faults.drain(..) {
                plan.noted.push(note(&self.log, id, rule, fault, added_ms));
            }
        } else {
            for (rule, ..) in &plan.event_faults {
                self.unapplied(rule);
            }
            shaping = Shaping {
                bandwidth: shaping.bandwidth,
                slice: shaping.slice,
                ..Shaping::default()
            };
        }
        if shaping.changes_length() {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        if shaping.is_empty() {
            body
        } else {
            // A body that is not a stream kept no event faults: its framing is unused.
            shaping.apply(body, format.unwrap_or(StreamFormat::Sse))
        }
    }

    /// Sends the request to an upstream the pool picks, on the caller connection's
    /// lane to it when it has `lanes`, else through the shared pool. With retries on and
    /// a body small enough to keep, a request no replica took (refused connection) or
    /// that one refused unprocessed (503) goes to the next, each replica once. `Err`
    /// says why no upstream answered.
    async fn forward(
        &self,
        mut head: Parts,
        body: UpstreamBody,
        lanes: Option<&Lanes>,
    ) -> Result<(Response<Incoming>, InFlight), String> {
        strip_hop_by_hop(&mut head.headers);
        head.headers.remove(header::HOST);
        head.version = hyper::Version::default();
        // Named only while a replica restarts: what fails then is put down to it.
        let named = self.pool.any_restarting().then(|| Named::of(&head));
        let keep = self.pool.upstreams.len() > 1
            && self.pool.balance.retry
            && hyper::body::Body::size_hint(&body)
                .exact()
                .is_some_and(|n| n <= MAX_RETRY_BODY);
        if !keep {
            let i = self.pool.pick(&[]).expect("a pool has an upstream");
            let in_flight = self.pool.begin(i);
            self.point_at(i, &mut head.uri);
            let request = Request::from_parts(head, body);
            let sent = self.send(i, request, lanes).await;
            return self.settle(i, sent, named.as_ref()).map(|r| (r, in_flight));
        }
        let kept = body
            .collect()
            .await
            .map_err(|e| format!("the request's body broke before it was sent: {e}"))?
            .to_bytes();
        let mut tried = Vec::new();
        loop {
            let i = self
                .pool
                .pick(&tried)
                .expect("retries stop before every upstream is tried");
            tried.push(i);
            let in_flight = self.pool.begin(i);
            let mut attempt = Request::new(Either::Right(Full::new(kept.clone())));
            *attempt.method_mut() = head.method.clone();
            *attempt.uri_mut() = head.uri.clone();
            self.point_at(i, attempt.uri_mut());
            *attempt.headers_mut() = head.headers.clone();
            let sent = self.send(i, attempt, lanes).await;
            let untaken = match &sent {
                Ok(response) => response.status() == StatusCode::SERVICE_UNAVAILABLE,
                Err(e) => e.connecting,
            };
            if untaken && self.pool.may_retry(&tried) {
                self.pool.failed(i);
                let counts = &self.pool.upstreams[i].counts;
                counts.retried.fetch_add(1, Ordering::Relaxed);
                self.note_restart(i, named.as_ref(), "retried");
                continue;
            }
            return self.settle(i, sent, named.as_ref()).map(|r| (r, in_flight));
        }
    }

    /// One try at upstream `i`: on the caller connection's lane to it, or the pool's.
    async fn send(
        &self,
        i: usize,
        request: Request<UpstreamBody>,
        lanes: Option<&Lanes>,
    ) -> Result<Response<Incoming>, Unanswered> {
        match lanes {
            Some(lanes) => lanes.0[i].send(request).await.map_err(|e| Unanswered {
                connecting: matches!(e, crate::client::SendError::Connect(_)),
                message: chain_message(&e),
            }),
            None => self.client.request(request).await.map_err(|e| Unanswered {
                connecting: e.is_connect(),
                message: chain_message(&e),
            }),
        }
    }

    /// The pool told how upstream `i` did with a request's last try.
    fn settle(
        &self,
        i: usize,
        sent: Result<Response<Incoming>, Unanswered>,
        named: Option<&Named>,
    ) -> Result<Response<Incoming>, String> {
        let failed = match &sent {
            Ok(response) => is_gateway_failure(response.status().as_u16()),
            Err(_) => true,
        };
        if failed {
            self.pool.failed(i);
            self.note_restart(i, named, "failed");
        } else {
            self.pool.answered(i);
        }
        sent.map_err(|e| e.message)
    }

    /// A request that failed (or was resent) at a replica being restarted: the restart
    /// is logged as its fault, so its record says why.
    fn note_restart(&self, i: usize, named: Option<&Named>, how: &str) {
        let Some(named) = named.filter(|_| self.pool.is_restarting(i)) else {
            return;
        };
        let fault = format!("replica_restart_{how}");
        note(&self.log, &named.id(), format!("restart:{i}"), &fault, None);
    }

    /// Points `uri` (its path and query) at upstream `i`, built from parts: the
    /// scheme and authority are the upstream's, already parsed.
    fn point_at(&self, i: usize, uri: &mut Uri) {
        let upstream = &self.pool.upstreams[i];
        let path_and_query = if upstream.prefix.is_empty() {
            uri.path_and_query().cloned()
        } else {
            let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
            format!("{}{path_and_query}", upstream.prefix).parse().ok()
        };
        let mut parts = hyper::http::uri::Parts::default();
        parts.scheme = Some(upstream.scheme.clone());
        parts.authority = upstream.authority.clone();
        parts.path_and_query = path_and_query.or_else(|| Some(PathAndQuery::from_static("/")));
        if let Ok(pointed) = Uri::from_parts(parts) {
            *uri = pointed;
        }
    }

    /// Faults a request asks for in `x-redline-fault-*` headers (when allowed); the
    /// headers are removed either way, so they never reach the upstream.
    fn header_faults(&self, headers: &mut HeaderMap) -> Result<Vec<(String, Action)>, String> {
        let asked: Vec<(String, String)> = headers
            .iter()
            .filter_map(|(name, value)| {
                let fault = name.as_str().strip_prefix(HEADER_FAULT_PREFIX)?;
                Some((
                    fault.to_owned(),
                    value.to_str().unwrap_or_default().trim().to_owned(),
                ))
            })
            .collect();
        for (fault, _) in &asked {
            headers.remove(format!("{HEADER_FAULT_PREFIX}{fault}"));
        }
        if !self.allow_header_faults || asked.is_empty() {
            return Ok(Vec::new());
        }
        let number = |fault: &str, value: &str| {
            value
                .parse::<f64>()
                .ok()
                .filter(|n| *n >= 0.0 && n.is_finite())
                .ok_or_else(|| {
                    format!("{HEADER_FAULT_PREFIX}{fault}: `{value}` is not a number of 0 or more")
                })
        };
        let mut actions = Vec::new();
        for (fault, value) in asked {
            let action = match fault.as_str() {
                "delay-ms" => Action::Delay {
                    ms: number(&fault, &value)?,
                    at: DelayAt::Request,
                },
                "abort" => Action::Fixed(FixedFault::Abort(match value.as_str() {
                    "reset" => AbortHow::Reset,
                    "timeout" => AbortHow::Hang,
                    status => match status.parse::<u16>() {
                        Ok(code @ 100..=599) => AbortHow::Status(code, None),
                        _ => {
                            return Err(format!(
                                "{HEADER_FAULT_PREFIX}abort: `{value}` is not a status, `reset` or `timeout`"
                            ));
                        }
                    },
                })),
                "empty-result" => Action::Fixed(FixedFault::EmptyResult(EmptyTarget {
                    json_path: value.split('.').map(str::to_owned).collect(),
                    grpc_field: value.parse().unwrap_or(crate::grpc::qdrant::RESULT_FIELD),
                })),
                "stall-first-token-ms" => {
                    let hold = Duration::from_secs_f64(number(&fault, &value)? / 1e3);
                    Action::Fixed(FixedFault::StallFirstToken(hold))
                }
                "token-drip-ms" => {
                    let hold = Duration::from_secs_f64(number(&fault, &value)? / 1e3);
                    Action::Fixed(FixedFault::TokenDrip(hold))
                }
                "cut-stream" => Action::Fixed(FixedFault::CutStream {
                    after: number(&fault, &value)? as u32,
                    end: CutEnd::Plain,
                }),
                "corrupt-event" => {
                    let n = (number(&fault, &value)? as u32).max(1);
                    Action::Fixed(FixedFault::CorruptEvent(n))
                }
                "drop-done" => Action::Fixed(FixedFault::DropDone),
                other => {
                    return Err(format!(
                        "`{HEADER_FAULT_PREFIX}{other}` is not a fault header; use delay-ms, abort, empty-result, stall-first-token-ms, token-drip-ms, cut-stream, corrupt-event or drop-done"
                    ));
                }
            };
            self.counters.header_faults.fetch_add(1, Ordering::Relaxed);
            actions.push(("header".to_owned(), action));
        }
        Ok(actions)
    }
}

/// What a handler answers; an `Err` drops the connection or resets the stream.
type Answer = Result<Response<ProxyBody>, BoxError>;

/// A request as the fault log names it, owned (taken only when a fault fired).
#[derive(Default)]
struct Named {
    traceparent: Option<String>,
    method: String,
    path: String,
}

impl Named {
    fn of(head: &Parts) -> Named {
        Named {
            traceparent: head
                .headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            method: head.method.to_string(),
            path: head.uri.path().to_owned(),
        }
    }

    fn id(&self) -> RequestId<'_> {
        RequestId {
            traceparent: self.traceparent.as_deref(),
            method: &self.method,
            path: &self.path,
        }
    }
}

/// What the proxy will do to one request, gathered from every rule that fired.
#[derive(Default)]
struct Plan {
    /// Answer in the upstream's place: the rule and the status.
    answer: Option<(String, StatusAnswer)>,
    abort: Option<AbortHow>,
    request_delay: Duration,
    response_delay: Duration,
    empty_result: Option<(String, EmptyTarget)>,
    shaping: Shaping,
    /// The request is a gRPC call: the proxy's own answers are gRPC statuses.
    grpc: bool,
    /// Event faults, noted only when the response turns out to be an event stream.
    event_faults: Vec<(String, &'static str, Option<f64>)>,
    /// Faults noted so far (for the response header).
    noted: Vec<InjectedFault>,
    /// The id of the request's JSON-RPC message, when a rule read it.
    rpc_id: Option<Value>,
}

/// A status the proxy answers with itself.
enum StatusAnswer {
    Abort(u16, Option<String>),
    Grpc(tonic::Code, Option<String>),
    RateLimited(u64),
    /// A JSON-RPC error for the request's id.
    McpError {
        code: i64,
        message: Option<String>,
        id: Value,
    },
    /// A `tools/list` result of at least `bytes`, for the request's id.
    McpOversize {
        bytes: u64,
        id: Value,
    },
}

impl Plan {
    /// What happens before the upstream is asked: an answer in its place, a reset, a
    /// hang, or the request delay (then `None`: go on).
    async fn before_upstream(&mut self) -> Option<Answer> {
        if let Some((rule, status)) = self.answer.take() {
            return Some(Ok(fault_response(
                status,
                &rule,
                std::mem::take(&mut self.noted),
                self.grpc,
            )));
        }
        match self.abort {
            Some(AbortHow::Reset) => return Some(Err("reset by a chaos rule".into())),
            Some(AbortHow::Hang) => {
                tokio::time::sleep(LONGEST_HANG).await;
                return Some(Err("held past the longest hang".into()));
            }
            Some(AbortHow::Status(..) | AbortHow::Grpc(..)) | None => {}
        }
        if !self.request_delay.is_zero() {
            tokio::time::sleep(self.request_delay).await;
        }
        None
    }

    fn add(&mut self, log: &FaultLog, id: &RequestId<'_>, rule: String, action: Action) {
        let ms = |d: Duration| Some(d.as_secs_f64() * 1e3);
        match action {
            Action::Delay { ms: added, at } => {
                let delay = Duration::from_secs_f64(added / 1e3);
                match at {
                    DelayAt::Request => self.request_delay += delay,
                    DelayAt::Response => self.response_delay += delay,
                }
                self.noted.push(note(log, id, rule, "delay", Some(added)));
            }
            Action::Fixed(FixedFault::McpError(code, message)) => {
                if self.answer.is_some() || self.abort.is_some() {
                    return;
                }
                self.noted
                    .push(note(log, id, rule.clone(), "mcp_error", None));
                let id = self.rpc_id.clone().unwrap_or(Value::Null);
                self.answer = Some((rule, StatusAnswer::McpError { code, message, id }));
            }
            Action::Fixed(FixedFault::McpOversize(bytes)) => {
                if self.answer.is_some() || self.abort.is_some() {
                    return;
                }
                self.noted
                    .push(note(log, id, rule.clone(), "mcp_oversize", None));
                let id = self.rpc_id.clone().unwrap_or(Value::Null);
                self.answer = Some((rule, StatusAnswer::McpOversize { bytes, id }));
            }
            Action::Fixed(FixedFault::Abort(how)) => {
                if self.answer.is_some() || self.abort.is_some() {
                    return;
                }
                self.noted.push(note(log, id, rule.clone(), "abort", None));
                match how {
                    AbortHow::Status(status, body) => {
                        self.answer = Some((rule, StatusAnswer::Abort(status, body)));
                    }
                    AbortHow::Grpc(code, message) => {
                        self.answer = Some((rule, StatusAnswer::Grpc(code, message)));
                    }
                    how => self.abort = Some(how),
                }
            }
            Action::RateLimited { retry_after_s } => {
                if self.answer.is_some() || self.abort.is_some() {
                    return;
                }
                self.noted
                    .push(note(log, id, rule.clone(), "rate_limit", None));
                self.answer = Some((rule, StatusAnswer::RateLimited(retry_after_s)));
            }
            Action::Fixed(FixedFault::EmptyResult(path)) => {
                self.empty_result.get_or_insert((rule, path));
            }
            Action::Fixed(FixedFault::StallFirstToken(hold)) => {
                self.shaping.stall_first += hold;
                self.event_faults
                    .push((rule, "stall_first_token", ms(hold)));
            }
            Action::Fixed(FixedFault::TokenDrip(hold)) => {
                self.shaping.drip += hold;
                self.event_faults.push((rule, "token_drip", ms(hold)));
            }
            Action::Fixed(FixedFault::CutStream { after, end }) => {
                self.shaping.cut = Some((after, end));
                self.event_faults.push((rule, "cut_stream", None));
            }
            Action::Fixed(FixedFault::CorruptEvent(n)) => {
                self.shaping.corrupt = Some(n);
                self.event_faults.push((rule, "corrupt_event", None));
            }
            Action::Fixed(FixedFault::DropDone) => {
                self.shaping.drop_done = true;
                self.event_faults.push((rule, "drop_done", None));
            }
            Action::Fixed(FixedFault::Bandwidth(rate)) => {
                self.shaping.bandwidth = Some(rate);
                self.noted.push(note(log, id, rule, "bandwidth", None));
            }
            Action::Slice { max_bytes, seed } => {
                self.shaping.slice = Some((max_bytes, seed));
                self.noted.push(note(log, id, rule, "slice", None));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_result_empties_the_list_and_keeps_the_rest() {
        let body = br#"{"result":[{"id":1,"score":0.9}],"status":"ok","time":0.001}"#;
        let out = empty_list(body, &["result".into()]).unwrap();
        let json: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(json["result"], serde_json::json!([]));
        assert_eq!(json["status"], "ok");
        let nested = br#"{"hits":{"hits":[1,2],"total":2}}"#;
        let out = empty_list(nested, &["hits".into(), "hits".into()]).unwrap();
        assert_eq!(&out[..], br#"{"hits":{"hits":[],"total":2}}"#);
        assert!(empty_list(b"not json", &["result".into()]).is_none());
        assert!(empty_list(br#"{"result":5}"#, &["result".into()]).is_none());
        assert!(empty_list(br#"{"data":[]}"#, &["result".into()]).is_none());
    }

    #[test]
    fn hop_by_hop_headers_do_not_cross_the_proxy() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-hop"),
        );
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        headers.insert("x-end-to-end", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-end-to-end"]);
    }
}
