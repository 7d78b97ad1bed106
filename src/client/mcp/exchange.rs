//! One JSON-RPC exchange over Streamable HTTP: a POST whose answer is one JSON message
//! or an SSE stream of messages ending with the response, read on the one send path
//! with its timing marks. Every way an answer can be wrong is a typed failure.

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ClientRequest, RequestId};
use serde_json::Value;

use super::HttpSession;
use super::wire::{Deadlines, Message, SESSION, parse, post, settle};
use crate::client::{HttpClient, RunClock};
use crate::record::{FailStage, McpMark, Outcome, Record};

/// What an exchange came to, when it did not fail the record.
pub(super) enum Answer {
    /// The response's `result`, and the session id the answer named.
    Result(Value, Option<HeaderValue>),
    /// A 404 on the session's id: the server no longer knows the session.
    SessionGone,
}

/// Sends `request` as JSON-RPC id `id` on `session` and reads its answer: the
/// result, or a typed failure in `record` (then `None`).
pub(super) async fn request(
    http: &HttpClient,
    session: &HttpSession,
    max_bytes: usize,
    (id, request): (i64, ClientRequest),
    traceparent: &str,
    deadlines: Deadlines,
    (clock, record, mark): (RunClock, &mut Record, &mut McpMark),
) -> Option<Answer> {
    let message = ClientJsonRpcMessage::request(request, RequestId::Number(id));
    let body = serde_json::to_vec(&message).expect("an MCP request serialises");
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    let first = deadlines.total.min(sent + deadlines.first);
    let post = post(session, body, traceparent);
    let timeout = "no answer head before the deadline";
    let response = crate::client::send_until(http, post, first, timeout, clock, record).await?;
    let status = response.status().as_u16();
    if status == 404 && session.id.is_some() {
        return Some(Answer::SessionGone);
    }
    if !(200..300).contains(&status) {
        let kind = crate::client::status_kind(status);
        let preview = preview(response.into_body(), deadlines.total).await;
        record.fail(
            Outcome::Error,
            FailStage::FirstByte,
            kind,
            format!("HTTP {status}: {preview}"),
        );
        return None;
    }
    if let Some(changed) = changed_session(session, response.headers()) {
        record.fail(
            Outcome::Error,
            FailStage::Decode,
            "mcp/session_changed",
            changed,
        );
        return None;
    }
    let named = response.headers().get(SESSION).cloned();
    let answer = match content_type(response.headers()).as_str() {
        "application/json" => {
            let body = crate::client::read_body(
                response.into_body(),
                deadlines.total,
                max_bytes,
                true,
                clock,
                record,
            )
            .await?;
            one_message(&body, id, record)
        }
        "text/event-stream" => {
            let on = super::stream::Resumable {
                http,
                session,
                traceparent,
                max_bytes,
            };
            super::stream::read(
                response.into_body(),
                id,
                on,
                deadlines,
                (clock, record, mark),
            )
            .await
        }
        other => {
            let message = format!(
                "not an MCP answer: content-type `{other}`, not application/json or text/event-stream"
            );
            record.fail(Outcome::Error, FailStage::Decode, "mcp/not_mcp", message);
            None
        }
    };
    answer.map(|result| Answer::Result(result, named))
}

/// Sends a notification on `session`; the server answers 202 with no body. A
/// notification has no answer to wait for, so a status other than 2xx is not the
/// call's failure (some stateless servers refuse `notifications/initialized`); a
/// notification that could not be sent, or not in time, is.
pub(super) async fn notify(
    http: &HttpClient,
    session: &HttpSession,
    notification: ClientNotification,
    traceparent: &str,
    deadline: Instant,
    (clock, record): (RunClock, &mut Record),
) -> Option<()> {
    let message = ClientJsonRpcMessage::notification(notification);
    let body = serde_json::to_vec(&message).expect("an MCP notification serialises");
    let post = post(session, body, traceparent);
    let timeout = "no answer to a notification before the deadline";
    let response = crate::client::send_until(http, post, deadline, timeout, clock, record).await?;
    crate::client::read_body(
        response.into_body(),
        deadline,
        64 << 10,
        false,
        clock,
        record,
    )
    .await
    .map(drop)
}

/// The media type of an answer, lower-case, without parameters.
fn content_type(headers: &hyper::HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map_or_else(|| "none".to_owned(), |v| v.trim().to_ascii_lowercase())
}

/// Why the answer's session id is not the session's, if it is not: the id is the
/// server's to give once, at `initialize`.
fn changed_session(session: &HttpSession, headers: &hyper::HeaderMap) -> Option<String> {
    let ours = session.id.as_ref()?;
    let theirs = headers.get(SESSION)?;
    (theirs != ours).then(|| {
        format!(
            "the answer names session `{}`, not this call's `{}`: a session id is given once, by initialize",
            String::from_utf8_lossy(theirs.as_bytes()),
            String::from_utf8_lossy(ours.as_bytes())
        )
    })
}

/// A JSON answer: exactly the response to `id`.
fn one_message(body: &[u8], id: i64, record: &mut Record) -> Option<Value> {
    match parse(body) {
        Ok(Message::Response(response)) => settle(Ok(response), id, record),
        Ok(Message::Error(error)) => settle(Err(error), id, record),
        Ok(Message::Request(_) | Message::Notification(_)) => {
            let message = "a JSON answer holds a request or notification, not the response";
            record.fail(Outcome::Error, FailStage::Decode, "mcp/not_mcp", message);
            None
        }
        Err((kind, message)) => {
            record.fail(Outcome::Error, FailStage::Decode, kind, message);
            None
        }
    }
}

/// The start of an error answer's body, for its message (at most 200 bytes read
/// within a second).
async fn preview(body: hyper::body::Incoming, deadline: Instant) -> String {
    let deadline = deadline.min(Instant::now() + Duration::from_secs(1));
    let limited = http_body_util::Limited::new(body, 64 << 10);
    match tokio::time::timeout_at(deadline.into(), limited.collect()).await {
        Ok(Ok(collected)) => {
            let bytes = collected.to_bytes();
            crate::record::cut_to(String::from_utf8_lossy(&bytes).trim(), 200)
        }
        _ => "(no body)".to_owned(),
    }
}
