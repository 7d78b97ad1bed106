//! An SSE answer read to its response: notifications (progress counted), requests of
//! the server's (answered by a POST: `ping`, or "method not found"), then the
//! response to the call's id. A stream that ends or breaks before the response is resumed, as the transport
//! allows: a GET with `Last-Event-ID` after the `retry` the stream asked for, up to
//! [`MAX_RESUMES`] times; a server that cannot resume leaves the call cut.

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::Method;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::RequestId;
use serde_json::Value;

use super::HttpSession;
use super::wire::{Deadlines, Message, answer_server, on_session, parse, settle};
use crate::client::sse::SseDecoder;
use crate::client::{HttpClient, RunClock};
use crate::record::{FailStage, McpMark, Outcome, Record};

/// Resumptions of one answer at most: a server that cuts every stream costs a
/// bounded number of requests.
pub const MAX_RESUMES: u32 = 3;

const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// What a resumption needs: where the answer came from, on which session.
pub(super) struct Resumable<'a> {
    pub http: &'a HttpClient,
    pub session: &'a HttpSession,
    pub traceparent: &'a str,
    /// Largest answer read, in bytes, its events together.
    pub max_bytes: usize,
}

/// The result of the response to `id` in the stream `body`, or a typed failure.
pub(super) async fn read(
    mut body: hyper::body::Incoming,
    id: i64,
    on: Resumable<'_>,
    deadlines: Deadlines,
    (clock, record, mark): (RunClock, &mut Record, &mut McpMark),
) -> Option<Value> {
    let max_bytes = on.max_bytes;
    let mut decoder = SseDecoder::new(max_bytes);
    let (mut received, mut events) = (0usize, 0u32);
    // The last event ID and retry of every stream read so far.
    let (mut last_id, mut retry_ms) = (None::<String>, None::<u64>);
    loop {
        let wait = deadlines.total.min(Instant::now() + deadlines.between);
        let ended = match tokio::time::timeout_at(wait.into(), body.frame()).await {
            Err(_) => {
                let message = format!(
                    "no result before the deadline ({events} events, {} progress notifications)",
                    mark.progress
                );
                let stage = match record.first_byte_us {
                    Some(_) => FailStage::Stream,
                    None => FailStage::FirstByte,
                };
                record.fail(Outcome::Timeout, stage, "timeout", message);
                return None;
            }
            Ok(None) => Ended::Cut(format!(
                "the event stream ended without the result ({events} events)"
            )),
            Ok(Some(Err(error))) => Ended::Broken(format!(
                "event stream broken after {events} events: {error}"
            )),
            Ok(Some(Ok(frame))) => {
                let Some(data) = frame.data_ref() else {
                    continue;
                };
                if record.first_byte_us.is_none() {
                    record.first_byte_us = Some(clock.now_us());
                }
                received += data.len();
                if received > max_bytes {
                    let message = format!("answer larger than {max_bytes} bytes");
                    record.fail(Outcome::Error, FailStage::Stream, "too_large", message);
                    return None;
                }
                decoder.feed(data);
                let mut asked = Vec::new();
                let read = events_of(
                    &mut decoder,
                    id,
                    (clock, record, mark),
                    &mut events,
                    &mut asked,
                );
                for (asked_id, method) in asked {
                    answer_server(
                        on.http,
                        on.session,
                        on.traceparent,
                        (asked_id, &method),
                        deadlines.total,
                    )
                    .await;
                }
                last_id = decoder.last_event_id().map(str::to_owned).or(last_id);
                retry_ms = decoder.retry_ms().or(retry_ms);
                match read {
                    Read::More => continue,
                    Read::Done(result) => return result,
                }
            }
        };
        match last_id.as_deref() {
            Some(from) if mark.resumed < MAX_RESUMES => {
                match resume(&on, from, retry_ms, deadlines.total).await {
                    Ok(next) => {
                        mark.resumed += 1;
                        body = next;
                        decoder = SseDecoder::new(max_bytes);
                    }
                    Err(why) => {
                        ended.fail(record, &format!("; resuming from event `{from}`: {why}"));
                        return None;
                    }
                }
            }
            _ => {
                ended.fail(record, "");
                return None;
            }
        }
    }
}

/// How a stream ended before its response.
enum Ended {
    /// It just ended.
    Cut(String),
    /// Its body broke (a reset).
    Broken(String),
}

impl Ended {
    fn fail(self, record: &mut Record, more: &str) {
        match self {
            Ended::Cut(message) => record.fail(
                Outcome::Error,
                FailStage::Stream,
                "mcp/no_result",
                format!("{message}{more}"),
            ),
            Ended::Broken(message) => record.fail(
                Outcome::Error,
                FailStage::Stream,
                "reset",
                format!("{message}{more}"),
            ),
        }
    }
}

/// What the events fed so far came to.
enum Read {
    /// No response yet.
    More,
    /// The response (its result, or `None` when it failed the record), or a failure.
    Done(Option<Value>),
}

/// Takes the complete events out of `decoder`.
fn events_of(
    decoder: &mut SseDecoder,
    id: i64,
    (clock, record, mark): (RunClock, &mut Record, &mut McpMark),
    events: &mut u32,
    asked: &mut Vec<(RequestId, String)>,
) -> Read {
    while let Some(event) = decoder.next_event() {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                record.fail(
                    Outcome::Error,
                    FailStage::Decode,
                    "invalid_sse",
                    error.to_string(),
                );
                return Read::Done(None);
            }
        };
        *events += 1;
        // A priming event (an id, no data) lets a client resume; it carries no message.
        if event.data.is_empty() {
            continue;
        }
        let reply = match parse(event.data.as_bytes()) {
            Ok(Message::Notification(note)) => {
                if note.notification.method == "notifications/progress" {
                    mark.progress = mark.progress.saturating_add(1);
                }
                continue;
            }
            // A request of the server's: answered once the events in hand are read.
            Ok(Message::Request(request)) => {
                asked.push((request.id, request.request.method));
                continue;
            }
            Ok(Message::Response(response)) => Ok(response),
            Ok(Message::Error(error)) => Err(error),
            Err((kind, message)) => {
                record.fail(Outcome::Error, FailStage::Decode, kind, message);
                return Read::Done(None);
            }
        };
        let result = settle(reply, id, record);
        record.last_byte_us = Some(clock.now_us());
        return Read::Done(result);
    }
    Read::More
}

/// A GET for the rest of the stream after event `from`, once `retry_ms` has passed
/// (capped by the deadline): its body, or why the server did not give it.
async fn resume(
    on: &Resumable<'_>,
    from: &str,
    retry_ms: Option<u64>,
    deadline: Instant,
) -> Result<hyper::body::Incoming, String> {
    if let Some(ms) = retry_ms {
        let at = deadline.min(Instant::now() + Duration::from_millis(ms));
        tokio::time::sleep_until(at.into()).await;
    }
    let last = HeaderValue::from_str(from).map_err(|_| "its id is not a header value")?;
    let mut request = on_session(on.session, Method::GET, bytes::Bytes::new(), on.traceparent);
    let headers = request.headers_mut();
    headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    headers.insert(LAST_EVENT_ID, last);
    let sent = tokio::time::timeout_at(deadline.into(), crate::client::send(on.http, request));
    let response = match sent.await {
        Err(_) => return Err("no answer before the deadline".into()),
        Ok(Err(error)) => return Err(crate::client::chain_message(&error)),
        Ok(Ok(response)) => response,
    };
    let streams = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    match response.status().as_u16() {
        200 if streams => Ok(response.into_body()),
        status => Err(format!("HTTP {status}")),
    }
}
