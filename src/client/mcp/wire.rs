//! What both halves of an exchange share: the transport's headers, a call's
//! deadlines, and JSON-RPC messages parsed and settled against the call's id.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, Request};
use rmcp::model::{ClientJsonRpcMessage, ClientResult, ErrorCode, ErrorData, RequestId};
use serde_json::Value;

use super::HttpSession;
use crate::client::HttpClient;
use crate::record::{FailStage, Outcome, Record};

pub(super) const SESSION: HeaderName = HeaderName::from_static("mcp-session-id");
pub(super) const VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
pub(super) const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The deadlines of one exchange.
#[derive(Clone, Copy)]
pub(super) struct Deadlines {
    /// The whole call's end.
    pub total: Instant,
    /// Send to the answer's head.
    pub first: Duration,
    /// Longest silence between two events of an SSE answer.
    pub between: Duration,
}

/// A POST of `body` with the session's headers.
pub(super) fn post(
    session: &HttpSession,
    body: Vec<u8>,
    traceparent: &str,
) -> Request<Full<Bytes>> {
    let mut request = on_session(session, Method::POST, Bytes::from(body), traceparent);
    let headers = request.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    request
}

/// A request to the session's endpoint with what every request of the session
/// carries: its id and protocol version, the service's headers, and the trace's
/// `traceparent` (none when empty).
pub(super) fn on_session(
    session: &HttpSession,
    method: Method,
    body: Bytes,
    traceparent: &str,
) -> Request<Full<Bytes>> {
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = method;
    *request.uri_mut() = session.endpoint.uri.clone();
    let headers = request.headers_mut();
    if let Ok(traceparent) = HeaderValue::from_str(traceparent)
        && !traceparent.is_empty()
    {
        headers.insert(TRACEPARENT, traceparent);
    }
    if let Some(id) = &session.id {
        headers.insert(SESSION, id.clone());
    }
    if let Some(version) = &session.version {
        headers.insert(VERSION, version.clone());
    }
    for (name, value) in &session.endpoint.headers {
        headers.append(name.clone(), value.clone());
    }
    request
}

/// The answer to a request of the server's: `ping` as the protocol asks, anything
/// else (sampling, elicitation, roots) as a method this client does not serve (it
/// declares no such capability), so that the server is not left waiting.
pub(super) fn answer_to_server(id: RequestId, method: &str) -> ClientJsonRpcMessage {
    match method {
        "ping" => ClientJsonRpcMessage::response(ClientResult::empty(()), id),
        _ => ClientJsonRpcMessage::error(
            ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("redline does not serve `{method}`"),
                None,
            ),
            Some(id),
        ),
    }
}

/// Answers a request of the server's (see [`answer_to_server`]) with a POST on the
/// session; its fate is the server's to mind, not the call's.
pub(super) async fn answer_server(
    http: &HttpClient,
    session: &HttpSession,
    traceparent: &str,
    (id, method): (RequestId, &str),
    deadline: Instant,
) {
    let message = answer_to_server(id, method);
    let body = serde_json::to_vec(&message).expect("an MCP answer serialises");
    let request = post(session, body, traceparent);
    let sent = tokio::time::timeout_at(deadline.into(), async {
        let response = crate::client::send(http, request).await.ok()?;
        http_body_util::Limited::new(response.into_body(), 64 << 10)
            .collect()
            .await
            .ok()
    });
    let _ = sent.await;
}

/// A message whose result is kept as JSON, to be typed by the method that asked.
pub(super) type Message = rmcp::model::JsonRpcMessage<rmcp::model::Request, Value>;
pub(super) type Reply = Result<rmcp::model::JsonRpcResponse<Value>, rmcp::model::JsonRpcError>;

/// A message, or the failure kind and message of bytes that are not one.
pub(super) fn parse(bytes: &[u8]) -> Result<Message, (&'static str, String)> {
    let mut value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ("invalid_json", format!("the answer is not JSON: {e}")))?;
    // `params` may be left out of a request or notification (a server's `ping`), but
    // the SDK's generic message type wants it.
    if let Some(message) = value.as_object_mut()
        && message.contains_key("method")
    {
        message
            .entry("params")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    serde_json::from_value(value)
        .map_err(|e| ("mcp/not_mcp", format!("not a JSON-RPC 2.0 message: {e}")))
}

/// The result of the reply to `id`; an error, or a reply to another id, fails the
/// record.
pub(super) fn settle(reply: Reply, id: i64, record: &mut Record) -> Option<Value> {
    let ours = RequestId::Number(id);
    let (kind, message) = match reply {
        Ok(response) if response.id == ours => return Some(response.result),
        Err(error) if error.id.as_ref().is_none_or(|e| *e == ours) => {
            let code = error.error.code.0;
            let message = format!("JSON-RPC error {code}: {}", error.error.message);
            (format!("mcp/{code}"), message)
        }
        Ok(response) => (
            "mcp/wrong_id".to_owned(),
            format!(
                "the answer is the response to id {}, not to this call's {id}",
                response.id
            ),
        ),
        Err(error) => {
            let theirs = error
                .id
                .map_or_else(|| "none".to_owned(), |id| id.to_string());
            (
                "mcp/wrong_id".to_owned(),
                format!("the answer is an error for id {theirs}, not for this call's {id}"),
            )
        }
    };
    record.fail(Outcome::Error, FailStage::Decode, &kind, message);
    None
}
