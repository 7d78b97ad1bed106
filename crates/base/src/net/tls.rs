//! TLS on redline's own servers (the simulator, the chaos proxy, the trace receiver),
//! so that clients — redline's and independent ones — have a real TLS peer: a
//! certificate from files, or one made at start from a CA made with it (written out
//! for clients to trust); optionally, client certificates required (mTLS).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// How a server speaks TLS.
#[derive(Clone)]
pub struct ServerTls {
    pub(super) acceptor: TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls")
    }
}

impl ServerTls {
    /// A certificate chain and key from PEM files; with `client_ca`, clients must
    /// present a certificate that CA signed.
    pub fn from_files(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<ServerTls> {
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|c| c.collect::<Result<Vec<_>, _>>())
            .with_context(|| {
                format!(
                    "cannot read a PEM certificate chain from {}",
                    cert.display()
                )
            })?;
        anyhow::ensure!(
            !chain.is_empty(),
            "{} holds no PEM certificate",
            cert.display()
        );
        let key = PrivateKeyDer::from_pem_file(key)
            .with_context(|| format!("cannot read a PEM private key from {}", key.display()))?;
        let client_roots = client_ca.map(roots_from_file).transpose()?;
        ServerTls::new(chain, key, client_roots)
    }

    /// A CA made now and a certificate it signs for `localhost`, `127.0.0.1` and
    /// `::1`; the CA's certificate is written to `ca_path` for clients to trust.
    pub fn self_signed(ca_path: &Path, client_ca: Option<&Path>) -> Result<ServerTls> {
        let ca = Ca::new("redline test CA")?;
        std::fs::write(ca_path, ca.cert_pem())
            .with_context(|| format!("cannot write the CA certificate to {}", ca_path.display()))?;
        let leaf = ca.issue(&["localhost", "127.0.0.1", "::1"], Validity::Current)?;
        let client_roots = client_ca.map(roots_from_file).transpose()?;
        ServerTls::from_pem(&leaf.cert_pem, &leaf.key_pem, client_roots)
    }

    /// From PEM text (tests make theirs with [`Ca`]).
    pub fn from_pem(
        cert_pem: &str,
        key_pem: &str,
        client_roots: Option<RootCertStore>,
    ) -> Result<ServerTls> {
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .context("not a PEM certificate")?;
        let key =
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).context("not a PEM private key")?;
        ServerTls::new(chain, key, client_roots)
    }

    fn new(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        client_roots: Option<RootCertStore>,
    ) -> Result<ServerTls> {
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match client_roots {
            Some(roots) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .context("cannot check client certificates against that CA")?,
            ),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .context("the key does not go with the certificate")?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// The CA certificates of a PEM file, as a trust store.
pub fn roots_from_file(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path)
        .with_context(|| format!("cannot read {}", path.display()))?
    {
        roots
            .add(cert.with_context(|| format!("{}: not a PEM certificate", path.display()))?)
            .with_context(|| format!("{}: not a CA certificate", path.display()))?;
    }
    Ok(roots)
}

/// When an issued certificate is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// From yesterday for a year.
    Current,
    /// Only in 2020: expired.
    Expired,
}

/// A certificate and its key, in PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A certificate authority made on the spot, for `--tls-self-signed` and for tests;
/// its key lives only in memory.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl Ca {
    pub fn new(name: &str) -> Result<Ca> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            issuer: Issuer::new(params, key),
            cert_pem: cert.pem(),
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A certificate for `names` (host names or IP addresses), signed by this CA.
    pub fn issue(&self, names: &[&str], validity: Validity) -> Result<Issued> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("redline"),
        );
        match validity {
            Validity::Current => {
                let now = std::time::SystemTime::now();
                params.not_before = (now - std::time::Duration::from_secs(86_400)).into();
                params.not_after = (now + std::time::Duration::from_secs(365 * 86_400)).into();
            }
            Validity::Expired => {
                params.not_before = rcgen::date_time_ymd(2020, 1, 1);
                params.not_after = rcgen::date_time_ymd(2020, 12, 31);
            }
        }
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The one crypto provider (ring) that redline's servers and clients share.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static PROVIDER: OnceLock<Arc<rustls::crypto::CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}
