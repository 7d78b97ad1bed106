//! Watching what passes through the proxy, and copying it elsewhere.
//!
//! A [`Tap`] sees each request whole and each answer as it streams back to the
//! caller (a recorder writes them down). A [`Mirror`] sends a copy of a share of the
//! requests to a shadow service, as Envoy's `request_mirror_policy` does: the shadow's
//! `Host` gets a `-shadow` suffix, its answer never reaches the caller, and a slow or
//! dead shadow neither delays nor fails the primary (the copy is sent from a task of
//! its own, bounded in number and time).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;

use super::{BoxError, ProxyBody};
use crate::client::tls::{Alpn, Connector, TlsSettings};
use crate::seed::{fnv64, mix_seed};

/// Largest request body the proxy holds to record or mirror; a larger one is refused
/// with 413 rather than passed through unseen.
pub const MAX_CAPTURED_BODY: usize = 64 << 20;

/// Sees every exchange that passes.
pub trait Tap: Send + Sync {
    /// A request about to go upstream, with its body whole: the watch of its answer,
    /// and when it is `mirrored`, the watch of the shadow's.
    fn request(
        &self,
        head: &Parts,
        body: &Bytes,
        mirrored: bool,
    ) -> (Box<dyn Watch>, Option<Box<dyn Watch>>);
}

/// Sees one answer as it streams: its head, its data, its end (once).
pub trait Watch: Send {
    fn head(&mut self, status: u16, headers: &hyper::HeaderMap);
    fn data(&mut self, data: &[u8]);
    /// The answer ended: whole (`None`), or broken for the reason given.
    fn end(&mut self, error: Option<String>);
}

/// Where copies go, and how many.
#[derive(Debug, Clone)]
pub struct MirrorConfig {
    pub to: Uri,
    /// Share of requests copied, rolled per request (by its `traceparent` when it has
    /// one, so a replay mirrors the same requests).
    pub fraction: f64,
    /// Appended to the `Host` the shadow sees (Envoy's default: `-shadow`).
    pub host_suffix: String,
    /// Longest a copy may take before it is abandoned.
    pub timeout: Duration,
    /// Most copies in flight; beyond it a copy is skipped (and counted).
    pub max_in_flight: usize,
}

impl MirrorConfig {
    pub fn new(to: Uri, fraction: f64) -> MirrorConfig {
        MirrorConfig {
            to,
            fraction,
            host_suffix: "-shadow".into(),
            timeout: Duration::from_secs(30),
            max_in_flight: 1024,
        }
    }
}

/// What happened to the copies.
#[derive(Debug, Default)]
pub struct MirrorCounters {
    pub sent: AtomicU64,
    pub answered: AtomicU64,
    pub failed: AtomicU64,
    /// Not sent: too many copies already in flight.
    pub skipped: AtomicU64,
}

/// A running mirror: its own connections, apart from the primary's.
pub struct Mirror {
    config: MirrorConfig,
    client: Client<Connector, Full<Bytes>>,
    in_flight: Arc<tokio::sync::Semaphore>,
    seed: u64,
    pub counters: Arc<MirrorCounters>,
}

impl Mirror {
    pub fn new(config: MirrorConfig, tls: Option<&TlsSettings>, seed: u64) -> Mirror {
        let connector = Connector::new(Duration::from_secs(10), tls, Alpn::Http1);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        Mirror {
            in_flight: Arc::new(tokio::sync::Semaphore::new(config.max_in_flight)),
            config,
            client,
            seed,
            counters: Arc::default(),
        }
    }

    /// Whether this request is copied.
    pub fn rolls(&self, head: &Parts) -> bool {
        let key = head
            .headers
            .get("traceparent")
            .map_or_else(rand::random, |tp| fnv64(tp.as_bytes()));
        let draw = mix_seed(&[self.seed, 0x6d69_7272_6f72, key]);
        ((draw >> 11) as f64 / (1u64 << 53) as f64) < self.config.fraction
    }

    /// Sends a copy from a task of its own; its answer goes to `watch` and nowhere else.
    pub fn send(&self, head: &Parts, body: Bytes, mut watch: Option<Box<dyn Watch>>) {
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            self.counters.skipped.fetch_add(1, Ordering::Relaxed);
            if let Some(watch) = &mut watch {
                watch.end(Some("skipped: too many copies in flight".into()));
            }
            return;
        };
        let request = self.copy(head, body);
        let client = self.client.clone();
        let counters = self.counters.clone();
        let timeout = self.config.timeout;
        counters.sent.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _permit = permit;
            let outcome =
                tokio::time::timeout(timeout, exchange(client, request, &mut watch)).await;
            let error = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(error),
                Err(_) => Some(format!("timeout: no whole answer within {timeout:?}")),
            };
            let counter = match error {
                None => &counters.answered,
                Some(_) => &counters.failed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            if let Some(watch) = &mut watch {
                watch.end(error);
            }
        });
    }

    /// The request as the shadow gets it: its path under the shadow's address, its
    /// headers (so `traceparent` and `baggage` too) with the host suffixed.
    fn copy(&self, head: &Parts, body: Bytes) -> Request<Full<Bytes>> {
        let path = head.uri.path_and_query().map_or("/", |p| p.as_str());
        let base = self.config.to.to_string();
        let uri = format!("{}{path}", base.trim_end_matches('/'));
        let host = head
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| head.uri.authority().map(|a| a.to_string()))
            .unwrap_or_default();
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = head.method.clone();
        *request.uri_mut() = uri.parse().unwrap_or_else(|_| self.config.to.clone());
        *request.headers_mut() = head.headers.clone();
        let headers = request.headers_mut();
        super::strip_hop_by_hop(headers);
        let shadow_host = format!("{host}{}", self.config.host_suffix);
        if let Ok(value) = HeaderValue::from_str(&shadow_host) {
            headers.insert(header::HOST, value);
        }
        request
    }
}

/// One copy's round trip, its answer read to the end into `watch`.
async fn exchange(
    client: Client<Connector, Full<Bytes>>,
    request: Request<Full<Bytes>>,
    watch: &mut Option<Box<dyn Watch>>,
) -> Result<(), String> {
    let response = client
        .request(request)
        .await
        .map_err(|e| crate::client::chain_message(&e))?;
    if let Some(watch) = watch {
        watch.head(response.status().as_u16(), response.headers());
    }
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| crate::client::chain_message(&e))?;
        if let (Some(watch), Some(data)) = (watch.as_mut(), frame.data_ref()) {
            watch.data(data);
        }
    }
    Ok(())
}

/// The request's body read whole (for a tap or a mirror), bounded.
pub async fn capture(body: Incoming) -> Result<Bytes, String> {
    let limited = http_body_util::Limited::new(body, MAX_CAPTURED_BODY);
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(format!(
            "the request body is over {} MiB, more than the proxy records or mirrors",
            MAX_CAPTURED_BODY >> 20
        )),
        Err(error) => Err(format!("the request's body broke: {error}")),
    }
}

/// `body` as the caller gets it, each frame shown to `watch` on the way.
pub fn watched(body: ProxyBody, watch: Box<dyn Watch>) -> ProxyBody {
    WatchedBody {
        inner: body,
        watch: Some(watch),
    }
    .boxed_unsync()
}

struct WatchedBody {
    inner: ProxyBody,
    watch: Option<Box<dyn Watch>>,
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(watch), Some(data)) = (self.watch.as_mut(), frame.data_ref()) {
                    watch.data(data);
                }
            }
            Poll::Ready(Some(Err(error))) => {
                let message = error.to_string();
                if let Some(mut watch) = self.watch.take() {
                    watch.end(Some(message));
                }
            }
            Poll::Ready(None) => {
                if let Some(mut watch) = self.watch.take() {
                    watch.end(None);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for WatchedBody {
    fn drop(&mut self) {
        if let Some(mut watch) = self.watch.take() {
            watch.end(Some("the caller went away before the answer ended".into()));
        }
    }
}
