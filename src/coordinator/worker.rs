//! A worker's side of the coordinator: joining the start barrier, and pushing the
//! aggregator's delta every [`PUSH_EVERY`] while the run goes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Joined, PUSH_EVERY, Reply};
use crate::client::{HttpClient, RunClock, Timeouts};
use crate::metrics::Aggregator;
use crate::record::Record;
use crate::schedule::segment::Segment;
use crate::slo::Aborted;

/// Where the coordinator is and which share this worker runs.
#[derive(Clone)]
pub struct Link {
    base: String,
    segment: Segment,
    http: HttpClient,
}

impl Link {
    /// `url` is the coordinator's base (`http://host:port`).
    pub fn new(url: &str, segment: Segment) -> Result<Link, String> {
        let base = url.trim_end_matches('/').to_owned();
        base.parse::<Uri>()
            .ok()
            .filter(|u| u.scheme().is_some() && u.authority().is_some())
            .ok_or_else(|| format!("--coordinator {url}: give http://HOST:PORT"))?;
        Ok(Link {
            base,
            segment,
            http: crate::client::http_client(&Timeouts::default(), false),
        })
    }

    fn uri(&self, path: &str, done: bool) -> Uri {
        let done = if done { "&done=true" } else { "" };
        format!("{}{path}?segment={}{done}", self.base, self.segment)
            .parse()
            .expect("checked base, a segment's digits, ':' and '/'")
    }

    async fn post(
        &self,
        path: &str,
        body: String,
        done: bool,
        wait: Duration,
    ) -> Result<String, String> {
        let request = hyper::Request::post(self.uri(path, done))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("a URI and a fixed header make a valid request");
        match crate::client::exchange(&self.http, request, Instant::now() + wait).await {
            Ok((200, body)) => Ok(body),
            Ok((status, body)) => Err(format!("the coordinator answered {status}: {body}")),
            Err(e) => Err(e),
        }
    }

    /// Joins the barrier (retrying while the coordinator is not up yet) and sleeps
    /// until the start it names; its run ID is returned.
    pub async fn join(&self, patience: Duration) -> Result<u64, String> {
        let give_up = Instant::now() + patience;
        let joined: Joined = loop {
            let left = give_up.saturating_duration_since(Instant::now());
            match self.post("/v1/join", String::new(), false, left).await {
                Ok(body) => {
                    break serde_json::from_str(&body)
                        .map_err(|e| format!("the coordinator's join answer: {e}"))?;
                }
                Err(e) if e.contains("answered") || left.is_zero() => {
                    return Err(format!("joining {}: {e}", self.base));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        };
        let wait = joined.start_unix_ms.saturating_sub(super::unix_ms());
        tokio::time::sleep(Duration::from_millis(wait)).await;
        Ok(joined.run_id)
    }
}

/// Pushes what the recorder took since the last push, and stops the run as soon as
/// an answer says so. A coordinator that cannot be reached does not stop the run: the
/// worker's own records are whole, and the failures are counted.
pub struct Pusher {
    link: Link,
    delta: Aggregator,
    empty: Aggregator,
    pending: Option<JoinHandle<Result<(), String>>>,
    /// Set by the push whose answer said stop.
    stopped: Arc<Mutex<Option<Aborted>>>,
    stop: CancellationToken,
    clock: RunClock,
    /// Pushes that failed, and the last reason.
    failed: (u32, String),
}

impl Pusher {
    /// `empty` is the run's fresh aggregator (its goodput SLOs set).
    pub fn new(link: Link, empty: Aggregator, stop: CancellationToken, clock: RunClock) -> Pusher {
        Pusher {
            link,
            delta: empty.clone(),
            empty,
            pending: None,
            stopped: Arc::default(),
            stop,
            clock,
            failed: (0, String::new()),
        }
    }

    pub fn observe(&mut self, record: &Record) {
        self.delta.add(record);
    }

    /// Every [`PUSH_EVERY`]: the delta sent, unless the last push is still on its way
    /// (the delta then grows until the next tick). Why the run was stopped, once a
    /// push's answer has stopped it.
    pub async fn tick(&mut self) -> Option<Aborted> {
        if self.pending.as_ref().is_some_and(|p| !p.is_finished()) {
            return None;
        }
        if let Some(finished) = self.pending.take() {
            self.count(finished.await);
        }
        let delta = std::mem::replace(&mut self.delta, self.empty.clone());
        let (link, stopped, stop, clock) = (
            self.link.clone(),
            self.stopped.clone(),
            self.stop.clone(),
            self.clock,
        );
        self.pending = Some(tokio::spawn(async move {
            let reply = push(&link, &delta, false).await?;
            heed(&reply, &stopped, &stop, clock);
            Ok(())
        }));
        self.take_stopped()
    }

    /// The last delta, marked done: the coordinator counts this worker finished. With
    /// the stop if an earlier answer brought one, and the pushes that failed as a
    /// sentence.
    pub async fn finish(mut self) -> (Option<Aborted>, Option<String>) {
        if let Some(pending) = self.pending.take() {
            self.count(pending.await);
        }
        // The run has ended: a stop in this answer has nothing left to stop.
        let last = push(&self.link, &self.delta, true).await.map(drop);
        self.count(Ok(last));
        let (failed, why) = &self.failed;
        let trouble = (*failed > 0).then(|| {
            format!(
                "{failed} pushes to the coordinator at {} failed (the last: {why}); it judged \
                 the run without them",
                self.link.base
            )
        });
        (self.take_stopped(), trouble)
    }

    fn take_stopped(&self) -> Option<Aborted> {
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    fn count(&mut self, pushed: Result<Result<(), String>, tokio::task::JoinError>) {
        if let Err(why) = pushed.unwrap_or_else(|e| Err(e.to_string())) {
            self.failed.0 += 1;
            self.failed.1 = why;
        }
    }
}

/// A stop in `reply` stops the run at once, and keeps why for the summary.
fn heed(
    reply: &Reply,
    stopped: &Mutex<Option<Aborted>>,
    stop: &CancellationToken,
    clock: RunClock,
) {
    if !reply.stop || stop.is_cancelled() {
        return;
    }
    *stopped.lock().unwrap_or_else(|e| e.into_inner()) = Some(Aborted {
        at_s: clock.start().elapsed().as_secs_f64(),
        breaches: reply.breaches.clone(),
        episode: None,
    });
    stop.cancel();
}

async fn push(link: &Link, delta: &Aggregator, done: bool) -> Result<Reply, String> {
    let body = crate::metrics::file::render(delta).map_err(|e| e.to_string())?;
    let answer = link.post("/v1/delta", body, done, PUSH_EVERY * 2).await?;
    serde_json::from_str(&answer).map_err(|e| format!("the coordinator's answer: {e}"))
}
