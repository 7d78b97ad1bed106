//! The MCP client over Streamable HTTP or stdio (protocol 2025-11-25): sessions
//! opened with `initialize`, kept in a pool so that no two calls in flight share one, ended by
//! churn; each call one record with the method, the handshake it needed and the
//! progress it heard. The protocol's types are the official SDK's (`rmcp`); the
//! transport is ours, over the one send path, so that every call has the same timing
//! marks and typed outcomes as any other request (docs/mcp.md).

mod wire;
mod stream;
mod exchange;
mod listen;
mod stdio;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Uri};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientNotification,
    ClientRequest, GetPromptRequest, GetPromptRequestParams, GetPromptResult, Implementation,
    InitializeRequest, InitializeRequestParams, InitializeResult, InitializedNotification,
    ListPromptsRequest, ListResourceTemplatesRequest, ListResourcesRequest, ListToolsRequest,
    PaginatedRequestParams, PingRequest, ProgressToken, ProtocolVersion, ReadResourceRequest,
    ReadResourceRequestParams, ReadResourceResult, RequestParamsMeta,
};

use serde_json::Value;

use super::{HttpClient, RunClock, Timeouts};
use crate::record::{FailStage, McpMark, Outcome, Record};
use crate::spec::mcp::McpList;
use crate::workload::mcp::McpCall;
use exchange::Answer;
use wire::Deadlines;

/// Pages of one list followed at most: a server whose cursors never end costs a
/// bounded number of requests.
pub const MAX_PAGES: u32 = 1000;

/// Everything a call needs; one per run and service.
#[derive(Debug)]
pub struct McpTarget {
    pub transport: McpTransport,
    pub timeouts: Timeouts,
    /// Largest answer read, in bytes (an SSE answer's events together; over stdio,
    /// the lines before the response with it).
    pub max_response_bytes: usize,
    /// Ask for progress notifications on tool calls.
    pub progress: bool,
    /// Open each session's standalone GET stream (Streamable HTTP).
    pub listen: bool,
    sessions: Mutex<Vec<Session>>,
}

/// How the server is reached.
#[derive(Debug, Clone)]
pub enum McpTransport {
    /// Streamable HTTP.
    Http(Arc<HttpEndpoint>),
    /// stdio: the server started as a child process per session, from its argv.
    Stdio { command: Vec<String> },
}

/// A Streamable HTTP endpoint.
#[derive(Debug)]
pub struct HttpEndpoint {
    /// The MCP endpoint (`http://host:port/mcp`).
    pub uri: Uri,
    /// The service's headers and its `authorization`, sent on every request.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl McpTransport {
    pub fn http(uri: Uri, headers: Vec<(HeaderName, HeaderValue)>) -> McpTransport {
        McpTransport::Http(Arc::new(HttpEndpoint { uri, headers }))
    }
}

/// An open session and its next request id.
#[derive(Debug)]
struct Session {
    next_id: i64,
    link: Link,
}

#[derive(Debug)]
enum Link {
    Http(HttpSession),
    /// A process of its own.
    Stdio(Box<stdio::Process>),
}

/// A session over Streamable HTTP: its id (none from a server that keeps no
/// sessions) and the protocol version agreed.
#[derive(Debug)]
struct HttpSession {
    endpoint: Arc<HttpEndpoint>,
    id: Option<HeaderValue>,
    version: Option<HeaderValue>,
    /// Its GET stream, when the target listens.
    listener: Option<listen::Listener>,
}

impl Session {
    fn take_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// Whether the session can carry another call after one that failed: an HTTP
    /// session can (a timeout, a reset or an error answer leave it open on the
    /// server) unless the server named another or did not speak MCP; a process can
    /// unless its stream is in doubt.
    fn usable_after(&self, record: &Record) -> bool {
        match &self.link {
            Link::Stdio(process) => process.usable(),
            Link::Http(_) => {
                let kind = record.error.as_ref().map_or("", |e| e.kind.as_str());
                !matches!(kind, "mcp/session_changed" | "mcp/not_mcp")
            }
        }
    }
}

impl McpTarget {
    pub fn new(
        transport: McpTransport,
        timeouts: Timeouts,
        max_response_bytes: usize,
        progress: bool,
    ) -> McpTarget {
        McpTarget {
            transport,
            timeouts,
            max_response_bytes,
            progress,
            listen: false,
            sessions: Mutex::new(Vec::new()),
        }
    }

    /// Opens each session's GET stream, or not.
    pub fn listening(mut self, listen: bool) -> McpTarget {
        self.listen = listen;
        self
    }

    /// Sessions open and idle now.
    pub fn idle_sessions(&self) -> usize {
        self.sessions.lock().expect("a list of sessions").len()
    }

    fn take_session(&self) -> Option<Session> {
        self.sessions.lock().expect("a list of sessions").pop()
    }

    fn give_back(&self, session: Session) {
        self.sessions
            .lock()
            .expect("a list of sessions")
            .push(session);
    }

    fn deadlines(&self, start: Instant) -> Deadlines {
        Deadlines {
            total: start + self.timeouts.total,
            first: self.timeouts.first_token,
            between: self.timeouts.between_tokens,
        }
    }
}

/// Makes `call` on a session of the pool (a new one when none is idle), filling
/// `record`; ends the session afterwards when `end_session` (churn). Gives the
/// result, when one came: a tool's `isError` result too, which fails the record
/// but is what an agent hands back to its model.
pub async fn call(
    http: &HttpClient,
    target: &McpTarget,
    call: &McpCall,
    end_session: bool,
    traceparent: &str,
    clock: RunClock,
    record: &mut Record,
) -> Option<Value> {
    let mut mark = McpMark::called(call.method(), call.name());
    let deadlines = target.deadlines(Instant::now());
    let context = Context {
        http,
        target,
        traceparent,
        deadlines,
        clock,
    };
    let (session, result) = context.call(call, record, &mut mark).await;
    if let Some(Session {
        link:
            Link::Http(HttpSession {
                listener: Some(listener),
                ..
            }),
        ..
    }) = &session
    {
        mark.heard = listener.take_heard();
    }
    if let Some(session) = session {
        if end_session {
            mark.ended_session = true;
            context.end(session).await;
        } else {
            target.give_back(session);
        }
    }
    record.mcp = Some(mark);
    result
}

/// Every tool the server lists (`tools/list`, every page), on a session opened for
/// it and ended after; or what went wrong, as the record's typed failure says it.
pub async fn list_tools(http: &HttpClient, target: &McpTarget) -> Result<Vec<Value>, String> {
    let clock = RunClock::new(Instant::now());
    let mut record = Record::unsent(0, 0, crate::record::Phase::Measure, 0);
    let mut mark = McpMark::called(McpList::Tools.method(), None);
    let context = Context {
        http,
        target,
        traceparent: "00-00000000000000000000000000000001-0000000000000001-01",
        deadlines: target.deadlines(Instant::now()),
        clock,
    };
    let mut tools = Vec::new();
    let mut session = context.open(&mut record, &mut mark).await;
    if let Some(session) = &mut session {
        context
            .list(
                session,
                McpList::Tools,
                &mut record,
                &mut mark,
                Some(&mut tools),
            )
            .await;
    }
    if let Some(session) = session {
        context.end(session).await;
    }
    match record.error {
        Some(e) => Err(format!("{}: {}", e.kind, e.message)),
        None => Ok(tools),
    }
}

/// What every exchange of one call shares.
struct Context<'a> {
    http: &'a HttpClient,
    target: &'a McpTarget,
    traceparent: &'a str,
    deadlines: Deadlines,
    clock: RunClock,
}

impl Context<'_> {
    /// The call on a session, again on a new session once if the server dropped its
    /// own: the session to give back (none when the server broke it) and the result.
    async fn call(
        &self,
        call: &McpCall,
        record: &mut Record,
        mark: &mut McpMark,
    ) -> (Option<Session>, Option<Value>) {
        let session = match self.target.take_session() {
            Some(session) => Some(session),
            None => self.open(record, mark).await,
        };
        let Some(mut session) = session else {
            return (None, None);
        };
        match self.send(&mut session, call, record, mark).await {
            Sent::Done(result) => (Some(session), result),
            Sent::Broken => (None, None),
            Sent::SessionGone => {
                mark.reinitialized = true;
                forget_answer(record);
                let Some(mut session) = self.open(record, mark).await else {
                    return (None, None);
                };
                match self.send(&mut session, call, record, mark).await {
                    Sent::Done(result) => (Some(session), result),
                    Sent::Broken => (None, None),
                    Sent::SessionGone => {
                        let message = "the server dropped the session it had just opened";
                        record.fail(
                            Outcome::Error,
                            FailStage::FirstByte,
                            "mcp/session_gone",
                            message,
                        );
                        (None, None)
                    }
                }
            }
        }
    }

    /// `initialize` and `notifications/initialized`: a new session, its time in
    /// `mark.handshake_us` (summed when a call needs two; over stdio, with the
    /// process's start).
    async fn open(&self, record: &mut Record, mark: &mut McpMark) -> Option<Session> {
        let started = Instant::now();
        let link = match &self.target.transport {
            McpTransport::Http(endpoint) => Link::Http(HttpSession {
                endpoint: endpoint.clone(),
                id: None,
                version: None,
                listener: None,
            }),
            McpTransport::Stdio { command } => match stdio::Process::start(command) {
                Ok(process) => Link::Stdio(Box::new(process)),
                Err(why) => {
                    record.fail(Outcome::Error, FailStage::Connect, "mcp/spawn", why);
                    return None;
                }
            },
        };
        let mut session = Session { next_id: 0, link };
        let params = InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("redline", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        let request = ClientRequest::InitializeRequest(InitializeRequest::new(params));
        // Without a session id yet, a 404 is the answer's failure, not a dropped session.
        let Exchanged::Result(result, named) =
            self.exchange(&mut session, request, record, mark).await
        else {
            return None;
        };
        let result = typed::<InitializeResult>(&result, "initialize", record)?;
        let initialized =
            ClientNotification::InitializedNotification(InitializedNotification::default());
        match &mut session.link {
            Link::Http(http_session) => {
                http_session.id = named;
                http_session.version =
                    HeaderValue::from_str(&result.protocol_version.to_string()).ok();
                exchange::notify(
                    self.http,
                    http_session,
                    initialized,
                    self.traceparent,
                    self.deadlines.total,
                    (self.clock, record),
                )
                .await?;
                if self.target.listen {
                    http_session.listener = Some(listen::Listener::start(self.http, http_session));
                }
            }
            Link::Stdio(process) => {
                stdio::notify(process, initialized, self.deadlines.total, record).await?;
            }
        }
        let spent = started.elapsed().as_micros() as u64;
        mark.handshake_us = Some(mark.handshake_us.unwrap_or(0) + spent);
        forget_answer(record);
        Some(session)
    }

    /// One operation: every page of a list, or one request.
    async fn send(
        &self,
        session: &mut Session,
        call: &McpCall,
        record: &mut Record,
        mark: &mut McpMark,
    ) -> Sent {
        if let McpCall::List(list) = call {
            return self.list(session, *list, record, mark, None).await;
        }
        let request = self.request_of(call, session.next_id + 1);
        let result = match self.exchange(session, request, record, mark).await {
            Exchanged::Result(result, _) => result,
            Exchanged::Gone => return Sent::SessionGone,
            Exchanged::Failed => return failed(session, record),
        };
        match call {
            McpCall::Tool { name, .. } => tool_result(&result, name, record),
            McpCall::Read { .. } => {
                typed::<ReadResourceResult>(&result, "resources/read", record).map(drop)
            }
            McpCall::Prompt { .. } => {
                typed::<GetPromptResult>(&result, "prompts/get", record).map(drop)
            }
            McpCall::Ping | McpCall::List(_) => Some(()),
        };
        Sent::Done(Some(result))
    }

    /// Every page of a list, following `nextCursor`; its items kept in `keep` when
    /// given.
    async fn list(
        &self,
        session: &mut Session,
        list: McpList,
        record: &mut Record,
        mark: &mut McpMark,
        mut keep: Option<&mut Vec<Value>>,
    ) -> Sent {
        let key = match list {
            McpList::Tools => "tools",
            McpList::Resources => "resources",
            McpList::ResourceTemplates => "resourceTemplates",
            McpList::Prompts => "prompts",
        };
        let (mut pages, mut items, mut cursor) = (0u32, 0u32, None::<String>);
        loop {
            let params = cursor
                .take()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let request = list_request(list, params);
            let result = match self.exchange(session, request, record, mark).await {
                Exchanged::Result(result, _) => result,
                Exchanged::Gone if pages == 0 => return Sent::SessionGone,
                Exchanged::Gone => {
                    let message = format!(
                        "the server dropped the session after page {pages} of {}",
                        list.method()
                    );
                    record.fail(
                        Outcome::Error,
                        FailStage::FirstByte,
                        "mcp/session_gone",
                        message,
                    );
                    return Sent::Broken;
                }
                Exchanged::Failed => return failed(session, record),
            };
            pages += 1;
            let Some(page) = result.get(key).and_then(|v| v.as_array()) else {
                let message = format!("a {} result without its `{key}` array", list.method());
                record.fail(
                    Outcome::Error,
                    FailStage::Decode,
                    "mcp/invalid_result",
                    message,
                );
                break;
            };
            items = items.saturating_add(page.len() as u32);
            if let Some(keep) = keep.as_deref_mut() {
                keep.extend(page.iter().cloned());
            }
            cursor = result
                .get("nextCursor")
                .and_then(|v| v.as_str())
                .map(str::to_owned);
            if cursor.is_none() {
                break;
            }
            if pages >= MAX_PAGES {
                let message = format!("{} still had a next page after {MAX_PAGES}", list.method());
                record.fail(
                    Outcome::Error,
                    FailStage::Decode,
                    "mcp/endless_pages",
                    message,
                );
                break;
            }
        }
        mark.pages = Some(pages);
        mark.items = Some(items);
        Sent::Done(None)
    }

    /// One request of the session, its id taken.
    async fn exchange(
        &self,
        session: &mut Session,
        request: ClientRequest,
        record: &mut Record,
        mark: &mut McpMark,
    ) -> Exchanged {
        let id = session.take_id();
        let max_bytes = self.target.max_response_bytes;
        let answer = match &mut session.link {
            Link::Http(http_session) => {
                exchange::request(
                    self.http,
                    http_session,
                    max_bytes,
                    (id, request),
                    self.traceparent,
                    self.deadlines,
                    (self.clock, record, mark),
                )
                .await
            }
            Link::Stdio(process) => stdio::request(
                process,
                (id, request),
                self.deadlines,
                max_bytes,
                (self.clock, record, mark),
            )
            .await
            .map(|result| Answer::Result(result, None)),
        };
        match answer {
            Some(Answer::Result(result, named)) => Exchanged::Result(result, named),
            Some(Answer::SessionGone) => Exchanged::Gone,
            None => Exchanged::Failed,
        }
    }

    /// The request a call sends.
    fn request_of(&self, call: &McpCall, id: i64) -> ClientRequest {
        match call {
            McpCall::Tool { name, args } => {
                let mut params = CallToolRequestParams::new(Cow::Owned(name.clone()));
                params.arguments = Some(args.clone());
                if self.target.progress {
                    params
                        .set_progress_token(ProgressToken(rmcp::model::NumberOrString::Number(id)));
                }
                ClientRequest::CallToolRequest(CallToolRequest::new(params))
            }
            McpCall::Read { uri } => ClientRequest::ReadResourceRequest(ReadResourceRequest::new(
                ReadResourceRequestParams::new(uri.clone()),
            )),
            McpCall::Prompt { name, args } => {
                let mut params = GetPromptRequestParams::new(name.clone());
                params.arguments = Some(args.clone());
                ClientRequest::GetPromptRequest(GetPromptRequest::new(params))
            }
            McpCall::Ping => ClientRequest::PingRequest(PingRequest::default()),
            McpCall::List(list) => list_request(*list, None),
        }
    }

    /// The session's end, not measured: over HTTP a `DELETE` (a failure to end it is
    /// the server's to mind; the session is forgotten either way); over stdio the
    /// process stopped in the background, so that a churning call does not wait for
    /// its grace periods.
    async fn end(&self, session: Session) {
        let http_session = match session.link {
            Link::Stdio(process) => {
                tokio::spawn(process.stop());
                return;
            }
            Link::Http(http_session) => http_session,
        };
        if http_session.id.is_none() {
            return;
        }
        let request = wire::on_session(&http_session, Method::DELETE, bytes::Bytes::new(), "");
        let deadline = Instant::now()
            + self
                .target
                .timeouts
                .first_token
                .min(self.target.timeouts.total);
        let _ = super::exchange(self.http, request, deadline).await;
    }
}

/// How one operation on a session went.
enum Sent {
    /// Answered (the record says whether well), with the result when one came.
    Done(Option<Value>),
    /// The server no longer knows the session.
    SessionGone,
    /// The session cannot be used again (the record says why).
    Broken,
}

enum Exchanged {
    /// The result, and the session id the answer named.
    Result(Value, Option<HeaderValue>),
    Gone,
    Failed,
}

/// After a failed exchange: the session goes on if it can carry another call.
fn failed(session: &Session, record: &Record) -> Sent {
    match session.usable_after(record) {
        true => Sent::Done(None),
        false => Sent::Broken,
    }
}

/// Clears the marks of an exchange that was not the call's own (the handshake, a
/// request to a dropped session), so that the record's times are the call's.
fn forget_answer(record: &mut Record) {
    record.headers_us = None;
    record.first_byte_us = None;
    record.last_byte_us = None;
    record.status = None;
}

fn list_request(list: McpList, params: Option<PaginatedRequestParams>) -> ClientRequest {
    match list {
        McpList::Tools => ClientRequest::ListToolsRequest(ListToolsRequest {
            params,
            ..Default::default()
        }),
        McpList::Resources => ClientRequest::ListResourcesRequest(ListResourcesRequest {
            params,
            ..Default::default()
        }),
        McpList::ResourceTemplates => {
            ClientRequest::ListResourceTemplatesRequest(ListResourceTemplatesRequest {
                params,
                ..Default::default()
            })
        }
        McpList::Prompts => ClientRequest::ListPromptsRequest(ListPromptsRequest {
            params,
            ..Default::default()
        }),
    }
}

/// A result as its type in the protocol, or a typed failure.
fn typed<T: serde::de::DeserializeOwned>(
    result: &Value,
    method: &str,
    record: &mut Record,
) -> Option<T> {
    match T::deserialize(result) {
        Ok(typed) => Some(typed),
        Err(error) => {
            let message = format!("the {method} result is not the protocol's: {error}");
            record.fail(
                Outcome::Error,
                FailStage::Decode,
                "mcp/invalid_result",
                message,
            );
            None
        }
    }
}

/// A tool's result: `isError: true` is the tool's failure, `mcp/tool_error`.
fn tool_result(result: &Value, tool: &str, record: &mut Record) -> Option<()> {
    let result = typed::<CallToolResult>(result, "tools/call", record)?;
    if result.is_error == Some(true) {
        let said = result
            .content
            .iter()
            .find_map(|c| c.as_text().map(|t| t.text.clone()))
            .unwrap_or_default();
        let message = format!(
            "tool `{tool}` failed: {}",
            crate::record::cut_to(&said, 200)
        );
        record.fail(Outcome::Error, FailStage::Assert, "mcp/tool_error", message);
        return None;
    }
    Some(())
}
