//! A session's standalone GET stream (`listen`), as the SDKs' clients open one after
//! `initialize`: an SSE stream on which the server may send notifications and requests
//! outside any call. It is held open by a task of the session's own, which counts the
//! messages and answers the requests (`ping`, or "method not found"), until the
//! stream ends or the session does. Nothing on it is a call's, so nothing on it fails
//! one: its count goes into the next call's record (`mcp.heard`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::Method;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};

use super::HttpSession;
use super::wire::{Message, answer_server, on_session, parse};
use crate::client::HttpClient;
use crate::client::sse::SseDecoder;

/// Largest event read on the stream; a larger one ends it.
const MAX_EVENT_BYTES: usize = 8 << 20;

/// How long an answer to a server's request may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// The task that holds a session's GET stream; it ends with the session.
#[derive(Debug)]
pub(super) struct Listener {
    heard: Arc<AtomicU32>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    /// Opens the stream of `session` (its id and version set) in the background.
    pub(super) fn start(http: &HttpClient, session: &HttpSession) -> Listener {
        let heard = Arc::new(AtomicU32::new(0));
        let on = HttpSession {
            endpoint: session.endpoint.clone(),
            id: session.id.clone(),
            version: session.version.clone(),
            listener: None,
        };
        let task = tokio::spawn(listen(http.clone(), on, heard.clone()));
        Listener { heard, task }
    }

    /// Messages heard since the last time asked.
    pub(super) fn take_heard(&self) -> u32 {
        self.heard.swap(0, Ordering::Relaxed)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads the stream to its end: a server that offers none (405) or refuses it has
/// nothing to say outside calls.
async fn listen(http: HttpClient, session: HttpSession, heard: Arc<AtomicU32>) {
    let mut request = on_session(&session, Method::GET, bytes::Bytes::new(), "");
    request
        .headers_mut()
        .insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    let Ok(response) = crate::client::send(&http, request).await else {
        return;
    };
    let streams = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !(response.status().is_success() && streams) {
        return;
    }
    let mut body = response.into_body();
    let mut decoder = SseDecoder::new(MAX_EVENT_BYTES);
    while let Some(Ok(frame)) = body.frame().await {
        let Some(data) = frame.data_ref() else {
            continue;
        };
        decoder.feed(data);
        while let Some(event) = decoder.next_event() {
            let Ok(event) = event else { return };
            if event.data.is_empty() {
                continue;
            }
            let message = parse(event.data.as_bytes());
            if message.is_ok() {
                heard.fetch_add(1, Ordering::Relaxed);
            }
            if let Ok(Message::Request(asked)) = message {
                let traceparent = "";
                let within = Instant::now() + ANSWER_WITHIN;
                let asked = (asked.id, asked.request.method.as_str());
                answer_server(&http, &session, traceparent, asked, within).await;
            }
        }
    }
}
