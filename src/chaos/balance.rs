//! The proxy's upstreams: one, or replicas balanced round robin or to the least in
//! flight, with passive health checks in Envoy's manner (outlier detection on gateway
//! failures): a replica that fails `eject_after` requests in a row — a refused or
//! broken connection, or a 502/503/504 — is left out for `eject_for` times the number
//! of its ejections so far (capped at ten), then tried again with live traffic.
//!
//! A request a replica never took (the connection failed) or refused unprocessed (503)
//! is retried on another replica when retries are on: neither reached a model, so
//! resending cannot run it twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::Uri;
use hyper::http::uri::{Authority, Scheme};

/// Which replica takes the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    RoundRobin,
    /// The replica with the fewest requests in flight (streams count until their
    /// body ends); ties go round robin.
    LeastInFlight,
}

/// Passive health: when a replica is left out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ejection {
    /// Gateway failures in a row that eject a replica.
    pub after: u32,
    /// How long the first ejection lasts; the n-th lasts n times as long (up to 10).
    pub base: Duration,
}

/// How the proxy spreads requests over its upstreams.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Balance {
    pub policy: Policy,
    /// None: every replica takes traffic whatever it answers.
    pub ejection: Option<Ejection>,
    /// Resend a request that no replica took to another replica.
    pub retry: bool,
}

/// Longest ejection, in multiples of the base.
const MOST_EJECTIONS: u32 = 10;

/// One upstream and what the proxy knows of it.
#[derive(Debug)]
pub struct Upstream {
    /// `scheme://authority`.
    pub origin: String,
    /// The upstream URL's path, without a trailing `/`.
    pub prefix: String,
    /// The origin's parts, parsed once: each request's URI is built from them.
    pub scheme: Scheme,
    pub authority: Option<Authority>,
    in_flight: AtomicU64,
    failures_in_a_row: AtomicU32,
    /// Microseconds since the pool's start until which it is left out (0: never).
    ejected_until_us: AtomicU64,
    /// Set by whoever is restarting it, so the proxy can name restarts as the cause of
    /// what failed on it. Never read for routing: a balancer cannot know it.
    restarting: AtomicBool,
    pub counts: UpstreamCounts,
}

/// What happened at one upstream.
#[derive(Debug, Default)]
pub struct UpstreamCounts {
    pub requests: AtomicU64,
    /// Gateway failures: refused or broken connections, 502, 503, 504.
    pub failures: AtomicU64,
    pub ejections: AtomicU64,
    /// Requests resent elsewhere after this upstream did not take them.
    pub retried: AtomicU64,
}

/// The upstreams with their balancing.
#[derive(Debug)]
pub struct Pool {
    pub upstreams: Vec<Upstream>,
    pub balance: Balance,
    next: AtomicUsize,
    started: Instant,
}

impl Pool {
    pub fn new(upstreams: &[Uri], balance: Balance) -> Pool {
        Pool {
            upstreams: upstreams.iter().map(Upstream::new).collect(),
            balance,
            next: AtomicUsize::new(0),
            started: Instant::now(),
        }
    }

    fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// The upstream for a request's next try, none of `tried`: a healthy one by the
    /// policy; when every untried one is ejected, the one whose ejection ends first
    /// (Envoy's panic mode: sending somewhere beats answering 503 from the proxy).
    pub fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.upstreams.len();
        if n == 1 {
            return tried.is_empty().then_some(0);
        }
        let now = self.now_us();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let order = (0..n)
            .map(|k| (start + k) % n)
            .filter(|i| !tried.contains(i));
        let healthy = order
            .clone()
            .filter(|&i| self.upstreams[i].ejected_until_us.load(Ordering::Relaxed) <= now);
        let chosen = match self.balance.policy {
            Policy::RoundRobin => healthy.clone().next(),
            Policy::LeastInFlight => healthy
                .clone()
                .min_by_key(|&i| self.upstreams[i].in_flight.load(Ordering::Relaxed)),
        };
        chosen.or_else(|| {
            order.min_by_key(|&i| self.upstreams[i].ejected_until_us.load(Ordering::Relaxed))
        })
    }

    /// A request is on its way to upstream `i`; its guard ends it when dropped.
    pub fn begin(self: &Arc<Self>, i: usize) -> InFlight {
        let upstream = &self.upstreams[i];
        upstream.counts.requests.fetch_add(1, Ordering::Relaxed);
        upstream.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight {
            pool: self.clone(),
            i,
        }
    }

    /// Upstream `i` answered (anything but a gateway failure).
    pub fn answered(&self, i: usize) {
        self.upstreams[i]
            .failures_in_a_row
            .store(0, Ordering::Relaxed);
    }

    /// Upstream `i` failed a request: counted, and ejected when it has failed enough
    /// in a row. True when this failure ejected it.
    pub fn failed(&self, i: usize) -> bool {
        let upstream = &self.upstreams[i];
        upstream.counts.failures.fetch_add(1, Ordering::Relaxed);
        let in_a_row = upstream.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(ejection) = self.balance.ejection else {
            return false;
        };
        if in_a_row < ejection.after || self.upstreams.len() == 1 {
            return false;
        }
        upstream.failures_in_a_row.store(0, Ordering::Relaxed);
        let times = upstream.counts.ejections.fetch_add(1, Ordering::Relaxed) + 1;
        let lasts = ejection.base * (times as u32).min(MOST_EJECTIONS);
        let until = self.now_us() + lasts.as_micros() as u64;
        upstream
            .ejected_until_us
            .fetch_max(until, Ordering::Relaxed);
        true
    }

    /// Whether a request that upstream `i` did not take may go to another.
    pub fn may_retry(&self, tried: &[usize]) -> bool {
        self.balance.retry && tried.len() < self.upstreams.len()
    }

    pub fn set_restarting(&self, i: usize, restarting: bool) {
        self.upstreams[i]
            .restarting
            .store(restarting, Ordering::Relaxed);
    }

    pub fn is_restarting(&self, i: usize) -> bool {
        self.upstreams[i].restarting.load(Ordering::Relaxed)
    }

    pub fn any_restarting(&self) -> bool {
        (0..self.upstreams.len()).any(|i| self.is_restarting(i))
    }
}

impl Upstream {
    fn new(uri: &Uri) -> Upstream {
        Upstream {
            origin: format!(
                "{}://{}",
                uri.scheme_str().unwrap_or("http"),
                uri.authority().map_or("", |a| a.as_str())
            ),
            prefix: uri.path().trim_end_matches('/').to_owned(),
            scheme: uri.scheme().cloned().unwrap_or(Scheme::HTTP),
            authority: uri.authority().cloned(),
            in_flight: AtomicU64::new(0),
            failures_in_a_row: AtomicU32::new(0),
            ejected_until_us: AtomicU64::new(0),
            restarting: AtomicBool::new(false),
            counts: UpstreamCounts::default(),
        }
    }
}

/// A request in flight at an upstream, until dropped (with the response's body).
pub struct InFlight {
    pool: Arc<Pool>,
    i: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.pool.upstreams[self.i]
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether a status is a gateway failure (the replica, not the request, is at fault).
pub fn is_gateway_failure(status: u16) -> bool {
    matches!(status, 502..=504)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize, balance: Balance) -> Arc<Pool> {
        let uris: Vec<Uri> = (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 9000 + i).parse().unwrap())
            .collect();
        Arc::new(Pool::new(&uris, balance))
    }

    #[test]
    fn round_robin_takes_turns_and_skips_what_was_tried() {
        let p = pool(3, Balance::default());
        let picks: Vec<usize> = (0..6).map(|_| p.pick(&[]).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        let retry = p.pick(&[0]).unwrap();
        assert_ne!(retry, 0);
        assert_eq!(p.pick(&[0, 1, 2]), None);
    }

    #[test]
    fn least_in_flight_goes_where_fewest_are_waiting() {
        let p = pool(
            3,
            Balance {
                policy: Policy::LeastInFlight,
                ..Balance::default()
            },
        );
        let a = p.begin(0);
        let _b = p.begin(0);
        let _c = p.begin(1);
        assert_eq!(p.pick(&[]), Some(2));
        let _d = p.begin(2);
        let _e = p.begin(2);
        assert_eq!(p.pick(&[]), Some(1));
        drop(a);
        let _f = p.begin(1);
        // 0: 1 in flight, 1: 2, 2: 2.
        assert_eq!(p.pick(&[]), Some(0));
    }

    #[test]
    fn failures_in_a_row_eject_for_longer_each_time_and_an_answer_resets_the_count() {
        let base = Duration::from_millis(200);
        let p = pool(
            2,
            Balance {
                ejection: Some(Ejection { after: 2, base }),
                ..Balance::default()
            },
        );
        assert!(!p.failed(0));
        p.answered(0);
        assert!(!p.failed(0), "the answer between reset the count");
        assert!(p.failed(0), "two in a row eject");
        assert!((0..4).all(|_| p.pick(&[]) == Some(1)));
        // Every untried replica ejected: the one back first still gets the request.
        assert_eq!(p.pick(&[1]), Some(0));
        std::thread::sleep(base + Duration::from_millis(50));
        assert!((0..4).any(|_| p.pick(&[]) == Some(0)), "back after 200 ms");
        p.failed(0);
        assert!(p.failed(0));
        std::thread::sleep(base + Duration::from_millis(50));
        assert!(
            (0..4).all(|_| p.pick(&[]) == Some(1)),
            "the second lasts 400 ms"
        );
        assert_eq!(p.upstreams[0].counts.ejections.load(Ordering::Relaxed), 2);
        assert_eq!(p.upstreams[0].counts.failures.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn without_ejection_a_failing_replica_keeps_its_turn() {
        let p = pool(2, Balance::default());
        for _ in 0..5 {
            assert!(!p.failed(0));
        }
        let picks: Vec<usize> = (0..4).map(|_| p.pick(&[]).unwrap()).collect();
        assert_eq!(picks, [0, 1, 0, 1]);
        assert!(!p.may_retry(&[0]));
    }
}
