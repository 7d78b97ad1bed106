//! A connection of one's own. A closed-loop slot sends one request at a time and
//! waits for each answer, so it needs no pool: it keeps one HTTP/1.1 connection and
//! sends on it directly, as oha's workers do. Under callgrind the shared pool cost
//! 10,900 instructions a request (the origin hashed, a lock taken twice, a lazy
//! connect built and dropped), nearly half of oha's whole cost per request.
//!
//! What the pool gave is kept: a new connection's TCP and TLS times go into the first
//! record it carries, a connection the server closed between two requests is replaced
//! before the request goes out (and a request it did not take is sent again on the
//! new one), and a TLS alert that closed a new connection is the reason given.

use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Body;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HOST, HeaderValue};
use hyper::http::uri::Authority;
use hyper::{Request, Response, Uri};

use super::SendError;
use super::tls::{ConnectionTimes, Connector, FailureMemo};

/// One slot's connection, opened at its first request and again whenever the server
/// closed it. `B` is the request body: the client's are whole (`Full`), the chaos
/// proxy's stream through from its caller.
pub struct Lane<B = Full<Bytes>> {
    connector: Connector,
    failures: FailureMemo,
    open: Mutex<Option<SendRequest<B>>>,
    /// The `Host` of the origin last sent to, made once: parsing the authority's
    /// port again for every request cost 300 instructions of about 30,000.
    host: Mutex<Option<KnownHost>>,
}

/// An origin (scheme and authority) and the `Host` value that names it.
struct KnownHost {
    https: bool,
    authority: Authority,
    value: HeaderValue,
}

impl<B> Lane<B>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    pub fn new(connector: Connector) -> Lane<B> {
        Lane {
            failures: connector.failures(),
            connector,
            open: Mutex::new(None),
            host: Mutex::new(None),
        }
    }

    /// Sends `request` (an absolute URI, as the pool takes it) on this lane's
    /// connection, opening one when there is none or the last one closed.
    pub async fn send(
        &self,
        mut request: Request<B>,
    ) -> Result<Response<hyper::body::Incoming>, SendError> {
        let target = request.uri().clone();
        to_origin_form(
            &mut request,
            &mut self.host.lock().unwrap_or_else(|p| p.into_inner()),
        )?;
        let mut kept = self.take();
        loop {
            let reused = kept.is_some();
            let (mut sender, times) = match kept.take() {
                Some(sender) => (sender, None),
                None => {
                    let (sender, times) = self.connect(&target).await?;
                    (sender, Some(times))
                }
            };
            let asked = Instant::now();
            if sender.ready().await.is_err() {
                // Closed by the server while idle (a keep-alive timeout): the request
                // never left, so a new connection takes it.
                if reused {
                    continue;
                }
                return Err(self.closed_before_sending(asked));
            }
            match sender.try_send_request(request).await {
                Ok(mut response) => {
                    if let Some(times) = times {
                        response.extensions_mut().insert(times);
                    }
                    self.put(sender);
                    return Ok(response);
                }
                Err(mut error) => match error.take_message() {
                    // Not written: an idle connection that closed as it was taken.
                    Some(unsent) if reused => request = unsent,
                    Some(_) => return Err(self.closed_before_sending(asked)),
                    None => {
                        return Err(self.failed_after_sending(error.into_error(), reused, asked));
                    }
                },
            }
        }
    }

    fn take(&self) -> Option<SendRequest<B>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.take().filter(|sender| !sender.is_closed())
    }

    fn put(&self, sender: SendRequest<B>) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = Some(sender);
    }

    async fn connect(&self, target: &Uri) -> Result<(SendRequest<B>, ConnectionTimes), SendError> {
        use tower_service::Service;
        let conn = self.connector.clone().call(target.clone()).await?;
        let times = conn.times().clone();
        let (sender, connection) = http1::handshake(conn).await.map_err(SendError::Http)?;
        // The connection's own errors reach the request it was carrying.
        tokio::spawn(connection);
        Ok((sender, times))
    }

    /// A new connection closed before the request went out: by a TLS alert (a TLS
    /// 1.3 server refusing the client's certificate) when its memo heard one.
    fn closed_before_sending(&self, asked: Instant) -> SendError {
        match self.failures.alert_since(asked) {
            Some(reason) => SendError::ClosedByTls(reason),
            None => SendError::ClosedBeforeSending,
        }
    }

    /// A connection that failed with the request written: on a new connection, a TLS
    /// alert its memo heard since is the reason (the refused client certificate
    /// arrives just after the request went out), else hyper's error.
    fn failed_after_sending(&self, error: hyper::Error, reused: bool, asked: Instant) -> SendError {
        match self.failures.alert_since(asked).filter(|_| !reused) {
            Some(reason) => SendError::ClosedByTls(reason),
            None => SendError::Http(error),
        }
    }
}

/// What hyper's pool does for HTTP/1.1: the path alone on the request line, the
/// authority in `Host` (without the scheme's default port). `known` is the origin
/// last sent to, kept for the next request.
fn to_origin_form<B>(
    request: &mut Request<B>,
    known: &mut Option<KnownHost>,
) -> Result<(), SendError> {
    let uri = request.uri();
    let authority = uri.authority().ok_or(SendError::NoAuthority)?;
    let host = if request.headers().contains_key(HOST) {
        None
    } else {
        let https = uri.scheme_str() == Some("https");
        match known {
            // Compared byte for byte: `Authority`'s own `==` ignores ASCII case one
            // byte at a time (280 instructions).
            Some(host) if host.https == https && host.authority.as_str() == authority.as_str() => {
                Some(host.value.clone())
            }
            _ => {
                let value = host_value(authority, https)?;
                *known = Some(KnownHost {
                    https,
                    authority: authority.clone(),
                    value: value.clone(),
                });
                Some(value)
            }
        }
    };
    let path = uri
        .path_and_query()
        .map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()));
    *request.uri_mut() = path;
    if let Some(host) = host {
        request.headers_mut().insert(HOST, host);
    }
    Ok(())
}

/// The `Host` that names `authority`: without the port when it is the scheme's default.
fn host_value(authority: &Authority, https: bool) -> Result<HeaderValue, SendError> {
    let default_port = if https { 443 } else { 80 };
    let host = match authority.port_u16() {
        Some(port) if port == default_port => authority.host(),
        _ => authority.as_str(),
    };
    HeaderValue::from_str(host).map_err(|_| SendError::NoAuthority)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server answering `ok` to every request on a connection, closing each after
    /// `per_connection` answers (saying so in the last one); it counts connections.
    async fn server(
        per_connection: usize,
    ) -> (Uri, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}/ok", listener.local_addr().unwrap());
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::spawn(async move {
                    let mut buf = vec![0; 4096];
                    for answered in 1..=per_connection {
                        let mut head = Vec::new();
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            let Ok(n @ 1..) = socket.read(&mut buf).await else {
                                return;
                            };
                            head.extend_from_slice(&buf[..n]);
                        }
                        assert!(head.starts_with(b"GET /ok HTTP/1.1\r\n"), "{head:?}");
                        let close = if answered == per_connection {
                            "connection: close\r\n"
                        } else {
                            ""
                        };
                        let answer =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n{close}\r\nok");
                        socket.write_all(answer.as_bytes()).await.unwrap();
                    }
                });
            }
        });
        (uri.parse().unwrap(), accepted)
    }

    /// Sends `n` requests one after another, reading each body; how many of the
    /// answers carried their connection's times (the first on each connection).
    async fn send_all(lane: &Lane, uri: &Uri, n: usize) -> usize {
        use http_body_util::BodyExt;
        let mut new_connections = 0;
        for _ in 0..n {
            let mut request = Request::new(Full::new(Bytes::new()));
            *request.uri_mut() = uri.clone();
            let response = lane.send(request).await.unwrap();
            new_connections += usize::from(ConnectionTimes::of_new_connection(&response).is_some());
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
        }
        new_connections
    }

    fn plain_lane() -> Lane {
        let timeout = std::time::Duration::from_secs(5);
        Lane::new(Connector::new(
            timeout,
            None,
            super::super::tls::Alpn::Http1,
        ))
    }

    #[tokio::test]
    async fn one_connection_carries_every_request_and_its_times_come_once() {
        let (uri, accepted) = server(usize::MAX).await;
        let lane = plain_lane();
        assert_eq!(send_all(&lane, &uri, 20).await, 1);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_closes_is_replaced_and_nothing_fails() {
        let (uri, accepted) = server(3).await;
        let lane = plain_lane();
        // 3 answers a connection: 7 connections for 20 requests, each timed once.
        assert_eq!(send_all(&lane, &uri, 20).await, 7);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 7);
    }

    fn origin_form(uri: &str) -> (String, Option<String>) {
        origin_form_after(uri, &mut None)
    }

    fn origin_form_after(uri: &str, known: &mut Option<KnownHost>) -> (String, Option<String>) {
        let mut request = Request::new(Full::new(Bytes::new()));
        *request.uri_mut() = uri.parse().unwrap();
        to_origin_form(&mut request, known).unwrap();
        let host = request
            .headers()
            .get(HOST)
            .map(|h| h.to_str().unwrap().to_owned());
        (request.uri().to_string(), host)
    }

    #[test]
    fn requests_go_out_in_origin_form_with_the_host_the_pool_would_send() {
        assert_eq!(
            origin_form("http://127.0.0.1:8000/v1/chat?x=1"),
            ("/v1/chat?x=1".into(), Some("127.0.0.1:8000".into()))
        );
        assert_eq!(
            origin_form("http://example.com:80"),
            ("/".into(), Some("example.com".into()))
        );
        assert_eq!(
            origin_form("https://example.com:443/a"),
            ("/a".into(), Some("example.com".into()))
        );
        assert_eq!(
            origin_form("https://example.com:8443/a"),
            ("/a".into(), Some("example.com:8443".into()))
        );
    }

    #[test]
    fn the_host_kept_from_the_last_request_is_used_only_for_the_same_origin() {
        let mut known = None;
        let host = |uri, known: &mut Option<KnownHost>| origin_form_after(uri, known).1.unwrap();
        assert_eq!(host("http://example.com:80/a", &mut known), "example.com");
        assert_eq!(host("http://example.com:80/b", &mut known), "example.com");
        // Port 80 is not https's default: the same authority names another host.
        assert_eq!(
            host("https://example.com:80/a", &mut known),
            "example.com:80"
        );
        assert_eq!(
            host("https://other.example:443/", &mut known),
            "other.example"
        );
    }
}
