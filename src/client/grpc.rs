//! gRPC calls on the one send path: the request goes out through the same pool,
//! connector (TLS, typed connect errors), deadlines and fault notes as every HTTP
//! request, over HTTP/2; the answer is read here frame by frame, so each message is
//! timed as it completes and a server cannot make the client buffer more than a
//! message's limit. Statuses come from trailers (or a trailers-only answer) and become
//! typed outcomes: `grpc_<code>` (`grpc_unavailable`, `grpc_resource_exhausted`), a body
//! that ends without `grpc-status` is `truncated`, a reset stream `reset`, bytes that
//! are not the expected message `invalid_protobuf`.

use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use prost::Message;
use tonic::Code;

use super::{HttpClient, RunClock, Timeouts};
use crate::grpc::{code_name, code_of_http, frame, is_grpc};
use crate::record::{FailStage, Outcome, Record};

/// Where a service's gRPC calls go, and their limits; the same for every call.
#[derive(Debug, Clone)]
pub struct GrpcTarget {
    /// `http(s)://host:port`, with no path.
    pub base: String,
    /// Sent with every call (an `api-key`, say).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub timeouts: Timeouts,
    /// Largest message read, in bytes.
    pub max_message_bytes: usize,
}

/// A status as a record's failure kind: `grpc_unavailable`.
pub fn status_kind(code: Code) -> String {
    format!("grpc_{}", code_name(code))
}

/// One unary call (`/package.Service/Method`): its answer, or `None` with the record
/// failed.
pub async fn unary<M: Message, R: Message + Default>(
    http: &HttpClient,
    target: &GrpcTarget,
    method: &str,
    message: &M,
    traceparent: &str,
    clock: RunClock,
    record: &mut Record,
) -> Option<R> {
    let mut answer = None;
    let only_one = |m| match answer.replace(m) {
        None => Ok(()),
        Some(_) => Err(format!("{method} is unary, and a second answer came")),
    };
    call(
        http,
        target,
        method,
        message,
        traceparent,
        clock,
        record,
        only_one,
    )
    .await?;
    let fail = |record: &mut Record, kind: &str, message: String| {
        record.fail(Outcome::Error, FailStage::Decode, kind, message);
        None
    };
    match answer {
        Some(bytes) => match R::decode(bytes) {
            Ok(answer) => Some(answer),
            Err(e) => fail(
                record,
                "invalid_protobuf",
                format!("the answer to {method} is not its message: {e}"),
            ),
        },
        None => fail(
            record,
            "no_message",
            format!("{method} ended with status OK and no answer"),
        ),
    }
}

/// Sends one request message and reads the answer messages until the status; each
/// message goes to `on_message` as it completes, which may refuse it (the call then
/// fails as `invalid_grpc` with its reason, unread further). `None` when the record
/// failed.
#[allow(clippy::too_many_arguments)]
pub async fn call<M: Message>(
    http: &HttpClient,
    target: &GrpcTarget,
    method: &str,
    message: &M,
    traceparent: &str,
    clock: RunClock,
    record: &mut Record,
    on_message: impl FnMut(Bytes) -> Result<(), String>,
) -> Option<()> {
    let sent = Instant::now();
    record.sent_us = Some(clock.us(sent));
    let deadline = sent + target.timeouts.total;
    let first_deadline = deadline.min(sent + target.timeouts.first_token);
    let request = match request(target, method, message, traceparent) {
        Ok(request) => request,
        Err(message) => {
            record.fail(
                Outcome::Error,
                FailStage::Client,
                "invalid_request",
                message,
            );
            return None;
        }
    };
    let timeout = "no response headers before the deadline";
    let response = super::send_until(http, request, first_deadline, timeout, clock, record).await?;
    let (head, body) = response.into_parts();
    if let Some((kind, message)) = refused_by_head(&head) {
        record.fail(Outcome::Error, FailStage::FirstByte, &kind, message);
        return None;
    }
    let reader = Reader {
        body,
        deadline,
        limit: target.max_message_bytes,
        clock,
        // A trailers-only answer: its status (OK, or refused above) came in the head.
        ended_in_head: tonic::Status::from_header_map(&head.headers).is_some(),
    };
    reader.messages(record, on_message).await
}

fn request<M: Message>(
    target: &GrpcTarget,
    method: &str,
    message: &M,
    traceparent: &str,
) -> Result<Request<Full<Bytes>>, String> {
    let uri: Uri = format!("{}{method}", target.base.trim_end_matches('/'))
        .parse()
        .map_err(|e| format!("`{}{method}` is not a URI: {e}", target.base))?;
    let mut request = Request::new(Full::new(frame(message)));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    // The server may give up when the client would have: the total timeout, in ms (at
    // most eight digits, as the header allows).
    let ms = target.timeouts.total.as_millis().min(99_999_999);
    let timeout = HeaderValue::try_from(format!("{ms}m")).expect("digits and a unit");
    headers.insert(HeaderName::from_static("grpc-timeout"), timeout);
    if let Ok(value) = HeaderValue::from_str(traceparent) {
        headers.insert(HeaderName::from_static("traceparent"), value);
    }
    for (name, value) in &target.headers {
        headers.append(name.clone(), value.clone());
    }
    Ok(request)
}

/// Why the response head alone ends the call: an HTTP status other than 200 (named
/// by the code gRPC's clients infer from it), a body that is not gRPC, or a
/// trailers-only answer with an error status.
fn refused_by_head(head: &hyper::http::response::Parts) -> Option<(String, String)> {
    let status = head.status.as_u16();
    if status != 200 {
        let code = code_of_http(status);
        let message = format!("HTTP {status} instead of a gRPC answer");
        return Some((status_kind(code), message));
    }
    let content_type = head.headers.get(header::CONTENT_TYPE);
    if !content_type.is_some_and(|c| is_grpc(c.as_bytes())) {
        let shown = content_type.map_or("none".into(), |c| {
            String::from_utf8_lossy(c.as_bytes()).into_owned()
        });
        let message = format!("the answer's content-type is {shown}, not application/grpc");
        return Some(("not_grpc".into(), message));
    }
    match tonic::Status::from_header_map(&head.headers) {
        Some(status) if status.code() != Code::Ok => {
            Some((status_kind(status.code()), status.message().to_owned()))
        }
        _ => None,
    }
}

/// A response body, read as gRPC messages.
struct Reader {
    body: hyper::body::Incoming,
    deadline: Instant,
    limit: usize,
    clock: RunClock,
    ended_in_head: bool,
}

impl Reader {
    async fn messages(
        mut self,
        record: &mut Record,
        mut on_message: impl FnMut(Bytes) -> Result<(), String>,
    ) -> Option<()> {
        let mut framer = MessageFramer::new(self.limit);
        loop {
            let frame = tokio::time::timeout_at(self.deadline.into(), self.body.frame()).await;
            let stage = match record.first_byte_us {
                None => FailStage::FirstByte,
                Some(_) => FailStage::Stream,
            };
            let frame = match frame {
                Err(_) => {
                    let message = "the call did not end before the total timeout";
                    record.fail(Outcome::Timeout, stage, "timeout", message);
                    return None;
                }
                Ok(None) if self.ended_in_head && !framer.has_partial() => {
                    record.last_byte_us = Some(self.clock.now_us());
                    return Some(());
                }
                Ok(None) => {
                    let message = match framer.held() {
                        0 => "the stream ended without a grpc-status".to_owned(),
                        held => format!("the stream ended inside a message ({held} bytes held)"),
                    };
                    record.fail(Outcome::Error, stage, "truncated", message);
                    return None;
                }
                Ok(Some(Err(error))) => {
                    let message = format!("the stream broke: {}", super::chain_message(&error));
                    record.fail(Outcome::Error, stage, "reset", message);
                    return None;
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let frame = match frame.into_data() {
                Ok(data) => {
                    if record.first_byte_us.is_none() {
                        record.first_byte_us = Some(self.clock.now_us());
                    }
                    framer.feed(&data);
                    while let Some(message) = framer.next_message() {
                        let taken = message
                            .and_then(|m| on_message(m).map_err(|why| ("invalid_grpc", why)));
                        if let Err((kind, message)) = taken {
                            record.fail(Outcome::Error, FailStage::Decode, kind, message);
                            return None;
                        }
                    }
                    continue;
                }
                Err(frame) => frame,
            };
            let Some(trailers) = frame.into_trailers().ok() else {
                continue;
            };
            record.last_byte_us = Some(self.clock.now_us());
            return ended(&trailers, framer.held(), record);
        }
    }
}

/// The call's end from its trailers: OK, or the status as a typed failure.
fn ended(trailers: &hyper::HeaderMap, held: usize, record: &mut Record) -> Option<()> {
    let Some(status) = tonic::Status::from_header_map(trailers) else {
        let message = "the trailers hold no grpc-status";
        record.fail(Outcome::Error, FailStage::Stream, "truncated", message);
        return None;
    };
    if status.code() != Code::Ok {
        let kind = status_kind(status.code());
        record.fail(
            Outcome::Error,
            FailStage::Stream,
            &kind,
            status.message().to_owned(),
        );
        return None;
    }
    if held > 0 {
        let message = format!("the status came with {held} bytes of a message unfinished");
        record.fail(Outcome::Error, FailStage::Decode, "truncated", message);
        return None;
    }
    Some(())
}

/// Cuts a gRPC body into its messages as bytes arrive. A message whose length prefix
/// passes the limit is refused from the prefix, before its bytes are held; a
/// compressed one is refused (redline offers no compression).
#[derive(Debug)]
pub struct MessageFramer {
    buffer: BytesMut,
    limit: usize,
}

impl MessageFramer {
    pub fn new(limit: usize) -> MessageFramer {
        MessageFramer {
            buffer: BytesMut::new(),
            limit,
        }
    }

    pub fn feed(&mut self, data: &[u8]) {
        self.buffer.extend_from_slice(data);
    }

    /// The next whole message, or why the body is refused (its failure kind and
    /// message).
    pub fn next_message(&mut self) -> Option<Result<Bytes, (&'static str, String)>> {
        if self.buffer.len() < 5 {
            return None;
        }
        if self.buffer[0] != 0 {
            let message = "a message came compressed, and redline offers no compression";
            return Some(Err(("invalid_grpc", message.into())));
        }
        let prefix = [
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
            self.buffer[4],
        ];
        let len = u32::from_be_bytes(prefix) as usize;
        if len > self.limit {
            let message = format!("a message of {len} bytes, over the limit of {}", self.limit);
            return Some(Err(("too_large", message)));
        }
        if self.buffer.len() < 5 + len {
            return None;
        }
        self.buffer.advance(5);
        Some(Ok(self.buffer.split_to(len).freeze()))
    }

    /// Bytes of an unfinished message held.
    pub fn held(&self) -> usize {
        self.buffer.len()
    }

    pub fn has_partial(&self) -> bool {
        !self.buffer.is_empty()
    }
}
