//! The proxy's account of what it injected: ground truth that a run joins to its
//! records by `traceparent`, and that `redline chaos --log` writes as JSON lines.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;

use crate::record::InjectedFault;

/// Most injections kept for joining; past it they are counted as unjoined, not kept.
const PENDING_LIMIT: usize = 1 << 20;

/// One line of the JSON-lines fault log.
#[derive(Debug, Serialize)]
struct LogLine<'a> {
    /// Microseconds since the proxy started.
    at_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a str>,
    method: &'a str,
    path: &'a str,
    #[serde(flatten)]
    fault: &'a InjectedFault,
}

/// Where injections go.
pub struct FaultLog {
    started: Instant,
    /// Injections waiting for a run's collector, by `traceparent`.
    pending: Option<Mutex<HashMap<String, Vec<InjectedFault>>>>,
    file: Option<Mutex<Box<dyn Write + Send>>>,
    /// Injections into requests without a `traceparent`, or past the pending limit:
    /// no record can claim them.
    pub unjoined: AtomicU64,
}

/// Which request an injection belongs to.
pub struct RequestId<'a> {
    pub traceparent: Option<&'a str>,
    pub method: &'a str,
    pub path: &'a str,
}

impl FaultLog {
    /// A log a run in this process takes injections from.
    pub fn for_run() -> FaultLog {
        FaultLog {
            started: Instant::now(),
            pending: Some(Mutex::new(HashMap::new())),
            file: None,
            unjoined: AtomicU64::new(0),
        }
    }

    /// A log written as JSON lines (or kept nowhere, with `None`).
    pub fn to_writer(file: Option<Box<dyn Write + Send>>) -> FaultLog {
        FaultLog {
            started: Instant::now(),
            pending: None,
            file: file.map(Mutex::new),
            unjoined: AtomicU64::new(0),
        }
    }

    pub fn note(&self, request: &RequestId<'_>, fault: InjectedFault) {
        if let Some(file) = &self.file {
            let line = LogLine {
                at_us: self.started.elapsed().as_micros() as u64,
                traceparent: request.traceparent,
                method: request.method,
                path: request.path,
                fault: &fault,
            };
            let mut file = file.lock().expect("the log writer holds no invariant");
            // A full disk loses log lines, not requests: the counters still count.
            let _ = serde_json::to_writer(&mut *file, &line);
            let _ = file.write_all(b"\n");
        }
        let Some(pending) = &self.pending else { return };
        let mut pending = pending.lock().expect("the pending map holds no invariant");
        match request.traceparent {
            Some(key) if pending.len() < PENDING_LIMIT || pending.contains_key(key) => {
                pending.entry(key.to_owned()).or_default().push(fault);
            }
            _ => {
                self.unjoined.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The injections into the request that carried `traceparent`, once.
    pub fn take(&self, traceparent: &str) -> Option<Vec<InjectedFault>> {
        self.pending
            .as_ref()?
            .lock()
            .expect("the pending map holds no invariant")
            .remove(traceparent)
    }

    /// Injections no record claimed (requests the run did not send, or never saw end).
    pub fn unclaimed(&self) -> u64 {
        let pending = self.pending.as_ref().map_or(0, |p| {
            p.lock()
                .expect("the pending map holds no invariant")
                .values()
                .map(|v| v.len() as u64)
                .sum()
        });
        pending + self.unjoined.load(Ordering::Relaxed)
    }

    pub fn flush(&self) {
        if let Some(file) = &self.file {
            let _ = file
                .lock()
                .expect("the log writer holds no invariant")
                .flush();
        }
    }
}
