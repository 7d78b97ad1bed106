//! https end to end: redline against the simulator served over TLS with certificates
//! made for the test (never committed keys) — a private CA, HTTP/2 by ALPN, the three
//! certificate faults as typed outcomes, `insecure_skip_verify`, mTLS, and the chaos
//! proxy re-encrypting to an https service.

use crate::common;

use std::path::{Path, PathBuf};

use crate::common::{run_to_records, scenario, summary_of, temp_dir};
use redline::net::ServerTls;
use redline::net::tls::{Ca, Validity};
use redline::record::{FailStage, Outcome, Record};
use redline::sim::{EmbeddedSim, Profile, SimConfig};

/// A simulator over TLS with `cert`/`key`, requiring client certificates from
/// `client_ca` when given.
async fn tls_sim(cert: &str, key: &str, client_ca: Option<&Ca>) -> EmbeddedSim {
    let client_roots = client_ca.map(|ca| {
        let path = write(&temp_dir("tls-client-ca"), "client-ca.pem", ca.cert_pem());
        redline::net::tls::roots_from_file(&path).unwrap()
    });
    let tls = ServerTls::from_pem(cert, key, client_roots).unwrap();
    let config = SimConfig {
        profile: Profile::tiny(),
        model: None,
        seed: 0,
        tiers: Default::default(),
        script: None,
        startup: None,
    };
    EmbeddedSim::start_with(config, Some(tls)).await.unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A closed loop of `requests` against `url`, with the service's extra fields.
fn spec(url: &str, service: &str, requests: u32) -> redline::scenario::Scenario {
    scenario(&format!(
        "  services:\n    llm: {{ url: \"{url}\", model: sim-tiny{service} }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 16, output_tokens: 4 }} }}\n  load:\n    - {{ concurrency: 4, requests: {requests} }}\n"
    ))
}

fn tls_failure(records: &[Record]) -> String {
    let messages: Vec<String> = records
        .iter()
        .map(|r| {
            assert_eq!(r.outcome, Outcome::Error, "{r:?}");
            let e = r.error.as_ref().unwrap();
            assert_eq!(
                (e.stage, e.kind.as_str()),
                (FailStage::Connect, "tls"),
                "{e:?}"
            );
            e.message.clone()
        })
        .collect();
    messages[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_serves_and_the_handshake_is_timed_once_per_connection() {
    let dir = temp_dir("tls-ok");
    let ca = Ca::new("test CA").unwrap();
    let leaf = ca
        .issue(&["localhost", "127.0.0.1"], Validity::Current)
        .unwrap();
    let sim = tls_sim(&leaf.cert_pem, &leaf.key_pem, None).await;
    let ca_file = write(&dir, "ca.pem", ca.cert_pem());
    let url = sim.base_url();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    for (http2, connections) in [(false, 4), (true, 1)] {
        let service = format!(
            ", http2: {http2}, tls: {{ ca_cert: \"{}\" }}",
            ca_file.display()
        );
        let (result, records) = run_to_records(spec(&url, &service, 40), "tls-ok-run").await;
        assert_eq!(result.aggregator.counts.ok, 40, "{records:?}");
        // Four slots: four HTTP/1.1 connections, or one HTTP/2 connection (ALPN h2)
        // multiplexing them; only the first request on each pays the handshake.
        // (hyper's pool may open a spare HTTP/1.1 connection when a slot's next request
        // comes before its connection is back in the pool.)
        let handshakes: Vec<u64> = records.iter().filter_map(|r| r.tls_us).collect();
        let most = if http2 { 1 } else { 2 * connections };
        assert!(
            (connections..=most).contains(&handshakes.len()),
            "http2: {http2}: {} handshakes",
            handshakes.len()
        );
        assert!(handshakes.iter().all(|us| *us > 0 && *us < 5_000_000));
        assert_eq!(
            records.iter().filter(|r| r.connect_us.is_some()).count(),
            handshakes.len()
        );
        assert!(summary_of(&result).warnings.is_empty());
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_faults_are_typed_outcomes_and_insecure_passes_them() {
    let dir = temp_dir("tls-faults-keys");
    let trusted = Ca::new("trusted CA").unwrap();
    let other = Ca::new("another CA").unwrap();
    let ca_file = write(&dir, "trusted.pem", trusted.cert_pem());
    let cases = [
        (
            "unknown issuer",
            other.issue(&["127.0.0.1"], Validity::Current).unwrap(),
        ),
        (
            "certificate expired",
            trusted.issue(&["127.0.0.1"], Validity::Expired).unwrap(),
        ),
        (
            "name mismatch",
            trusted
                .issue(&["other.example"], Validity::Current)
                .unwrap(),
        ),
    ];
    for (reason, leaf) in cases {
        let sim = tls_sim(&leaf.cert_pem, &leaf.key_pem, None).await;
        let trusting = format!(", tls: {{ ca_cert: \"{}\" }}", ca_file.display());
        let (result, records) =
            run_to_records(spec(&sim.base_url(), &trusting, 8), "tls-fault").await;
        assert_eq!(records.len(), 8, "every request has its record");
        assert_eq!(result.aggregator.counts.error, 8);
        let message = tls_failure(&records);
        assert!(message.contains(reason), "{reason}: {message}");
        // Over HTTP/2 the other slots wait for the one connection being opened; they
        // get its reason too, not hyper's "canceled".
        let h2 = format!(", http2: true{trusting}");
        let (_, records) = run_to_records(spec(&sim.base_url(), &h2, 8), "tls-fault-h2").await;
        tls_failure(&records);
        assert!(
            records
                .iter()
                .all(|r| r.error.as_ref().unwrap().message.contains(reason)),
            "{records:?}"
        );
        // Not verifying passes the same server, and says so.
        let insecure = ", tls: { insecure_skip_verify: true }";
        let (result, _) = run_to_records(spec(&sim.base_url(), insecure, 8), "tls-insecure").await;
        assert_eq!(result.aggregator.counts.ok, 8, "{reason}");
        let warnings = summary_of(&result).warnings;
        assert!(warnings[0].contains("were not verified"), "{warnings:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_wants_the_client_certificate_and_accepts_it() {
    let dir = temp_dir("tls-mtls-keys");
    let ca = Ca::new("server CA").unwrap();
    let clients = Ca::new("client CA").unwrap();
    let leaf = ca.issue(&["127.0.0.1"], Validity::Current).unwrap();
    let sim = tls_sim(&leaf.cert_pem, &leaf.key_pem, Some(&clients)).await;
    let ca_file = write(&dir, "ca.pem", ca.cert_pem());
    let (_, records) = run_to_records(
        spec(
            &sim.base_url(),
            &format!(", tls: {{ ca_cert: \"{}\" }}", ca_file.display()),
            4,
        ),
        "tls-no-client-cert",
    )
    .await;
    let message = tls_failure(&records);
    assert!(message.contains("client certificate"), "{message}");
    let me = clients.issue(&["redline"], Validity::Current).unwrap();
    let cert = write(&dir, "client.pem", &me.cert_pem);
    let key = write(&dir, "client.key", &me.key_pem);
    let service = format!(
        ", tls: {{ ca_cert: \"{}\", client_cert: \"{}\", client_key: \"{}\" }}",
        ca_file.display(),
        cert.display(),
        key.display()
    );
    let (result, _) = run_to_records(spec(&sim.base_url(), &service, 4), "tls-client-cert").await;
    assert_eq!(result.aggregator.counts.ok, 4);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_plain_server_and_h2_to_an_http1_server_say_what_is_wrong() {
    let plain = common::sim(Profile::tiny()).await;
    let url = plain.base_url().replace("http://", "https://");
    let (_, records) = run_to_records(spec(&url, "", 4), "tls-plain").await;
    let message = tls_failure(&records);
    assert!(message.contains("does not speak TLS"), "{message}");

    // A TLS server that offers only HTTP/1.1 in ALPN: `http2: true` must not quietly
    // measure HTTP/1.1.
    let ca = Ca::new("h1 CA").unwrap();
    let leaf = ca.issue(&["127.0.0.1"], Validity::Current).unwrap();
    let dir = temp_dir("tls-h1");
    let ca_file = write(&dir, "ca.pem", ca.cert_pem());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = h1_only_acceptor(&leaf.cert_pem, &leaf.key_pem);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(tcp).await;
            });
        }
    });
    let service = format!(
        ", http2: true, tls: {{ ca_cert: \"{}\" }}",
        ca_file.display()
    );
    let (_, records) =
        run_to_records(spec(&format!("https://{addr}"), &service, 4), "tls-h1-run").await;
    let message = tls_failure(&records);
    assert!(message.contains("did not agree to HTTP/2"), "{message}");
    std::fs::remove_dir_all(dir).unwrap();
}

fn h1_only_acceptor(cert: &str, key: &str) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
}

/// Faults in front of an https service: the proxy takes plain HTTP from the run on
/// loopback and re-encrypts to the service with the service's own TLS settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chaos_proxy_reencrypts_to_an_https_service() {
    let dir = temp_dir("tls-chaos");
    let ca = Ca::new("test CA").unwrap();
    let leaf = ca.issue(&["127.0.0.1"], Validity::Current).unwrap();
    let sim = tls_sim(&leaf.cert_pem, &leaf.key_pem, None).await;
    let ca_file = write(&dir, "ca.pem", ca.cert_pem());
    let s = scenario(&format!(
        "  services:\n    llm: {{ url: \"{}\", model: sim-tiny, tls: {{ ca_cert: \"{}\" }} }}\n  payloadTemplate:\n    prompts: {{ synthetic: {{ input_tokens: 16, output_tokens: 4 }} }}\n  faults:\n    - {{ service: llm, name: broken, abort: {{ probability: 0.5, status: 503 }} }}\n  load:\n    - {{ concurrency: 4, requests: 200 }}\n",
        sim.base_url(),
        ca_file.display()
    ));
    let (result, records) = run_to_records(s, "tls-chaos-run").await;
    let faulted = records.iter().filter(|r| !r.faults.is_empty()).count() as u64;
    assert!((60..=140).contains(&faulted), "{faulted} of 200 at 50 %");
    assert_eq!(
        result.aggregator.counts.ok + faulted,
        200,
        "the rest went through TLS"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
