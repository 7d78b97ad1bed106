//! The coordinator of a segmented run across machines: a start barrier, and the SLO
//! gate judged on the whole run while it goes.
//!
//! Workers (`redline run --segment K/N --coordinator URL`) join first; once all `N`
//! have joined, each is told one start time (a second ahead, in Unix time) and one run
//! ID, so they start together and their trace IDs name one run. While they run, each
//! pushes what it measured since its last push — its aggregator's delta, in
//! `aggregate.json`'s format (HDR histograms, which add exactly) — every
//! [`PUSH_EVERY`]. The coordinator merges the deltas and, with `abort_on_fail`, judges
//! the SLOs on the merged run as one process's gate would; once a breach is certain
//! every worker is told to stop in the answer to its next push. A worker that falls
//! silent for [`SILENCE`] is reported by its share. Nothing else passes between
//! processes: the records stay with each worker, and `redline merge` joins them after.
//!
//! The protocol is plain HTTP/1.1 and JSON (`POST /v1/join`, `POST /v1/delta`,
//! `GET /v1/status`); its types are here, for both sides.

pub mod worker;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
// tokio's clock, which a test can pause: the start, the gate's delay and silence.
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::Aggregator;
use crate::schedule::segment::Segment;
use crate::slo::{SloSet, Verdict};

/// How often a worker pushes its delta.
pub const PUSH_EVERY: Duration = Duration::from_secs(2);
/// A worker not heard from for this long after the start is reported missing.
pub const SILENCE: Duration = Duration::from_secs(10);
/// How far ahead of the last join the start is set: time for every worker to hear.
const START_LEAD: Duration = Duration::from_secs(1);

/// `POST /v1/join`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Joined {
    /// When every worker starts, Unix milliseconds.
    pub start_unix_ms: u64,
    /// The run's ID, shared by every worker (`--run-id`).
    pub run_id: u64,
}

/// `POST /v1/delta`'s answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reply {
    /// Stop now: the merged run is certain to fail these SLOs.
    pub stop: bool,
    pub breaches: Vec<Verdict>,
    /// Seconds after the start when the coordinator decided to stop.
    pub at_s: Option<f64>,
}

/// `?segment=K/N` (or `FROM:TO`) and, on the last push, `&done=true`.
#[derive(Debug, PartialEq)]
struct Who {
    segment: String,
    done: bool,
}

impl Who {
    /// From the query string; a segment's characters (digits, `.`, `/`, `:`) need no
    /// escaping, so none is undone.
    fn of(query: Option<&str>) -> Result<Who, (StatusCode, String)> {
        let mut who = Who {
            segment: String::new(),
            done: false,
        };
        for pair in query.unwrap_or("").split('&') {
            match pair.split_once('=') {
                Some(("segment", segment)) => who.segment = segment.to_owned(),
                Some(("done", done)) => who.done = done == "true",
                _ => {}
            }
        }
        if who.segment.is_empty() {
            return Err((
                StatusCode::BAD_REQUEST,
                "name the worker: ?segment=K/N".into(),
            ));
        }
        Ok(who)
    }
}

/// What the coordinator knows of one worker.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerState {
    pub pushes: u64,
    pub done: bool,
    /// When its last push came.
    #[serde(skip)]
    last_heard: Option<Instant>,
}

/// How the coordinated run stands (`GET /status`), and at its end how it ended, as
/// `redline coordinate` reports it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// Every worker by share.
    pub workers: BTreeMap<String, WorkerState>,
    /// Shares that joined but fell silent before they were done.
    pub silent: Vec<String>,
    /// The SLOs the merged run was certain to fail, when it was stopped.
    pub stopped: Option<Reply>,
    pub merged_requests: u64,
}

struct Inner {
    expected: Vec<Segment>,
    slos: Option<SloSet>,
    run_id: u64,
    workers: BTreeMap<String, WorkerState>,
    start: Option<(u64, Instant)>,
    merged: Aggregator,
    stopped: Option<Reply>,
}

/// The coordinator's state, shared by its handlers.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Mutex<Inner>>,
    /// The start, once every worker has joined.
    started: watch::Sender<Option<Joined>>,
}

impl Coordinator {
    /// A coordinator for the `n` equal shares of a run whose SLOs are `slos`.
    pub fn new(n: u32, slos: Option<SloSet>, merged: Aggregator, run_id: u64) -> Coordinator {
        let expected = (1..=n)
            .map(|k| Segment::parse(&format!("{k}/{n}")).expect("k ≤ n, both from 1"))
            .collect();
        Coordinator {
            inner: Arc::new(Mutex::new(Inner {
                expected,
                slos,
                run_id,
                workers: BTreeMap::new(),
                start: None,
                merged,
                stopped: None,
            })),
            started: watch::channel(None).0,
        }
    }

    /// Serves the coordinator on `listener` until `stop` fires, on a task of its own.
    pub fn serve(
        &self,
        listener: tokio::net::TcpListener,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<std::io::Result<()>> {
        use std::future::IntoFuture;
        let serving = axum::serve(listener, self.router())
            .with_graceful_shutdown(stop.cancelled_owned())
            .into_future();
        tokio::spawn(serving)
    }

    fn router(&self) -> Router {
        Router::new()
            .route("/v1/join", post(join))
            .route("/v1/delta", post(delta))
            .route("/v1/status", get(status))
            // A delta is a few kilobytes; a long run's last one may be more.
            .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
            .with_state(self.clone())
    }

    /// Whether every worker has joined and been given the start.
    pub fn has_started(&self) -> bool {
        self.lock().start.is_some()
    }

    /// Whether the run is over: every worker done, or silent for [`SILENCE`].
    pub fn finished(&self) -> bool {
        let inner = self.lock();
        let Some((_, started)) = inner.start else {
            return false;
        };
        inner
            .workers
            .values()
            .all(|w| w.done || w.last_heard.unwrap_or(started).elapsed() > SILENCE)
    }

    pub fn status(&self) -> Status {
        let inner = self.lock();
        Status {
            silent: inner
                .workers
                .iter()
                .filter(|(_, w)| !w.done)
                .map(|(share, _)| share.clone())
                .collect(),
            workers: inner.workers.clone(),
            stopped: inner.stopped.clone(),
            merged_requests: inner.merged.counts.scheduled,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A handler that panicked mid-update leaves counts a request short at worst.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The share `text` names, as one of the expected ones.
    fn share_of(&self, text: &str) -> Result<String, (StatusCode, String)> {
        let bad = |why: String| (StatusCode::BAD_REQUEST, why);
        let segment = Segment::parse(text).map_err(bad)?;
        let expected = &self.lock().expected;
        if !expected.contains(&segment) {
            let n = expected.len();
            return Err(bad(format!(
                "segment {segment} is not one of this run's {n} equal shares"
            )));
        }
        Ok(segment.to_string())
    }
}

/// Now, in Unix milliseconds.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Registers a worker and answers once every worker has joined.
async fn join(
    State(c): State<Coordinator>,
    RawQuery(query): RawQuery,
) -> Result<axum::Json<Joined>, (StatusCode, String)> {
    let who = Who::of(query.as_deref())?;
    let share = c.share_of(&who.segment)?;
    {
        let mut inner = c.lock();
        if inner.start.is_some() && !inner.workers.contains_key(&share) {
            return Err((StatusCode::CONFLICT, "the run has started".into()));
        }
        inner.workers.entry(share).or_insert(WorkerState {
            pushes: 0,
            done: false,
            last_heard: None,
        });
        if inner.start.is_none() && inner.workers.len() == inner.expected.len() {
            let at = unix_ms() + START_LEAD.as_millis() as u64;
            inner.start = Some((at, Instant::now() + START_LEAD));
            let joined = Joined {
                start_unix_ms: at,
                run_id: inner.run_id,
            };
            c.started.send_replace(Some(joined));
        }
    }
    let mut started = c.started.subscribe();
    let joined = started
        .wait_for(Option::is_some)
        .await
        .map_err(|_| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the coordinator is stopping".into(),
            )
        })?
        .clone()
        .expect("waited for it");
    Ok(axum::Json(joined))
}

/// Merges a worker's delta and answers whether to stop.
async fn delta(
    State(c): State<Coordinator>,
    RawQuery(query): RawQuery,
    body: String,
) -> Result<axum::Json<Reply>, (StatusCode, String)> {
    let who = Who::of(query.as_deref())?;
    let share = c.share_of(&who.segment)?;
    let delta = crate::metrics::file::parse(&body).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    let mut inner = c.lock();
    let Some((_, started)) = inner.start else {
        return Err((StatusCode::CONFLICT, "the run has not started".into()));
    };
    let Some(worker) = inner.workers.get_mut(&share) else {
        return Err((StatusCode::CONFLICT, format!("{share} did not join")));
    };
    worker.pushes += 1;
    worker.done |= who.done;
    worker.last_heard = Some(Instant::now());
    inner.merged.merge(&delta);
    if inner.stopped.is_none() {
        judge(&mut inner, started);
    }
    Ok(axum::Json(inner.stopped.clone().unwrap_or_default()))
}

/// The merged run's SLOs, once past their `delay`: a certain breach stops the run.
fn judge(inner: &mut Inner, started: Instant) {
    let Some(slos) = inner.slos.as_ref().filter(|s| s.abort_on_fail) else {
        return;
    };
    let at = Instant::now().saturating_duration_since(started);
    if at < slos.delay {
        return;
    }
    let breaches = slos.certain_breaches(&inner.merged);
    if !breaches.is_empty() {
        inner.stopped = Some(Reply {
            stop: true,
            breaches,
            at_s: Some(at.as_secs_f64()),
        });
    }
}

async fn status(State(c): State<Coordinator>) -> axum::Json<Status> {
    axum::Json(c.status())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_must_be_one_of_the_run_s() {
        let c = Coordinator::new(4, None, Aggregator::default(), 1);
        assert_eq!(c.share_of("2/4").unwrap(), "1/4:1/2");
        assert_eq!(c.share_of("1/4:1/2").unwrap(), "1/4:1/2");
        let (code, why) = c.share_of("1/3").unwrap_err();
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(
            why.contains("not one of this run's 4 equal shares"),
            "{why}"
        );
        assert!(c.share_of("nonsense").is_err());
        assert!(!c.finished(), "nobody joined");
    }

    /// One request to the coordinator's routes, no socket between: status and body.
    async fn call(c: &Coordinator, path: &str, body: String) -> (StatusCode, String) {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let request = axum::http::Request::post(path)
            .body(axum::body::Body::from(body))
            .unwrap();
        let response = c.router().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    /// A delta of `n` failed requests.
    fn failures(n: u64) -> String {
        let mut delta = Aggregator::new(None);
        for seq in 0..n {
            let mut r = crate::record::Record::unsent(seq, 0, crate::record::Phase::Measure, 0);
            r.outcome = crate::record::Outcome::Error;
            r.sent_us = Some(0);
            r.last_byte_us = Some(1_000);
            delta.add(&r);
        }
        crate::metrics::file::render(&delta).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn the_whole_run_is_stopped_at_the_first_push_past_the_delay_and_silence_is_named() {
        let yaml = "error_rate: \"< 1%\"\nabort_on_fail: true\ndelay: 5s\n";
        let mapping = yaml_serde::from_str(yaml).unwrap();
        let slos = SloSet::from_spec(&mapping, &mut crate::spec::Problems::new());
        let c = Coordinator::new(2, slos, Aggregator::new(None), 7);
        let first = tokio::spawn({
            let c = c.clone();
            async move { call(&c, "/v1/join?segment=1/2", String::new()).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!c.has_started(), "one of two has joined");
        let second = call(&c, "/v1/join?segment=2/2", String::new()).await;
        let joined: Joined = serde_json::from_str(&second.1).unwrap();
        assert_eq!((second.0, joined.run_id), (StatusCode::OK, 7));
        assert_eq!(first.await.unwrap().0, StatusCode::OK);
        let started = Instant::now() + START_LEAD;
        tokio::time::sleep_until(started).await;
        // Worker 1 pushes failures every 2 s; worker 2 never pushes.
        let mut replies = Vec::new();
        for _ in 0..3 {
            tokio::time::sleep(PUSH_EVERY).await;
            let (status, body) = call(&c, "/v1/delta?segment=1/2", failures(100)).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            replies.push(serde_json::from_str::<Reply>(&body).unwrap());
        }
        let stops: Vec<bool> = replies.iter().map(|r| r.stop).collect();
        assert_eq!(
            stops,
            [false, false, true],
            "certain from the first, judged past 5 s"
        );
        assert_eq!(replies[2].at_s, Some(6.0));
        let (status, _) = call(&c, "/v1/delta?segment=1/2&done=true", failures(0)).await;
        assert_eq!(status, StatusCode::OK);
        tokio::time::sleep_until(started + SILENCE).await;
        assert!(
            !c.finished(),
            "worker 2 is silent for exactly SILENCE, not longer"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(c.finished());
        let outcome = c.status();
        assert_eq!(outcome.silent, [c.share_of("2/2").unwrap()]);
        assert_eq!(outcome.merged_requests, 300);
        assert!(outcome.stopped.is_some_and(|r| r.stop));
    }

    #[test]
    fn a_worker_is_named_by_its_query() {
        let who = Who::of(Some("segment=1/4:1/2&done=true")).unwrap();
        assert_eq!(
            who,
            Who {
                segment: "1/4:1/2".into(),
                done: true
            }
        );
        assert!(!Who::of(Some("segment=2/4")).unwrap().done);
        assert_eq!(Who::of(None).unwrap_err().0, StatusCode::BAD_REQUEST);
    }
}
