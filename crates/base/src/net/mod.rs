//! The accept loop redline's servers share (the simulator, the chaos proxy, the trace
//! receiver): HTTP/1.1 and HTTP/2 (prior knowledge, or ALPN over TLS) on a bound
//! listener, TCP_NODELAY, one task per connection, until `shutdown`; then open
//! connections get `drain` to finish (all the time they need with `None`).

pub mod tls;

pub use tls::ServerTls;

use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnectionBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client that opens a connection and never finishes its TLS handshake gets this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves connections, over TLS when `tls` is given; `service` makes each
/// connection's service (and can count them).
pub async fn accept_loop<S, B>(
    listener: TcpListener,
    tls: Option<ServerTls>,
    builder: ConnectionBuilder<TokioExecutor>,
    mut service: impl FnMut() -> S,
    shutdown: impl Future<Output = ()>,
    drain: Option<Duration>,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let connections = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(_) => {
                    // Out of file descriptors or a connection reset before accept:
                    // transient; try again shortly rather than stop serving.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Tokens are small writes: without TCP_NODELAY, Nagle's algorithm holds each
        // one back until the previous is acknowledged, adding a delayed-ACK interval.
        let _ = tcp.set_nodelay(true);
        let service = service();
        let Some(tls) = &tls else {
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                .into_owned();
            let connection = connections.watch(connection);
            tokio::spawn(async move {
                // A client that resets its connection is its own business.
                let _ = connection.await;
            });
            continue;
        };
        // The handshake runs in the connection's task: a slow client cannot hold up
        // the accept loop.
        let (acceptor, builder, watcher) =
            (tls.acceptor.clone(), builder.clone(), connections.watcher());
        tokio::spawn(async move {
            let Ok(Ok(stream)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            else {
                return; // a failed handshake is the client's to report
            };
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            let _ = watcher.watch(connection).await;
        });
    }
    drop(listener);
    match drain {
        Some(limit) => {
            let _ = tokio::time::timeout(limit, connections.shutdown()).await;
        }
        None => connections.shutdown().await,
    }
}
