//! Waiting for a started server from outside: its port accepting connections, then
//! its ready endpoint answering 2xx. Both polled, both bounded, both failing at once
//! when the process exits.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;

use super::process::Server;
use crate::client::{self, HttpClient};

/// Between two tries at the port.
const PORT_POLL: Duration = Duration::from_millis(2);
/// Between two tries at the ready endpoint.
const READY_POLL: Duration = Duration::from_millis(5);
/// Longest one ready check may take.
pub const READY_CHECK: Duration = Duration::from_secs(5);

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Waits until `addr` accepts a connection; ms since `start`.
pub async fn port_open(
    addr: SocketAddr,
    server: &mut Server,
    start: Instant,
    deadline: Instant,
) -> Result<f64, String> {
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(ms(start));
        }
        if let Some(exited) = server.exited() {
            return Err(exited);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "nothing listened on {addr} within {:.0} s",
                deadline.duration_since(start).as_secs_f64()
            ));
        }
        tokio::time::sleep(PORT_POLL).await;
    }
}

/// Waits until `GET ready` answers 2xx; ms since `start`. Refused connections and 503
/// ("loading", as llama.cpp says) mean not yet; any other status is an error, since a
/// ready endpoint that answers it will not turn ready by waiting.
pub async fn ready(
    http: &HttpClient,
    ready: &Uri,
    server: &mut Server,
    start: Instant,
    deadline: Instant,
) -> Result<f64, String> {
    loop {
        let request = get(ready);
        let last = match client::exchange(http, request, Instant::now() + READY_CHECK).await {
            Ok((status, _)) if (200..300).contains(&status) => return Ok(ms(start)),
            Ok((503, body)) => format!("503 {}", cut(&body)),
            Ok((status, body)) => {
                return Err(format!(
                    "GET {ready} answered {status} {}: a ready endpoint answers 503 while loading and 2xx when ready",
                    cut(&body)
                ));
            }
            Err(e) => e,
        };
        if let Some(exited) = server.exited() {
            return Err(exited);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "not ready within {:.0} s: GET {ready} last answered {last}",
                deadline.duration_since(start).as_secs_f64()
            ));
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// `GET uri` with no body.
pub fn get(uri: &Uri) -> hyper::Request<Full<Bytes>> {
    hyper::Request::get(uri.clone())
        .body(Full::new(Bytes::new()))
        .expect("a URI and no headers make a valid request")
}

/// A body cut to a line, for an error.
pub fn cut(body: &str) -> String {
    crate::record::cut_to(body.trim(), 200)
}
