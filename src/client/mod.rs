//! Protocol clients. Each fills an outcome [`Record`] with timing
//! marks and a typed outcome.

pub mod http;
pub mod json;
pub mod openai;
pub mod sse;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::record::{InjectedFault, Record, Stage};

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

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

    pub fn at(&self, us: u64) -> Instant {
        self.start + Duration::from_micros(us)
    }
}

/// A keep-alive connection pool: HTTP/1.1, or HTTP/2 only (prior knowledge) when asked.
pub fn http_client(timeouts: &Timeouts, http2: bool) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(timeouts.connect));
    connector.set_keepalive(Some(Duration::from_secs(60)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(usize::MAX)
        .http2_only(http2)
        .build(connector)
}

/// Takes the faults a chaos proxy named in its `x-redline-fault` response header
/// (`rule=fault, …`) into the record.
pub fn note_faults(headers: &hyper::HeaderMap, record: &mut Record) {
    let Some(value) = headers
        .get(crate::record::FAULT_HEADER)
        .and_then(|v| v.to_str().ok())
    else {
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
                    Stage::Stream,
                    "timeout",
                    "body not complete before the total timeout",
                );
                return None;
            }
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                record.fail(
                    crate::record::Outcome::Error,
                    Stage::Stream,
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
                        Stage::Stream,
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
pub fn classify_send_error(
    error: &hyper_util::client::legacy::Error,
) -> (Stage, &'static str, String) {
    let io_kind = std::iter::successors(std::error::Error::source(error), |e| e.source())
        .find_map(|e| e.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    let message = std::iter::successors(Some(error as &dyn std::error::Error), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ");
    use std::io::ErrorKind::*;
    if error.is_connect() {
        let kind = match io_kind {
            Some(ConnectionRefused) => "connect_refused",
            Some(TimedOut) => "timeout",
            Some(ConnectionReset) => "reset",
            _ => "connect_error",
        };
        return (Stage::Connect, kind, message);
    }
    let kind = match io_kind {
        Some(ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof) => "reset",
        _ if message.contains("closed") || message.contains("incomplete") => "reset",
        _ => "io",
    };
    (Stage::Send, kind, message)
}
