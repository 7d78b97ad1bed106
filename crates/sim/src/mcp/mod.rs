//! An MCP server over Streamable HTTP (protocol 2025-11-25, and 2025-06-18 and
//! 2025-03-26 for older clients) at `/mcp`: `initialize` opens a session named by the
//! `Mcp-Session-Id` header, then `tools/list` and `tools/call`, `resources/list` and
//! `resources/read`, `prompts/list` and `prompts/get`, and `ping`. A tool call with a
//! progress token is answered as an SSE stream, the progress notifications before the
//! result; everything else as one JSON answer. `DELETE /mcp` ends a session; an ended
//! or unknown session is answered 404, which tells a client to initialize again.
//! There is no server-initiated stream: `GET /mcp` is 405, as the transport allows.
//!
//! The same server speaks stdio too ([`stdio`]), one process a session.
//!
//! `GET /redline/mcp` is the ground truth: sessions opened and ended, requests by
//! method, calls and failures by tool, progress notifications sent.

pub mod catalogue;
pub mod stdio;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::tiers::Tiers;
use catalogue::RpcError;

/// The protocol versions served, newest first.
pub const VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// The session header.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol-version header clients send after `initialize`.
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// Items per page of `tools/list`, `resources/list` and `prompts/list`: fewer than the
/// server has, so clients must follow `nextCursor`.
pub const PAGE_SIZE: usize = 3;
/// Sessions kept at most; the oldest goes first (a client churning sessions without
/// `DELETE` cannot grow the server without bound).
const MAX_SESSIONS: usize = 100_000;

/// The server's state: its sessions and what it has served.
pub struct McpServer {
    tiers: Arc<Tiers>,
    /// Session id → the order it was opened in.
    sessions: Mutex<HashMap<String, u64>>,
    opened: AtomicU64,
    ended: AtomicU64,
    truth: Mutex<Truth>,
    seed: u64,
}

/// What the server has served, by name.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct Truth {
    requests: BTreeMap<String, u64>,
    notifications: BTreeMap<String, u64>,
    tool_calls: BTreeMap<String, u64>,
    tool_errors: BTreeMap<String, u64>,
    progress_sent: u64,
    rejected: BTreeMap<String, u64>,
}

impl McpServer {
    pub fn new(tiers: Arc<Tiers>, seed: u64) -> McpServer {
        McpServer {
            tiers,
            sessions: Mutex::new(HashMap::new()),
            opened: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            truth: Mutex::new(Truth::default()),
            seed,
        }
    }

    fn count(&self, what: impl FnOnce(&mut Truth)) {
        what(&mut self.truth.lock().expect("counters hold no invariant"));
    }

    /// A new session's id: unique, visible ASCII, not guessable from the last.
    fn open_session(&self) -> String {
        let n = self.opened.fetch_add(1, Ordering::Relaxed);
        let id = format!(
            "{:016x}{:08x}",
            redline_base::seed::mix_seed(&[self.seed, 0x006d_6370, n]),
            n
        );
        let mut sessions = self.sessions.lock().expect("sessions hold no invariant");
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, n)| **n)
                .map(|(id, _)| id.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(id.clone(), n);
        id
    }

    fn has_session(&self, id: &str) -> bool {
        self.sessions
            .lock()
            .expect("sessions hold no invariant")
            .contains_key(id)
    }
}

/// A JSON-RPC message as it came: a request (method and id), a notification (method,
/// no id) or a response to the server (an id, no method).
enum Message {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
    },
    Response,
}

fn message_of(body: &[u8]) -> Result<Message, (StatusCode, RpcError)> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        let error = RpcError {
            code: -32700,
            message: format!("Parse error: {e}"),
        };
        (StatusCode::BAD_REQUEST, error)
    })?;
    let invalid = |message: &str| {
        let error = RpcError {
            code: -32600,
            message: format!("Invalid Request: {message}"),
        };
        (StatusCode::BAD_REQUEST, error)
    };
    if value.is_array() {
        return Err(invalid(
            "batches are not part of the protocol since 2025-06-18",
        ));
    }
    if value.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("not JSON-RPC 2.0"));
    }
    let method = value
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned();
    match (method, id) {
        (Some(method), Some(id)) => {
            let params = value.get("params").cloned().unwrap_or(Value::Null);
            Ok(Message::Request { id, method, params })
        }
        (Some(method), None) => Ok(Message::Notification { method }),
        (None, Some(_)) if value.get("result").is_some() || value.get("error").is_some() => {
            Ok(Message::Response)
        }
        _ => Err(invalid("neither a request, a notification nor a response")),
    }
}

/// `POST /mcp`.
pub async fn post(State(mcp): State<Arc<McpServer>>, headers: HeaderMap, body: Bytes) -> Response {
    let message = match message_of(&body) {
        Ok(message) => message,
        Err((status, error)) => {
            mcp.count(|t| *t.rejected.entry("malformed".into()).or_default() += 1);
            return rpc_error(status, &Value::Null, &error);
        }
    };
    if let Message::Request { id, method, params } = &message
        && method == "initialize"
    {
        return initialize(&mcp, id, params);
    }
    if let Some(refused) = refusal(&mcp, &headers) {
        return refused;
    }
    match message {
        Message::Request { id, method, params } => {
            mcp.count(|t| *t.requests.entry(method.clone()).or_default() += 1);
            answer(mcp, &headers, id, &method, params).await
        }
        Message::Notification { method } => {
            mcp.count(|t| *t.notifications.entry(method).or_default() += 1);
            StatusCode::ACCEPTED.into_response()
        }
        Message::Response => StatusCode::ACCEPTED.into_response(),
    }
}

/// `initialize`: a new session, at the client's protocol version if it is one served.
fn initialize(mcp: &McpServer, id: &Value, params: &Value) -> Response {
    mcp.count(|t| *t.requests.entry("initialize".into()).or_default() += 1);
    let session = mcp.open_session();
    let result = initialize_result(params);
    let mut response = Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response();
    response.headers_mut().insert(
        SESSION_HEADER,
        HeaderValue::from_str(&session).expect("a hex session id is a header value"),
    );
    response
}

/// What `initialize` answers, on either transport: the client's protocol version if
/// it is one served, else the newest.
fn initialize_result(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = VERSIONS
        .into_iter()
        .find(|v| Some(*v) == asked)
        .unwrap_or(VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": {"listChanged": false},
            "resources": {"subscribe": false, "listChanged": false},
            "prompts": {"listChanged": false},
        },
        "serverInfo": {"name": "redline-sim", "title": "redline's simulated MCP server", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "A simulator: tools take the latency and fail at the rate redline sim was given.",
    })
}

/// Why a request after `initialize` is refused, if it is: it must name a live
/// session (400 without one, 404 for one ended or unknown) and, if it says one, a
/// protocol version served (400 otherwise).
fn refusal(mcp: &McpServer, headers: &HeaderMap) -> Option<Response> {
    let refuse = |status: StatusCode, code: i64, why: &str, counted: &str| {
        mcp.count(|t| *t.rejected.entry(counted.into()).or_default() += 1);
        let error = RpcError {
            code,
            message: why.to_owned(),
        };
        Some(rpc_error(status, &Value::Null, &error))
    };
    let Some(session) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            -32000,
            "Bad Request: no Mcp-Session-Id (send initialize first)",
            "no_session",
        );
    };
    if !mcp.has_session(session) {
        return refuse(
            StatusCode::NOT_FOUND,
            -32001,
            "Session not found: initialize again",
            "unknown_session",
        );
    }
    match headers
        .get(VERSION_HEADER)
        .map(|v| v.to_str().unwrap_or(""))
    {
        Some(version) if !VERSIONS.contains(&version) => refuse(
            StatusCode::BAD_REQUEST,
            -32000,
            &format!(
                "Bad Request: unsupported protocol version `{version}`; this server speaks {}",
                VERSIONS.join(", ")
            ),
            "bad_version",
        ),
        _ => None,
    }
}

/// One request's answer: JSON, or an SSE stream for a tool call with a progress token.
async fn answer(
    mcp: Arc<McpServer>,
    headers: &HeaderMap,
    id: Value,
    method: &str,
    params: Value,
) -> Response {
    let progress = params.pointer("/_meta/progressToken").cloned();
    let streams = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    if method == "tools/call"
        && let (Some(token), true) = (progress, streams)
    {
        return streamed_call(mcp, id, params, token);
    }
    let result = result_of(&mcp, method, &params, None).await;
    match result {
        Ok(result) => Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response(),
        Err(error) => rpc_error(StatusCode::OK, &id, &error),
    }
}

/// The result of one request after `initialize`, on either transport; `progress`
/// hears a long tool's steps.
async fn result_of(
    mcp: &McpServer,
    method: &str,
    params: &Value,
    progress: Option<&(dyn Fn(u64, u64) + Send + Sync)>,
) -> Result<Value, RpcError> {
    match method {
        "ping" => Ok(json!({})),
        "tools/list" => list(params, catalogue::tools(), "tools"),
        "tools/call" => call_tool(mcp, params, progress).await,
        "resources/list" => list(params, catalogue::resources(), "resources"),
        "resources/templates/list" => Ok(
            json!({"resourceTemplates": [{"uriTemplate": "redline://corpus/{id}", "name": "document", "mimeType": "text/plain"}]}),
        ),
        "resources/read" => match params.get("uri").and_then(Value::as_str) {
            Some(uri) => catalogue::read_resource(uri, &mcp.tiers),
            None => Err(RpcError::invalid_params("`uri` is required".into())),
        },
        "prompts/list" => list(params, catalogue::prompts(), "prompts"),
        "prompts/get" => match params.get("name").and_then(Value::as_str) {
            Some(name) => {
                catalogue::get_prompt(name, params.get("arguments").unwrap_or(&Value::Null))
            }
            None => Err(RpcError::invalid_params("`name` is required".into())),
        },
        _ => Err(RpcError {
            code: -32601,
            message: format!("Method not found: {method}"),
        }),
    }
}

/// A page of a list method's items, under `key`.
fn list(params: &Value, items: Vec<Value>, key: &str) -> Result<Value, RpcError> {
    let cursor = params.get("cursor").and_then(Value::as_str);
    let (page, next) = catalogue::page(items, cursor, PAGE_SIZE)?;
    let mut result = json!({ key: page });
    if let Some(next) = next {
        result["nextCursor"] = Value::String(next);
    }
    Ok(result)
}

/// `tools/call`: the tool on the tool tier; `progress` hears `long_task`'s steps.
async fn call_tool(
    mcp: &McpServer,
    params: &Value,
    progress: Option<&(dyn Fn(u64, u64) + Send + Sync)>,
) -> Result<Value, RpcError> {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err(RpcError::invalid_params("`name` is required".into()));
    };
    if !catalogue::TOOL_NAMES.contains(&name) {
        return Err(RpcError::invalid_params(format!("Unknown tool: {name}")));
    }
    let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
    mcp.count(|t| *t.tool_calls.entry(name.to_owned()).or_default() += 1);
    let fails = mcp.tiers.tool_call(name).await;
    if name == "long_task" {
        let steps = catalogue::steps(&arguments);
        for step in 1..=steps {
            tokio::time::sleep(Duration::from_millis(catalogue::STEP_MS)).await;
            if let Some(progress) = progress {
                progress(step, steps);
            }
        }
    }
    let result = if fails {
        json!({"content": [{"type": "text", "text": format!("tool `{name}` failed (simulated)")}], "isError": true})
    } else {
        catalogue::tool_result(name, &arguments, &mcp.tiers)
    };
    if result["isError"] == true {
        mcp.count(|t| *t.tool_errors.entry(name.to_owned()).or_default() += 1);
    }
    Ok(result)
}

/// A tool call answered as an SSE stream: a `notifications/progress` event per step,
/// then the result. Event ids (`<n>`) let a client say where it was.
fn streamed_call(mcp: Arc<McpServer>, id: Value, params: Value, token: Value) -> Response {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let event = |n: u64, message: &Value| {
        Bytes::from(format!("id: {n}\nevent: message\ndata: {message}\n\n"))
    };
    tokio::spawn(async move {
        let sent = AtomicU64::new(0);
        let notify = |progress: u64, total: u64| {
            let message = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": progress, "total": total}});
            let _ = tx.send(event(sent.fetch_add(1, Ordering::Relaxed), &message));
            mcp.count(|t| t.progress_sent += 1);
        };
        let answer = match call_tool(&mcp, &params, Some(&notify)).await {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(e) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})
            }
        };
        let _ = tx.send(event(sent.load(Ordering::Relaxed), &answer));
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, std::convert::Infallible>(bytes), rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

fn rpc_error(status: StatusCode, id: &Value, error: &RpcError) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": error.code, "message": error.message}});
    (status, Json(body)).into_response()
}

/// `DELETE /mcp`: the session ends.
pub async fn delete(State(mcp): State<Arc<McpServer>>, headers: HeaderMap) -> StatusCode {
    let Some(session) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    let removed = mcp
        .sessions
        .lock()
        .expect("sessions hold no invariant")
        .remove(session)
        .is_some();
    if removed {
        mcp.ended.fetch_add(1, Ordering::Relaxed);
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}

/// `GET /mcp`: no server-initiated stream here.
pub async fn get() -> StatusCode {
    StatusCode::METHOD_NOT_ALLOWED
}

/// `GET /redline/mcp`: what the MCP server has served.
pub async fn truth(State(mcp): State<Arc<McpServer>>) -> Json<Value> {
    let truth = mcp
        .truth
        .lock()
        .expect("counters hold no invariant")
        .clone();
    let mut body = serde_json::to_value(truth).expect("counters serialize");
    body["sessions_opened"] = json!(mcp.opened.load(Ordering::Relaxed));
    body["sessions_ended"] = json!(mcp.ended.load(Ordering::Relaxed));
    body["sessions_live"] = json!(
        mcp.sessions
            .lock()
            .expect("sessions hold no invariant")
            .len()
    );
    Json(body)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod stdio_tests;
