//! `redline record` and `redline replay`: shadow traffic from the command line.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::shadow::capture::Capture;
use crate::shadow::config::DiffConfig;
use crate::shadow::recording::Recording;
use crate::shadow::replay::{Pace, ReplayConfig, Side};

#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// The service to record, e.g. http://127.0.0.1:8000 (loopback unless
    /// --allow-remote-upstream).
    #[arg(long)]
    pub upstream: String,
    /// Where the recording proxy listens. Loopback by default; anything else needs
    /// --allow-remote.
    #[arg(long, default_value = "127.0.0.1:8101")]
    pub listen: SocketAddr,
    /// The recording's folder (created; refused when it already holds one).
    #[arg(long)]
    pub out: PathBuf,
    /// Also redact this request or response header (Authorization, Cookie,
    /// Set-Cookie, X-Api-Key, Api-Key and OpenAI-Api-Key always are). Repeatable.
    #[arg(long = "redact-header", value_name = "NAME")]
    pub redact: Vec<String>,
    /// Mirror requests to this shadow (Envoy's semantics: `Host` gets `-shadow`, its
    /// answers are recorded and never reach the caller, a slow or dead shadow never
    /// delays the primary).
    #[arg(long, value_name = "URL")]
    pub mirror: Option<String>,
    /// Share of requests mirrored (by their traceparent when they carry one).
    #[arg(long, default_value_t = 1.0, requires = "mirror")]
    pub mirror_fraction: f64,
    /// Stop after this long (else at Ctrl-C or SIGTERM).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub upstream_tls: UpstreamTlsArgs,
    #[command(flatten)]
    pub tls: ServerTlsArgs,
    /// Allow an upstream (or mirror) that is not on this machine.
    #[arg(long)]
    pub allow_remote_upstream: bool,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    pub allow_remote: bool,
}

pub(super) async fn record(args: RecordArgs) -> Result<i32> {
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        bail!(
            "refusing to listen on {}: the recorder binds loopback unless you pass --allow-remote",
            args.listen
        );
    }
    if !(args.mirror_fraction > 0.0 && args.mirror_fraction <= 1.0) {
        err(&format!(
            "--mirror-fraction must be within (0, 1], got {}",
            args.mirror_fraction
        ));
        return Ok(exit::USAGE);
    }
    let upstream = crate::chaos::upstream_uri(&args.upstream, args.allow_remote_upstream)?;
    let mirror = match &args.mirror {
        Some(url) => Some(crate::chaos::tap::MirrorConfig::new(
            crate::chaos::upstream_uri(url, args.allow_remote_upstream)?,
            args.mirror_fraction,
        )),
        None => None,
    };
    let recorder = Capture::create(
        &args.out,
        &args.upstream,
        args.mirror.as_deref(),
        &args.redact,
    )?;
    let upstream_tls = args.upstream_tls.load()?;
    let proxy = crate::chaos::RunningProxy::start(crate::chaos::ProxyConfig {
        upstreams: vec![upstream],
        balance: Default::default(),
        upstream_http2: false,
        listen: args.listen,
        admin: None,
        rules: Vec::new(),
        seed: 0,
        allow_header_faults: false,
        log: std::sync::Arc::new(crate::chaos::FaultLog::to_writer(None)),
        tls: args.tls.load()?,
        upstream_tls: Some(upstream_tls),
        tap: Some(Arc::new(recorder.clone())),
        mirror,
    })
    .await?;
    errln!(
        "redline record: {} -> {}{}, writing {} — Ctrl-C to stop",
        proxy.base_url(),
        args.upstream,
        args.mirror
            .as_deref()
            .map_or(String::new(), |m| format!(" (mirrored to {m})")),
        args.out.display()
    );
    match args.duration {
        Some(duration) => {
            tokio::select! {
                _ = tokio::time::sleep(duration) => {}
                _ = signal() => {}
            }
        }
        None => signal().await,
    }
    let mirrored = proxy.chaos.mirror.as_ref().map(|m| m.counters.clone());
    drop(proxy);
    // Answers still streaming get a moment to end and be written.
    tokio::time::sleep(Duration::from_millis(200)).await;
    recorder.finish()?;
    errln!(
        "redline record: {} exchanges in {}",
        recorder.written(),
        args.out.display()
    );
    if let Some(counts) = mirrored {
        use std::sync::atomic::Ordering::Relaxed;
        errln!(
            "  mirror: {} sent, {} answered, {} failed, {} skipped (too many in flight)",
            counts.sent.load(Relaxed),
            counts.answered.load(Relaxed),
            counts.failed.load(Relaxed),
            counts.skipped.load(Relaxed)
        );
    }
    Ok(exit::OK)
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The recording's folder (from `redline record`).
    pub recording: PathBuf,
    /// The version in production, e.g. http://127.0.0.1:8000.
    #[arg(long)]
    pub primary: String,
    /// The version to compare with it.
    #[arg(long)]
    pub candidate: String,
    /// A second instance of the primary's version, for the noise baseline; without
    /// it the primary gets each request twice.
    #[arg(long)]
    pub secondary: Option<String>,
    /// Send at this many requests per second, in recorded order (else at the
    /// recorded times).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Play the recorded times this many times faster.
    #[arg(long, default_value_t = 1.0, conflicts_with = "rate")]
    pub speed: f64,
    /// The diff's settings: ignore, arrays, tolerance, text_fields, margins,
    /// attribution (YAML; see docs/shadow.md).
    #[arg(long, value_name = "FILE")]
    pub diff_config: Option<PathBuf>,
    /// Where diff.json, diff.txt, diff.html and each side's records go.
    #[arg(long, default_value = "out/replay")]
    pub out: PathBuf,
    /// Exit 1 when a field is flagged.
    #[arg(long)]
    pub fail_on_diff: bool,
    /// Send `Authorization: Bearer $VAR` (recordings hold no credentials).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Longest a request may take.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Most requests in flight over the three sides.
    #[arg(long, default_value_t = 3072)]
    pub max_in_flight: usize,
    /// For https targets: trust only the CAs in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// For https targets: accept any certificate.
    #[arg(long, conflicts_with = "ca_cert")]
    pub insecure: bool,
    /// Draw no progress bar (it is drawn only on a terminal anyway).
    #[arg(long)]
    pub quiet: bool,
}

pub(super) async fn replay(args: ReplayArgs) -> Result<i32> {
    let config = match &args.diff_config {
        Some(path) => match DiffConfig::load(&path.display().to_string()) {
            Ok(config) => config,
            Err(errors) => {
                err(&errors.of("diff config"));
                return Ok(exit::USAGE);
            }
        },
        None => DiffConfig::default(),
    };
    let pace = match args.rate {
        Some(rate) if rate > 0.0 && rate.is_finite() => Pace::Rate(rate),
        Some(rate) => {
            err(&format!("--rate must be more than 0, got {rate}"));
            return Ok(exit::USAGE);
        }
        None if args.speed > 0.0 && args.speed.is_finite() => {
            Pace::AsRecorded { speed: args.speed }
        }
        None => {
            err(&format!("--speed must be more than 0, got {}", args.speed));
            return Ok(exit::USAGE);
        }
    };
    let recording = match Recording::open(&args.recording) {
        Ok(recording) => recording,
        Err(message) => {
            err(&message);
            return Ok(exit::USAGE);
        }
    };
    for skipped in &recording.skipped {
        errln!("redline replay: {skipped}");
    }
    // Nothing replayed would read as "no field differs": a pass nobody earned.
    if recording.exchanges.is_empty() {
        err(&format!(
            "{} holds no exchange that can be replayed: record some traffic through `redline record` first",
            args.recording.display()
        ));
        return Ok(exit::USAGE);
    }
    let replay_config = Arc::new(replay_config(&args, pace)?);
    let noise = if args.secondary.is_some() {
        "secondary"
    } else {
        "primary twice"
    };
    errln!(
        "redline replay: {} requests from {}, to primary {}, candidate {}, baseline {noise}",
        recording.exchanges.len(),
        args.recording.display(),
        args.primary,
        args.candidate
    );
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let total = recording.exchanges.len() as u64;
    let drawer = super::progress::wanted(args.quiet)
        .then(|| super::progress::Drawer::for_count("replay", done.clone(), total));
    let replayed = crate::shadow::replay::replay(&recording, replay_config.clone(), move |_| {
        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .await;
    if let Some(drawer) = drawer {
        drawer.finish().await;
    }
    let sides = crate::shadow::diff::side_counts(&replayed, &replay_config);
    let name = args.recording.display().to_string();
    let mut report = crate::shadow::diff::diff(&replayed, &config, sides, &name, noise);
    report.skipped = recording.skipped.clone();
    crate::shadow::outputs::write(&args.out, &report, &replayed)?;
    out(&crate::shadow::render::terminal(&report));
    outln!(
        "  diff: {}  html: {}",
        args.out.join("diff.json").display(),
        args.out.join("diff.html").display()
    );
    Ok(if args.fail_on_diff && report.has_differences() {
        exit::SLO_FAILED
    } else {
        exit::OK
    })
}

fn replay_config(args: &ReplayArgs, pace: Pace) -> Result<ReplayConfig> {
    let timeouts = crate::client::Timeouts {
        total: args.timeout,
        first_token: args.timeout,
        ..crate::shadow::replay::default_timeouts()
    };
    let tls = crate::client::tls::TlsSettings::load(&crate::client::tls::TlsOptions {
        ca_cert: args.ca_cert.clone(),
        insecure_skip_verify: args.insecure,
        ..Default::default()
    })
    .map_err(|e| anyhow::anyhow!("--{}: {}", e.field.replace('_', "-"), e.message))?;
    let secondary = args
        .secondary
        .clone()
        .unwrap_or_else(|| args.primary.clone());
    let urls = BTreeMap::from([
        (Side::Primary, args.primary.clone()),
        (Side::Candidate, args.candidate.clone()),
        (Side::Secondary, secondary),
    ]);
    for (side, url) in &urls {
        let uri: hyper::Uri = url
            .parse()
            .with_context(|| format!("--{} `{url}` is not a URL", side.name()))?;
        if uri.host().is_none() || !matches!(uri.scheme_str(), Some("http" | "https")) {
            bail!(
                "--{} `{url}`: write http://HOST:PORT or https://HOST:PORT",
                side.name()
            );
        }
    }
    let clients = Side::ALL
        .map(|side| {
            (
                side,
                crate::client::http_client_with(&timeouts, false, Some(&tls)),
            )
        })
        .into_iter()
        .collect();
    let api_key = match &args.api_key_env {
        Some(var) => {
            let key =
                std::env::var(var).with_context(|| format!("--api-key-env: ${var} is not set"))?;
            Some(
                hyper::header::HeaderValue::from_str(&format!("Bearer {key}"))
                    .map(|mut v| {
                        v.set_sensitive(true);
                        v
                    })
                    .with_context(|| format!("${var} is not a valid header value"))?,
            )
        }
        None => None,
    };
    Ok(ReplayConfig {
        urls,
        clients,
        pace,
        timeouts,
        api_key,
        max_response_bytes: 64 << 20,
        max_in_flight: args.max_in_flight,
    })
}
