//! The plain HTTP client: any method, path, headers and body, with the expected status
//! checked. The same scheduler, records and metrics as the LLM client (no tokens).

use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};

use super::{HttpClient, RunClock, Timeouts};
use crate::record::{FailStage, Outcome, Record};

/// Everything one request needs; the same for every request of a run.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    pub uri: Uri,
    pub method: Method,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    /// The status a good answer has; any 2xx when `None`.
    pub expect_status: Option<u16>,
    pub timeouts: Timeouts,
    /// Largest response body read, in bytes.
    pub max_response_bytes: usize,
}

impl HttpTarget {
    /// Built part by part rather than with `Request::builder`, which checks again
    /// what was validated once (2,200 instructions a request under callgrind; 1,400 so).
    fn request(&self, traceparent: &str) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.reserve(self.headers.len() + 2); // and the `host` hyper adds
        let traceparent =
            HeaderValue::from_str(traceparent).expect("a traceparent is hex digits and dashes");
        headers.insert(TRACEPARENT, traceparent);
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        request
    }
}

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Sends one request and fills `record` with what happened.
pub async fn call(
    http: &HttpClient,
    target: &HttpTarget,
    traceparent: &str,
    clock: RunClock,
    record: &mut Record,
) {
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    let deadline = sent + target.timeouts.total;
    let first_deadline = deadline.min(sent + target.timeouts.first_token);
    let request = target.request(traceparent);
    let timeout = "no response headers before the deadline";
    let Some(response) =
        super::send_until(http, request, first_deadline, timeout, clock, record).await
    else {
        return;
    };
    let status = response.status().as_u16();
    let read = super::read_body(
        response.into_body(),
        deadline,
        target.max_response_bytes,
        false,
        clock,
        record,
    );
    if read.await.is_none() {
        return;
    }
    let good = match target.expect_status {
        Some(expected) => status == expected,
        None => (200..300).contains(&status),
    };
    if !good {
        let kind = super::status_kind(status);
        let expected = target
            .expect_status
            .map_or("a 2xx status".to_owned(), |s| format!("status {s}"));
        record.fail(
            Outcome::Error,
            FailStage::FirstByte,
            kind,
            format!("HTTP {status}, expected {expected}"),
        );
    }
}
