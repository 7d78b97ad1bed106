//! TLS for every connection a client opens: rustls with the system's root
//! certificates (or a private CA), client certificates for mTLS, and an explicit
//! insecure mode. The connector times the TCP connect and the TLS handshake apart and
//! hands both to the first response the new connection carries; a handshake that fails
//! says why (unknown issuer, expired, name mismatch), never just "connection error".

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::net::tls::provider;

/// What a spec or the command line says about a service's TLS.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsOptions {
    /// Trust only the CAs in this PEM file (a private CA), instead of the system's.
    pub ca_cert: Option<PathBuf>,
    /// A client certificate chain (PEM) and its key, for servers that ask (mTLS).
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// Accept any certificate: the report says so.
    pub insecure_skip_verify: bool,
}

/// The certificates a service's connections use, loaded once.
#[derive(Clone)]
pub struct TlsSettings {
    roots: Option<Arc<RootCertStore>>,
    identity: Option<Arc<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>>,
    insecure: bool,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TlsSettings")
            .field("roots", &self.roots.as_ref().map(|r| r.len()))
            .field("client_cert", &self.identity.is_some())
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// What is wrong with a TLS option, for the spec's error (the field is the caller's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsProblem {
    /// `ca_cert`, `client_cert` or `client_key`.
    pub field: &'static str,
    pub message: String,
}

fn problem(field: &'static str, message: String) -> TlsProblem {
    TlsProblem { field, message }
}

impl TlsSettings {
    /// Loads what the options name; the system's roots are read (once per process)
    /// only when no CA is given and verification is on.
    pub fn load(options: &TlsOptions) -> Result<TlsSettings, TlsProblem> {
        let roots = match (&options.ca_cert, options.insecure_skip_verify) {
            (_, true) => None,
            (Some(path), false) => Some(Arc::new(private_roots(path)?)),
            (None, false) => Some(system_roots()),
        };
        let identity = match (&options.client_cert, &options.client_key) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(problem(
                    "client_key",
                    "a client_cert needs its client_key".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(problem(
                    "client_cert",
                    "a client_key needs its client_cert".into(),
                ));
            }
            (Some(cert), Some(key)) => Some(Arc::new(identity(cert, key)?)),
        };
        let settings = TlsSettings {
            roots,
            identity,
            insecure: options.insecure_skip_verify,
        };
        // A key that does not match its certificate shows here, not at the first
        // handshake of the run.
        settings.try_config(Alpn::Http1).map_err(|e| {
            problem(
                "client_key",
                format!("cannot use the client certificate: {e}"),
            )
        })?;
        Ok(settings)
    }

    /// The system's roots, nothing else: for connections no option covers.
    pub fn system() -> TlsSettings {
        TlsSettings {
            roots: Some(system_roots()),
            identity: None,
            insecure: false,
        }
    }

    /// Certificates are not checked: reports warn about it.
    pub fn insecure(&self) -> bool {
        self.insecure
    }

    /// The rustls configuration of connections that offer `alpn`.
    pub fn config(&self, alpn: Alpn) -> Arc<ClientConfig> {
        self.try_config(alpn)
            .expect("the identity was checked when the settings were loaded")
    }

    fn try_config(&self, alpn: Alpn) -> Result<Arc<ClientConfig>, rustls::Error> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = match &self.roots {
            Some(roots) => builder.with_root_certificates(roots.clone()),
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate)),
        };
        let mut config = match &self.identity {
            Some(identity) => {
                builder.with_client_auth_cert(identity.0.clone(), identity.1.clone_key())?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![alpn.protocol().to_vec()];
        Ok(Arc::new(config))
    }
}

/// The application protocol a connection offers in its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    Http1,
    /// `h2` only: a server that will not speak it fails the connection, rather than
    /// the run silently measuring HTTP/1.1.
    Http2,
}

impl Alpn {
    fn protocol(self) -> &'static [u8] {
        match self {
            Alpn::Http1 => b"http/1.1",
            Alpn::Http2 => b"h2",
        }
    }
}

/// The system's root certificates, read once. A certificate the store cannot parse
/// is skipped (rustls-native-certs reports it); none at all leaves every handshake to
/// fail as "unknown issuer", which names the fix.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            Arc::new(roots)
        })
        .clone()
}

fn read_certs(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsProblem> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| problem(field, format!("cannot read {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(problem(
            field,
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    Ok(certs)
}

fn private_roots(path: &Path) -> Result<RootCertStore, TlsProblem> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs("ca_cert", path)? {
        roots.add(cert).map_err(|e| {
            problem(
                "ca_cert",
                format!("{}: not a CA certificate: {e}", path.display()),
            )
        })?;
    }
    Ok(roots)
}

fn identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsProblem> {
    let chain = read_certs("client_cert", cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        problem(
            "client_key",
            format!("cannot read a PEM private key from {}: {e}", key.display()),
        )
    })?;
    Ok((chain, key))
}

/// `insecure_skip_verify`: any certificate is accepted, but the handshake's
/// signatures are still checked, so the connection is at least consistent.
#[derive(Debug)]
struct AcceptAnyCertificate;

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("TLS handshake with {host} failed: {reason}")]
    Tls { host: String, reason: String },
    #[error(
        "{host} did not agree to HTTP/2 in the TLS handshake (ALPN offered h2, it chose {chosen}): set `http2: false` for this service"
    )]
    NoHttp2 { host: String, chosen: String },
    #[error(
        "no TCP connection and TLS handshake with {host} within the connect timeout ({timeout:?})"
    )]
    Timeout { host: String, timeout: Duration },
    #[error("`{0}` is not a host name TLS can verify")]
    BadServerName(String),
    #[error(transparent)]
    Tcp(Box<dyn std::error::Error + Send + Sync>),
}

impl ConnectError {
    /// The record's failure kind for it.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnectError::Tls { .. }
            | ConnectError::NoHttp2 { .. }
            | ConnectError::BadServerName(_) => "tls",
            ConnectError::Timeout { .. } => "timeout",
            ConnectError::Tcp(error) => {
                let io = std::iter::successors(
                    Some(error.as_ref() as &(dyn std::error::Error + 'static)),
                    |e| e.source(),
                )
                .find_map(|e| e.downcast_ref::<std::io::Error>());
                match io.map(std::io::Error::kind) {
                    Some(std::io::ErrorKind::ConnectionRefused) => "connect_refused",
                    Some(std::io::ErrorKind::TimedOut) => "timeout",
                    Some(std::io::ErrorKind::ConnectionReset) => "reset",
                    _ => "connect_error",
                }
            }
        }
    }
}

/// A TLS failure after the handshake (TLS 1.3 servers check a client certificate
/// then, and send their alert with the first answer): its reason, if `error` is one.
pub fn tls_failure_in(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    std::iter::successors(Some(error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .find(|io| io.get_ref().is_some_and(|e| e.is::<rustls::Error>()))
        .map(|io| tls_reason(io, None))
}

/// What a rustls handshake error means, in words a person can act on.
fn tls_reason(error: &std::io::Error, offered: Option<Alpn>) -> String {
    let Some(tls) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    else {
        return format!("{error} (the connection closed during the handshake: not a TLS server?)");
    };
    use rustls::Error as E;
    match tls {
        E::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "unknown issuer: the server's certificate is not signed by a CA this client trusts (give the CA with tls.ca_cert / --ca-cert, or skip the check with --insecure)".into()
        }
        E::InvalidCertificate(CertificateError::Expired) => "certificate expired".into(),
        E::InvalidCertificate(CertificateError::ExpiredContext { time, not_after }) => format!(
            "certificate expired: valid until {} s, now {} s (Unix time)",
            not_after.as_secs(),
            time.as_secs()
        ),
        E::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!("name mismatch: {tls}"),
        E::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => "certificate not valid yet".into(),
        E::AlertReceived(rustls::AlertDescription::NoApplicationProtocol) => match offered {
            Some(Alpn::Http2) => "the server did not agree to HTTP/2 (it refused ALPN h2): set `http2: false` for this service".into(),
            _ => "the server refused ALPN http/1.1 (an HTTP/2-only server? set `http2: true`)".into(),
        },
        E::AlertReceived(alert) => format!(
            "the server refused the handshake ({alert:?}){}",
            if matches!(
                alert,
                rustls::AlertDescription::CertificateRequired
                    | rustls::AlertDescription::BadCertificate
                    | rustls::AlertDescription::UnknownCA
            ) {
                ": it wants a client certificate it trusts (tls.client_cert, tls.client_key)"
            } else {
                ""
            }
        ),
        E::InvalidMessage(_) => format!("{tls}: the server does not speak TLS here (plain http?)"),
        other => other.to_string(),
    }
}

/// When a new connection was made, for the first response it carries.
#[derive(Debug, Clone)]
pub struct ConnectionTimes {
    /// TCP connect, microseconds.
    pub connect_us: u64,
    /// TLS handshake, microseconds (https only).
    pub tls_us: Option<u64>,
    claimed: Arc<AtomicBool>,
}

impl ConnectionTimes {
    /// The times of a response's connection, if this response is the first that
    /// connection carried (later ones reused it and paid nothing).
    pub fn of_new_connection<B>(response: &hyper::Response<B>) -> Option<ConnectionTimes> {
        let times = response.extensions().get::<ConnectionTimes>()?;
        (!times.claimed.swap(true, Ordering::Relaxed)).then(|| times.clone())
    }
}

/// What a pool's connections said when they failed: the kind and message of the last
/// failed connection attempt (cleared by the next success), and the last TLS alert
/// that closed an open connection, with when it came.
#[derive(Clone, Default)]
pub struct FailureMemo {
    connect: Arc<std::sync::Mutex<Option<(&'static str, String)>>>,
    alert: Arc<std::sync::Mutex<Option<(Instant, String)>>>,
}

impl FailureMemo {
    pub fn last(&self) -> Option<(&'static str, String)> {
        self.connect
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Why a TLS alert closed one of the pool's connections at `since` or later.
    pub fn alert_since(&self, since: Instant) -> Option<String> {
        let alert = self.alert.lock().unwrap_or_else(|p| p.into_inner());
        alert
            .as_ref()
            .filter(|(at, _)| *at >= since)
            .map(|(_, reason)| reason.clone())
    }

    fn set(&self, failure: Option<(&'static str, String)>) {
        *self.connect.lock().unwrap_or_else(|p| p.into_inner()) = failure;
    }

    /// Keeps `error`'s reason if it is a TLS error (TLS 1.3 servers reject a client
    /// certificate after the client's handshake is done, with an alert).
    fn note_read_error(&self, error: &std::io::Error) {
        if error.get_ref().is_some_and(|e| e.is::<rustls::Error>()) {
            let reason = tls_reason(error, None);
            *self.alert.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), reason));
        }
    }
}

/// Opens TCP connections, and TLS over them for `https` URIs.
#[derive(Clone)]
pub struct Connector {
    failures: FailureMemo,
    tcp: HttpConnector,
    settings: Option<TlsSettings>,
    /// Built at the first https connection: a client that only speaks http never
    /// reads the system's certificate store.
    config: Arc<OnceLock<Arc<ClientConfig>>>,
    alpn: Alpn,
    timeout: Duration,
}

impl Connector {
    /// `tls` for https URIs (none: the system's roots); `alpn` what to offer. Plain
    /// `http` with `Alpn::Http2` is HTTP/2 with prior knowledge.
    pub fn new(timeout: Duration, tls: Option<&TlsSettings>, alpn: Alpn) -> Connector {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(timeout));
        tcp.set_keepalive(Some(Duration::from_secs(60)));
        Connector {
            failures: FailureMemo::default(),
            tcp,
            settings: tls.cloned(),
            config: Arc::default(),
            alpn,
            timeout,
        }
    }

    /// What the connections' failures said, shared with the pool's owner.
    pub fn failures(&self) -> FailureMemo {
        self.failures.clone()
    }

    fn tls_config(&self) -> Arc<ClientConfig> {
        self.config
            .get_or_init(|| {
                self.settings
                    .clone()
                    .unwrap_or_else(TlsSettings::system)
                    .config(self.alpn)
            })
            .clone()
    }

    async fn connect(mut self, uri: Uri) -> Result<Conn, ConnectError> {
        let host = uri.host().unwrap_or_default().to_owned();
        let started = Instant::now();
        let tcp = tower_call(&mut self.tcp, uri.clone())
            .await
            .map_err(ConnectError::Tcp)?;
        let connected = Instant::now();
        let connect_us = micros(connected - started);
        if uri.scheme_str() != Some("https") {
            return Ok(Conn::Plain(tcp, times(connect_us, None)));
        }
        // The URL's host is the name checked, and sent as SNI unless it is an address.
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let name =
            ServerName::try_from(bare).map_err(|_| ConnectError::BadServerName(host.clone()))?;
        let config = self.tls_config();
        let left = self.timeout.saturating_sub(connected - started);
        let handshake = tokio_rustls::TlsConnector::from(config).connect(name, tcp.into_inner());
        let stream = match tokio::time::timeout(left, handshake).await {
            Err(_) => {
                return Err(ConnectError::Timeout {
                    host,
                    timeout: self.timeout,
                });
            }
            Ok(Err(error)) => {
                return Err(ConnectError::Tls {
                    reason: tls_reason(&error, Some(self.alpn)),
                    host,
                });
            }
            Ok(Ok(stream)) => stream,
        };
        let tls_us = micros(connected.elapsed());
        let chosen = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        if self.alpn == Alpn::Http2 && chosen.as_deref() != Some(b"h2") {
            return Err(ConnectError::NoHttp2 {
                host,
                chosen: chosen.map_or("nothing".into(), |p| {
                    String::from_utf8_lossy(&p).into_owned()
                }),
            });
        }
        Ok(Conn::Tls(
            Box::new(TokioIo::new(stream)),
            times(connect_us, Some(tls_us)),
            self.failures.clone(),
        ))
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn times(connect_us: u64, tls_us: Option<u64>) -> ConnectionTimes {
    ConnectionTimes {
        connect_us,
        tls_us,
        claimed: Arc::new(AtomicBool::new(false)),
    }
}

async fn tower_call(
    tcp: &mut HttpConnector,
    uri: Uri,
) -> Result<TokioIo<TcpStream>, Box<dyn std::error::Error + Send + Sync>> {
    use tower_service::Service;
    std::future::poll_fn(|cx| tcp.poll_ready(cx)).await?;
    Ok(tcp.call(uri).await?)
}

impl tower_service::Service<Uri> for Connector {
    type Response = Conn;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let failures = self.failures.clone();
        let connecting = self.clone().connect(uri);
        Box::pin(async move {
            let connected = connecting.await;
            failures.set(connected.as_ref().err().map(|e| (e.kind(), e.to_string())));
            connected
        })
    }
}

/// A connection, plain or TLS, with the times it took to make.
pub enum Conn {
    Plain(TokioIo<TcpStream>, ConnectionTimes),
    /// The memo hears the TLS alert that closes it, if one does.
    Tls(
        Box<TokioIo<TlsStream<TcpStream>>>,
        ConnectionTimes,
        FailureMemo,
    ),
}

impl Conn {
    /// How long it took to open.
    pub fn times(&self) -> &ConnectionTimes {
        match self {
            Conn::Plain(_, times) | Conn::Tls(_, times, _) => times,
        }
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Conn::Plain(_, times) => Connected::new().extra(times.clone()),
            Conn::Tls(io, times, _) => {
                let connected = Connected::new().extra(times.clone());
                if io.inner().get_ref().1.alpn_protocol() == Some(b"h2") {
                    connected.negotiated_h2()
                } else {
                    connected
                }
            }
        }
    }
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io, _) => Pin::new(io).poll_read(cx, buf),
            Conn::Tls(io, _, failures) => {
                let read = Pin::new(io.as_mut()).poll_read(cx, buf);
                if let Poll::Ready(Err(error)) = &read {
                    failures.note_read_error(error);
                }
                read
            }
        }
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io, _) => Pin::new(io).poll_write(cx, buf),
            Conn::Tls(io, _, _) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io, _) => Pin::new(io).poll_flush(cx),
            Conn::Tls(io, _, _) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io, _) => Pin::new(io).poll_shutdown(cx),
            Conn::Tls(io, _, _) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(io, _) => io.is_write_vectored(),
            Conn::Tls(io, _, _) => io.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io, _) => Pin::new(io).poll_write_vectored(cx, bufs),
            Conn::Tls(io, _, _) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}
