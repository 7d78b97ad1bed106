//! Protocol clients. Each fills an outcome [`Record`] with timing
//! marks and a typed outcome.

pub mod anthropic;
pub mod dialect;
pub mod grpc;
pub mod http;
pub mod json;
pub mod kserve_grpc;
pub mod lane;
pub mod mcp;
pub mod media;
pub mod ndjson;
pub mod openai;
pub mod order;
pub mod piece;
pub mod realtime;
pub mod responses;
pub mod search;
pub mod sse;
pub mod tls;
pub mod server_tokenizer;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::record::{FailStage, InjectedFault, Outcome, Record};
use hyper::Uri;
use tls::{Alpn, Connector, TlsSettings};

/// A keep-alive pool of connections, plain or TLS, and what its last failed connection
/// attempt said (see [`send`]); or, for one closed-loop slot, a connection of its own.
#[derive(Clone)]
pub struct HttpClient {
    pool: Client<Connector, Full<Bytes>>,
    failures: tls::FailureMemo,
    connector: Connector,
    http2: bool,
    lane: Option<std::sync::Arc<lane::Lane>>,
}

impl HttpClient {
    /// A new connection of its own to `uri`'s origin, with this client's TLS settings
    /// and the times it took: for a protocol that takes the connection over (a
    /// WebSocket).
    pub async fn connect(&self, uri: Uri) -> Result<tls::Conn, tls::ConnectError> {
        use tower_service::Service;
        self.connector.clone().call(uri).await
    }

    /// Whether [`for_one_at_a_time`](Self::for_one_at_a_time) gives a connection of its
    /// own (HTTP/1.1) rather than the shared pool.
    pub fn sends_on_lanes(&self) -> bool {
        !self.http2
    }

    /// This client for a caller that sends one request at a time (a closed-loop slot):
    /// over HTTP/1.1 with a connection of its own ([`lane`]), over HTTP/2 the shared
    /// pool, whose connections already carry many requests at once.
    pub fn for_one_at_a_time(&self) -> HttpClient {
        let lane =
            (!self.http2).then(|| std::sync::Arc::new(lane::Lane::new(self.connector.clone())));
        HttpClient {
            lane,
            ..self.clone()
        }
    }
}

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Client(#[from] hyper_util::client::legacy::Error),
    /// It waited for an HTTP/2 connection another request was opening, and that
    /// attempt failed like this.
    #[error("waited for a connection that could not be opened: {message}")]
    SharedConnect { kind: &'static str, message: String },
    /// Its new connection was closed by a TLS alert before the request could go out.
    #[error("TLS failed: {0}")]
    ClosedByTls(String),
    /// A lane's connection could not be opened.
    #[error(transparent)]
    Connect(#[from] tls::ConnectError),
    /// A lane's connection failed while sending or waiting for the answer.
    #[error(transparent)]
    Http(hyper::Error),
    /// A lane's new connection closed before the request could go out.
    #[error("the connection closed before the request could be sent")]
    ClosedBeforeSending,
    /// The request's URI names no host to connect to.
    #[error("the request's URI has no host")]
    NoAuthority,
}

/// Client-side time limits of one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    pub connect: Duration,
    /// Send to the first content token (streaming) or to the response (not streaming).
    pub first_token: Duration,
    /// Longest silence between two stream frames once tokens flow.
    pub between_tokens: Duration,
    /// Send to the last byte.
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            first_token: Duration::from_secs(60),
            between_tokens: Duration::from_secs(30),
            total: Duration::from_secs(600),
        }
    }
}

/// Microseconds since the run started: the time base of every record.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    start: Instant,
}

impl RunClock {
    pub fn new(start: Instant) -> Self {
        RunClock { start }
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    pub fn us(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_micros() as u64
    }

    pub fn now_us(&self) -> u64 {
        self.us(Instant::now())
    }

    /// Now on tokio's clock, which a test can pause: for what runs on the runtime's
    /// timers (SLO windows, the feedback controller). Requests stamp their records
    /// with [`RunClock::now_us`], which reads the OS clock without a lookup.
    pub fn timer_now_us(&self) -> u64 {
        self.us(tokio::time::Instant::now().into_std())
    }

    pub fn at(&self, us: u64) -> Instant {
        self.start + Duration::from_micros(us)
    }
}

/// A keep-alive connection pool: HTTP/1.1, or HTTP/2 only when asked (negotiated
/// by ALPN over https, prior knowledge over http); https with the system's roots.
pub fn http_client(timeouts: &Timeouts, http2: bool) -> HttpClient {
    http_client_with(timeouts, http2, None)
}

/// [`http_client`] with a service's own TLS settings (private CA, client
/// certificate, no verification).
pub fn http_client_with(timeouts: &Timeouts, http2: bool, tls: Option<&TlsSettings>) -> HttpClient {
    let alpn = if http2 { Alpn::Http2 } else { Alpn::Http1 };
    let connector = Connector::new(timeouts.connect, tls, alpn);
    let failures = connector.failures();
    let pool = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(usize::MAX)
        .http2_only(http2)
        .build(connector.clone());
    HttpClient {
        pool,
        failures,
        connector,
        http2,
        lane: None,
    }
}

/// Sends a request on the pool. A request that waited for an HTTP/2 connection
/// another request was opening comes back from hyper's pool as "canceled" when that
/// attempt failed, with the reason lost; the connector remembers it, so the request
/// gets the real reason (an unknown issuer, a refused port) instead. Likewise a TLS 1.3
/// server that rejects the client's certificate does so just after the handshake: when
/// its alert closes the new connection before the request is written, hyper says only
/// "connection was not ready", and the alert the connection read is the reason.
pub async fn send(
    http: &HttpClient,
    request: hyper::Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, SendError> {
    if let Some(lane) = &http.lane {
        return lane.send(request).await;
    }
    let asked = Instant::now();
    match http.pool.request(request).await {
        Err(error) if canceled_before_sending(&error) => match http.failures.last() {
            Some((kind, message)) => Err(SendError::SharedConnect { kind, message }),
            None => Err(error.into()),
        },
        Err(error) if closed_before_sending(&error) => match http.failures.alert_since(asked) {
            Some(reason) => Err(SendError::ClosedByTls(reason)),
            None => Err(error.into()),
        },
        done => Ok(done?),
    }
}

/// The connection hyper handed the request to had closed before it was written.
fn closed_before_sending(error: &hyper_util::client::legacy::Error) -> bool {
    std::iter::successors(std::error::Error::source(error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<hyper::Error>())
        .any(hyper::Error::is_canceled)
}

/// hyper-util's pool names no type for it: its message is all there is.
fn canceled_before_sending(error: &hyper_util::client::legacy::Error) -> bool {
    error.is_connect()
        && std::iter::successors(std::error::Error::source(error), |e| e.source())
            .any(|e| e.to_string() == "request was canceled")
}

/// Sends a request and reads its answer (up to 4 MiB) on the one send path, for calls
/// that are not load (a ready check, an agent's model, a webhook): a refused port, a
/// reset, a TLS failure or the deadline come back as the record's typed message.
pub async fn exchange(
    http: &HttpClient,
    request: hyper::Request<Full<Bytes>>,
    deadline: Instant,
) -> Result<(u16, String), String> {
    let clock = RunClock::new(Instant::now());
    let mut record = Record::unsent(0, 0, crate::record::Phase::Measure, 0);
    let failed = |record: &Record| {
        record.error.as_ref().map_or_else(
            || "no answer".to_owned(),
            |e| format!("{}: {}", e.kind, e.message),
        )
    };
    let Some(response) = send_until(
        http,
        request,
        deadline,
        "no answer in time",
        clock,
        &mut record,
    )
    .await
    else {
        return Err(failed(&record));
    };
    let status = response.status().as_u16();
    let body = read_body(
        response.into_body(),
        deadline,
        4 << 20,
        true,
        clock,
        &mut record,
    )
    .await
    .ok_or_else(|| failed(&record))?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The one send path of every client: sends `request` and waits for the response
/// head until `deadline`; notes in `record` when it came, over which connection, what
/// a chaos proxy injected and the status. A timeout (`timeout` says what did not come)
/// or a send error is recorded as a typed failure, and then there is no response.
pub async fn send_until(
    http: &HttpClient,
    request: hyper::Request<Full<Bytes>>,
    deadline: Instant,
    timeout: &str,
    clock: RunClock,
    record: &mut Record,
) -> Option<hyper::Response<hyper::body::Incoming>> {
    let response = match tokio::time::timeout_at(deadline.into(), send(http, request)).await {
        Err(_) => {
            record.fail(Outcome::Timeout, FailStage::FirstByte, "timeout", timeout);
            return None;
        }
        Ok(Err(error)) => {
            let (stage, kind, message) = classify_send_error(&error);
            record.fail(Outcome::Error, stage, kind, message);
            return None;
        }
        Ok(Ok(response)) => response,
    };
    record.headers_us = Some(clock.now_us());
    note_connection(&response, record);
    note_faults(response.headers(), record);
    record.status = Some(response.status().as_u16());
    if let Some(encoding) = unasked_encoding(&response) {
        let message = format!(
            "the answer came with content-encoding: {encoding}, which redline never asks for; \
             it is not decompressed (a compression bomb must cost the client nothing)"
        );
        record.fail(
            Outcome::Error,
            FailStage::Decode,
            "unexpected_encoding",
            message,
        );
        return None;
    }
    Some(response)
}

/// A successful answer's content coding, when it is not the identity: redline sends
/// no `accept-encoding`, so a server that compresses anyway is misbehaving. (An error
/// status keeps its own kind; its body is only previewed.)
fn unasked_encoding(response: &hyper::Response<hyper::body::Incoming>) -> Option<String> {
    if !response.status().is_success() {
        return None;
    }
    let encoding = response.headers().get(hyper::header::CONTENT_ENCODING)?;
    let encoding = String::from_utf8_lossy(encoding.as_bytes())
        .trim()
        .to_owned();
    (!encoding.eq_ignore_ascii_case("identity")).then_some(encoding)
}

/// Takes the TCP-connect and TLS-handshake times into the record when the response
/// is the first its connection carried.
pub fn note_connection(response: &hyper::Response<hyper::body::Incoming>, record: &mut Record) {
    if let Some(times) = tls::ConnectionTimes::of_new_connection(response) {
        record.connect_us = Some(times.connect_us);
        record.tls_us = times.tls_us;
    }
}

/// Takes the faults a chaos proxy named in its `x-redline-fault` response header
/// (`rule=fault, …`) into the record.
pub fn note_faults(headers: &hyper::HeaderMap, record: &mut Record) {
    // A `HeaderName` made once: a `&str` key is parsed and hashed again on every look-up.
    const FAULT: hyper::header::HeaderName =
        hyper::header::HeaderName::from_static(crate::record::FAULT_HEADER);
    let Some(value) = headers.get(FAULT).and_then(|v| v.to_str().ok()) else {
        return;
    };
    record.faults = value
        .split(',')
        .filter_map(|pair| pair.trim().split_once('='))
        .map(|(rule, fault)| InjectedFault {
            rule: rule.to_owned(),
            fault: fault.to_owned(),
            added_ms: None,
        })
        .collect();
}

/// Reads a whole response body before `deadline`, marking the first and last byte;
/// keeps the bytes when `keep` (else only counts them). A timeout, a broken body or
/// one over `max_bytes` fails the record and gives `None`.
pub async fn read_body(
    mut body: hyper::body::Incoming,
    deadline: Instant,
    max_bytes: usize,
    keep: bool,
    clock: RunClock,
    record: &mut Record,
) -> Option<Vec<u8>> {
    use http_body_util::BodyExt;
    let mut bytes = Vec::new();
    let mut size = 0usize;
    loop {
        match tokio::time::timeout_at(deadline.into(), body.frame()).await {
            Err(_) => {
                record.fail(
                    crate::record::Outcome::Timeout,
                    FailStage::Stream,
                    "timeout",
                    "body not complete before the total timeout",
                );
                return None;
            }
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                record.fail(
                    crate::record::Outcome::Error,
                    FailStage::Stream,
                    "reset",
                    format!("body broken: {error}"),
                );
                return None;
            }
            Ok(Some(Ok(frame))) => {
                if record.first_byte_us.is_none() {
                    record.first_byte_us = Some(clock.now_us());
                }
                let data = frame.data_ref().map_or(&[][..], |d| &d[..]);
                size += data.len();
                if size > max_bytes {
                    record.fail(
                        crate::record::Outcome::Error,
                        FailStage::Stream,
                        "too_large",
                        format!("response larger than {max_bytes} bytes"),
                    );
                    return None;
                }
                if keep {
                    bytes.extend_from_slice(data);
                }
            }
        }
    }
    record.last_byte_us = Some(clock.now_us());
    Some(bytes)
}

/// The failure kind of an unexpected status.
pub fn status_kind(status: u16) -> &'static str {
    match status {
        429 => "http_429",
        500..=599 => "http_5xx",
        400..=499 => "http_4xx",
        _ => "unexpected_status",
    }
}

/// Names a failure to get a response: stage, kind and message.
pub fn classify_send_error(error: &SendError) -> (FailStage, &'static str, String) {
    match error {
        SendError::SharedConnect { kind, .. } => (FailStage::Connect, kind, error.to_string()),
        SendError::ClosedByTls(_) => (FailStage::Connect, "tls", error.to_string()),
        SendError::Connect(connect) => (FailStage::Connect, connect.kind(), chain_message(error)),
        SendError::ClosedBeforeSending => (FailStage::Send, "reset", error.to_string()),
        SendError::NoAuthority => (FailStage::Client, "invalid_request", error.to_string()),
        SendError::Http(http) => classify_chain(http, false),
        SendError::Client(client) => classify_chain(client, client.is_connect()),
    }
}

/// An error and its sources, outermost first.
fn chain<'e>(
    error: &'e (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'e (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| e.source())
}

/// Every message of an error's chain, joined.
pub fn chain_message(error: &(dyn std::error::Error + 'static)) -> String {
    chain(error)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// An HTTP/2 protocol violation this client's own h2 detected in what it read.
fn h2_protocol_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e h2::Error> {
    use h2::Reason;
    let h2 = error.downcast_ref::<h2::Error>()?;
    let broken = [
        Reason::PROTOCOL_ERROR,
        Reason::FRAME_SIZE_ERROR,
        Reason::COMPRESSION_ERROR,
    ];
    (h2.is_library() && h2.reason().is_some_and(|r| broken.contains(&r))).then_some(h2)
}

/// Names a pool's or a connection's error by what its chain holds; `connecting` when
/// no connection was made.
fn classify_chain(
    error: &(dyn std::error::Error + 'static),
    connecting: bool,
) -> (FailStage, &'static str, String) {
    let invalid = chain(error)
        .filter_map(|e| e.downcast_ref::<hyper::Error>())
        .find(|e| e.is_parse() || e.is_parse_too_large() || e.is_parse_status());
    if let Some(parse) = invalid {
        let message = format!("the answer is not valid HTTP: {parse}");
        return (FailStage::FirstByte, "invalid_http", message);
    }
    if let Some(broken) = chain(error).find_map(h2_protocol_error) {
        // An HTTP/1.1 server's answer to the HTTP/2 preface reads as a frame of an
        // impossible size: the usual cause.
        let message = format!(
            "the answer is not valid HTTP/2 (a server that speaks only HTTP/1.1?): {broken}"
        );
        return (FailStage::FirstByte, "invalid_http", message);
    }
    let io_kind = chain(error)
        .find_map(|e| e.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    let message = chain_message(error);
    use std::io::ErrorKind::*;
    let ours = chain(error).find_map(|e| e.downcast_ref::<tls::ConnectError>());
    if let Some(connect) = ours.filter(|e| !matches!(e, tls::ConnectError::Tcp(_))) {
        return (FailStage::Connect, connect.kind(), connect.to_string());
    }
    if let Some(reason) = tls::tls_failure_in(error) {
        return (FailStage::Connect, "tls", format!("TLS failed: {reason}"));
    }
    if connecting {
        let kind = match io_kind {
            Some(ConnectionRefused) => "connect_refused",
            Some(TimedOut) => "timeout",
            Some(ConnectionReset) => "reset",
            _ => "connect_error",
        };
        return (FailStage::Connect, kind, message);
    }
    // An HTTP/2 stream the server reset before this client read its head: h2 drops
    // what was queued for the stream, the head too.
    let reset_stream = chain(error)
        .filter_map(|e| e.downcast_ref::<h2::Error>())
        .any(|e| e.is_reset() && e.is_remote());
    let kind = match io_kind {
        _ if reset_stream => "reset",
        Some(ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof) => "reset",
        _ if message.contains("closed") || message.contains("incomplete") => "reset",
        _ => "io",
    };
    (FailStage::Send, kind, message)
}
