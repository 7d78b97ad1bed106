//! JSON calls of flow steps (embeddings, vector search, tools, any HTTP step): one
//! request, timed into the record, its answer parsed as JSON. A non-2xx status, a body
//! that is not JSON, a timeout or a broken connection each become a typed failure.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use serde_json::Value;

use super::{HttpClient, RunClock};
use crate::record::{FailStage, Outcome, Record};

/// What a JSON call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonAnswer {
    pub status: u16,
    pub json: Value,
}

/// Sends `request`, giving it `timeout` from send to last byte; fills the record's
/// marks and, on failure, its outcome. Returns the answer when it is a 2xx JSON body
/// (or, with `expect_status`, that status).
pub async fn call(
    http: &HttpClient,
    request: Request<Full<Bytes>>,
    timeout: Duration,
    expect_status: Option<u16>,
    max_bytes: usize,
    clock: RunClock,
    record: &mut Record,
) -> Option<JsonAnswer> {
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    let deadline = sent + timeout;
    let timeout = format!("no answer within {timeout:?}");
    let response = super::send_until(http, request, deadline, &timeout, clock, record).await?;
    let status = response.status().as_u16();
    let bytes = super::read_body(
        response.into_body(),
        deadline,
        max_bytes,
        true,
        clock,
        record,
    )
    .await?;
    let good = match expect_status {
        Some(expected) => status == expected,
        None => (200..300).contains(&status),
    };
    if !good {
        let kind = super::status_kind(status);
        record.fail(
            Outcome::Error,
            FailStage::FirstByte,
            kind,
            format!("HTTP {status}: {}", preview(&bytes)),
        );
        return None;
    }
    match serde_json::from_slice(&bytes) {
        Ok(json) => Some(JsonAnswer { status, json }),
        Err(error) => {
            record.fail(
                Outcome::Error,
                FailStage::Decode,
                "invalid_json",
                format!("answer is not JSON ({error}): {}", preview(&bytes)),
            );
            None
        }
    }
}

fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
    text.replace('\n', " ")
}
