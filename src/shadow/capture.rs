//! The capture: a [`Tap`] on the chaos proxy that writes each exchange to a
//! recording as its answer ends (so a killed capture keeps every exchange that
//! finished), secrets redacted before anything is written.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use hyper::HeaderMap;
use hyper::http::request::Parts;

use super::recording::{
    ALWAYS_REDACTED, Body, Event, Exchange, FORMAT, Manifest, REDACTED, RecordedRequest,
    RecordedResponse, Role, VERSION,
};
use crate::chaos::{Tap, Watch};
use crate::client::sse::{DEFAULT_MAX_EVENT_BYTES, SseDecoder};

/// Bodies up to this size are kept inline in `exchanges.jsonl`.
pub const INLINE_BODY_LIMIT: usize = 256 << 10;
/// Largest answer body recorded; the rest of a larger one is passed on, not kept.
const MAX_RECORDED_ANSWER: usize = 64 << 20;

/// Writes one recording; cheap to clone.
#[derive(Clone)]
pub struct Capture {
    shared: Arc<Shared>,
}

struct Shared {
    dir: PathBuf,
    /// Header names (lower case) recorded as `[redacted]`; fixed at creation, so
    /// reading them takes no lock.
    redacted: Vec<String>,
    out: Mutex<std::io::BufWriter<std::fs::File>>,
    /// As written at the start; `finish` writes a copy with the end and count.
    manifest: Manifest,
    started: Instant,
    next_seq: AtomicU64,
    written: AtomicU64,
}

impl Capture {
    /// Starts a recording in `dir` (created; refused when it already holds one).
    /// `redact` names headers to redact besides [`ALWAYS_REDACTED`].
    pub fn create(
        dir: &Path,
        upstream: &str,
        mirror: Option<&str>,
        redact: &[String],
    ) -> Result<Capture> {
        let exchanges = dir.join("exchanges.jsonl");
        if exchanges.metadata().is_ok_and(|m| m.len() > 0) {
            bail!(
                "{} already holds a recording; choose another folder",
                dir.display()
            );
        }
        std::fs::create_dir_all(dir.join("bodies"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let mut redacted: Vec<String> = ALWAYS_REDACTED.iter().map(|h| h.to_string()).collect();
        redacted.extend(redact.iter().map(|h| h.trim().to_ascii_lowercase()));
        redacted.sort();
        redacted.dedup();
        let manifest = Manifest {
            format: FORMAT.into(),
            version: VERSION,
            started_unix_ms: unix_ms(),
            ended_unix_ms: None,
            upstream: upstream.into(),
            mirror: mirror.map(str::to_owned),
            redacted_headers: redacted.clone(),
            inline_body_limit: INLINE_BODY_LIMIT,
            exchanges: None,
        };
        write_manifest(dir, &manifest)?;
        let file = std::fs::File::create(&exchanges)
            .with_context(|| format!("cannot create {}", exchanges.display()))?;
        Ok(Capture {
            shared: Arc::new(Shared {
                dir: dir.to_owned(),
                redacted,
                out: Mutex::new(std::io::BufWriter::new(file)),
                manifest,
                started: Instant::now(),
                next_seq: AtomicU64::new(0),
                written: AtomicU64::new(0),
            }),
        })
    }

    /// Exchanges written so far.
    pub fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Ends the recording: the manifest gets its end and count.
    pub fn finish(&self) -> Result<()> {
        let shared = &self.shared;
        shared.out.lock().expect("writes do not panic").flush()?;
        let manifest = Manifest {
            ended_unix_ms: Some(unix_ms()),
            exchanges: Some(self.written()),
            ..shared.manifest.clone()
        };
        write_manifest(&shared.dir, &manifest)
    }
}

fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<()> {
    let path = dir.join("manifest.json");
    let text = serde_json::to_string_pretty(manifest)? + "\n";
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Shared {
    /// Headers as recorded: lower-case names, in order, secrets replaced.
    fn headers(&self, headers: &HeaderMap) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(name, value)| {
                let name = name.as_str().to_owned();
                let value = if self.redacted.contains(&name) {
                    REDACTED.to_owned()
                } else {
                    String::from_utf8_lossy(value.as_bytes()).into_owned()
                };
                (name, value)
            })
            .collect()
    }

    fn store(&self, bytes: &[u8], name: String) -> Body {
        let file = self.dir.join("bodies").join(&name);
        Body::store(bytes, INLINE_BODY_LIMIT, &file, &format!("bodies/{name}")).unwrap_or_else(
            |e| {
                Body::Text(format!(
                    "(not recorded: cannot write {}: {e})",
                    file.display()
                ))
            },
        )
    }

    fn write(&self, exchange: &Exchange) {
        let Ok(mut line) = serde_json::to_vec(exchange) else {
            return;
        };
        line.push(b'\n');
        let mut out = self.out.lock().expect("writes do not panic");
        // A line is flushed whole, so a killed capture leaves whole lines (and at
        // worst one cut short, which the reader skips and names).
        if out.write_all(&line).and_then(|_| out.flush()).is_ok() {
            self.written.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Tap for Capture {
    fn request(
        &self,
        head: &Parts,
        body: &Bytes,
        mirrored: bool,
    ) -> (Box<dyn Watch>, Option<Box<dyn Watch>>) {
        let shared = &self.shared;
        let seq = shared.next_seq.fetch_add(1, Ordering::Relaxed);
        let arrived = Instant::now();
        let header = |name: &str| {
            head.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let traceparent = header("traceparent");
        let trace_id = traceparent
            .as_deref()
            .and_then(crate::trace::context::parse)
            .map_or_else(
                || format!("{:032x}", rand::random::<u128>()),
                |c| c.trace_id.to_owned(),
            );
        let exchange = Exchange {
            seq,
            role: Role::Primary,
            trace_id,
            traceparent,
            baggage: header("baggage"),
            at_us: arrived.duration_since(shared.started).as_micros() as u64,
            request: RecordedRequest {
                method: head.method.to_string(),
                path: head.uri.path_and_query().map_or("/", |p| p.as_str()).into(),
                headers: shared.headers(&head.headers),
                body: shared.store(body, format!("{seq}-request.bin")),
            },
            response: RecordedResponse::default(),
        };
        let shadow = mirrored.then(|| {
            let mut copy = exchange.clone();
            copy.role = Role::Shadow;
            Box::new(AnswerWatch::new(shared.clone(), copy, arrived)) as Box<dyn Watch>
        });
        let watch = Box::new(AnswerWatch::new(shared.clone(), exchange, arrived));
        (watch, shadow)
    }
}

/// One answer being recorded.
struct AnswerWatch {
    shared: Arc<Shared>,
    exchange: Exchange,
    arrived: Instant,
    events: Option<SseDecoder>,
    body: Vec<u8>,
    cut: bool,
}

impl AnswerWatch {
    fn new(shared: Arc<Shared>, exchange: Exchange, arrived: Instant) -> AnswerWatch {
        AnswerWatch {
            shared,
            exchange,
            arrived,
            events: None,
            body: Vec::new(),
            cut: false,
        }
    }

    fn since(&self) -> u64 {
        self.arrived.elapsed().as_micros() as u64
    }
}

impl Watch for AnswerWatch {
    fn head(&mut self, status: u16, headers: &HeaderMap) {
        let response = &mut self.exchange.response;
        response.status = Some(status);
        response.headers = self.shared.headers(headers);
        response.headers_us = Some(self.arrived.elapsed().as_micros() as u64);
        let streamed = headers
            .get(hyper::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if streamed {
            self.events = Some(SseDecoder::new(DEFAULT_MAX_EVENT_BYTES));
        }
    }

    fn data(&mut self, data: &[u8]) {
        let at_us = self.since();
        self.exchange.response.first_byte_us.get_or_insert(at_us);
        if let Some(decoder) = &mut self.events {
            decoder.feed(data);
            while let Some(Ok(event)) = decoder.next_event() {
                self.exchange.response.events.push(Event {
                    at_us,
                    event: event.event,
                    data: event.data,
                });
            }
        } else if self.body.len() + data.len() <= MAX_RECORDED_ANSWER {
            self.body.extend_from_slice(data);
        } else {
            self.cut = true;
        }
    }

    fn end(&mut self, error: Option<String>) {
        let end_us = self.since();
        let role = match self.exchange.role {
            Role::Primary => "response",
            Role::Shadow => "shadow",
        };
        let name = format!("{}-{role}.bin", self.exchange.seq);
        let response = &mut self.exchange.response;
        response.end_us = Some(end_us);
        response.error = error.or_else(|| {
            self.cut.then(|| {
                format!(
                    "the answer is over {} MiB; only its start is recorded",
                    MAX_RECORDED_ANSWER >> 20
                )
            })
        });
        response.body = self.shared.store(&self.body, name);
        self.shared.write(&self.exchange);
    }
}
