//! `redline run`: a spec or the shorthands, run, then the report and the exit code.

use super::*;
use crate::client::dialect::LlmApi;
use crate::folder::RunFolder;
use crate::report::conclude::Finished;
use crate::schedule::segment::Segment;

pub(super) async fn run_command(args: RunArgs) -> Result<i32> {
    let tls = tls_flags(&args)?;
    let (mut scenario, spec_text) = match &args.spec {
        Some(path) => match load_scenario_with(path, |file| apply_tls_flags(file, tls.as_ref()))? {
            Ok(scenario) => (scenario, std::fs::read_to_string(path)?),
            Err(errors) => {
                err(&errors.to_string());
                return Ok(exit::USAGE);
            }
        },
        None => {
            let spec = shorthand_spec(&args, tls.as_ref())?;
            match Scenario::from_spec(&spec, "") {
                Ok(scenario) => (scenario, shorthand_text(&spec)?),
                Err(mut errors) => {
                    // The user typed flags, not a spec: name the flag.
                    for error in &mut errors.0 {
                        if let Some(flag) = flag_for(&error.path) {
                            error.path = flag.to_owned();
                        }
                    }
                    err(&errors.to_string());
                    return Ok(exit::USAGE);
                }
            }
        }
    };
    let segment = match (args.segment, args.workers, args.segment_of) {
        (Some(segment), _, _) => Some(segment),
        (None, Some(n), _) => Segment::parse(&format!("1/{}", n.max(1))).ok(),
        (None, None, Some(n)) => Some(indexed_segment(n)?),
        (None, None, None) => None,
    };
    if let Some(segment) = segment
        && let Err(problem) = scenario.take_segment(segment)
    {
        err(&problem);
        return Ok(exit::USAGE);
    }
    let invocation = crate::report::invocation::Invocation::new(
        &std::env::args().collect::<Vec<_>>(),
        args.spec.as_deref().and_then(Path::to_str),
        &spec_text,
    );
    let run_dir =
        crate::report::outputs::prepare(args.out.as_deref(), Path::new("out"), &scenario.name)
            .with_context(|| format!("cannot make the output folder for {}", scenario.name))?;
    if !run_dir.replaced.is_empty() {
        errln!(
            "redline: {} held an earlier run's {}: removed",
            run_dir.path.display(),
            run_dir.replaced.join(", ")
        );
    }
    let dir = run_dir.path.clone();
    if let Some(workers) = args.workers {
        return run_workers(&args, workers, &dir, &scenario).await;
    }
    let stop = CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    let progress = std::sync::Arc::new(crate::runner::Progress::default());
    let drawer = progress::wanted(args.quiet)
        .then(|| progress::Drawer::for_run(progress.clone(), scenario.unit()));
    let options = run_options(&args, tls.as_ref(), progress, &dir, segment).await?;
    let name = scenario.name.clone();
    let slos = scenario.slos.clone();
    let remediation = scenario.remediate.clone();
    let dataset = scenario.dataset_info();
    let result = run_scenario(scenario, options, stop).await;
    if let Some(drawer) = drawer {
        drawer.finish().await;
    }
    let result = result?;
    let about = crate::report::conclude::RunAbout {
        name: &name,
        slos: slos.as_ref(),
        dataset,
        strict: args.strict,
        invocation: Some(invocation),
        segment: segment.filter(|s| !s.is_whole()),
    };
    let finished = crate::report::conclude::finish(&result, about, &dir)?;
    out(&render_terminal(&finished.summary));
    print_files(&run_dir, &finished);
    if let Some(remediation) = remediation.filter(|_| finished.code == exit::SLO_FAILED) {
        super::heal::remediate(&dir, &remediation).await?;
    }
    Ok(finished.code)
}

/// Where the run's files went.
fn print_files(run_dir: &crate::report::outputs::RunDir, finished: &Finished) {
    let folder = RunFolder::new(&run_dir.path);
    outln!(
        "  records: {}  summary: {}{}",
        folder.records().display(),
        folder.summary().display(),
        run_dir
            .latest
            .as_ref()
            .map_or(String::new(), |l| format!("  (also {})", l.display()))
    );
    outln!(
        "  report: {}  timeline: {}",
        folder.report().display(),
        folder.timeline().display()
    );
    if let Some(junit) = &finished.junit {
        outln!("  junit: {}", junit.display());
    }
}

/// What the runner is asked to do besides the scenario: where the records go, the
/// progress it bumps, the header it prints, and the listeners and endpoints the flags
/// name (each refused unless on loopback).
pub(super) async fn run_options(
    args: &RunArgs,
    tls: Option<&TlsSpec>,
    progress: std::sync::Arc<crate::runner::Progress>,
    dir: &Path,
    segment: Option<Segment>,
) -> Result<RunOptions> {
    let coordinator = match (&args.coordinator, segment) {
        (Some(url), Some(segment)) => {
            Some(crate::coordinator::worker::Link::new(url, segment).map_err(anyhow::Error::msg)?)
        }
        (Some(_), None) => {
            bail!("--coordinator needs this worker's share: --segment K/N or --segment-of N")
        }
        (None, _) => None,
    };
    let metrics_listener = match args.metrics_addr {
        Some(addr) if !addr.ip().is_loopback() => bail!(
            "refusing to serve metrics on {addr}: the run's metrics bind loopback; put a scraper or a reverse proxy beside it"
        ),
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for --metrics-addr"))?;
            errln!(
                "redline: live metrics at http://{}/metrics",
                listener.local_addr()?
            );
            Some(listener)
        }
        None => None,
    };
    Ok(RunOptions {
        run_id: args.run_id,
        coordinator,
        records_path: RunFolder::new(dir).records(),
        progress: Some(progress),
        on_start: Some(Box::new(|header| out(&render_header(header)))),
        otlp_tls: match tls {
            Some(tls) => Some(
                crate::client::tls::TlsSettings::load(&crate::client::tls::TlsOptions {
                    ca_cert: tls.ca_cert.clone(),
                    client_cert: tls.client_cert.clone(),
                    client_key: tls.client_key.clone(),
                    insecure_skip_verify: tls.insecure_skip_verify,
                })
                .map_err(|e| anyhow::anyhow!("--{}: {}", e.field.replace('_', "-"), e.message))?,
            ),
            None => None,
        },
        metrics_listener,
        otlp_endpoint: match &args.otlp_endpoint {
            Some(url) => Some(otlp_traces_uri(url)?),
            None => None,
        },
        collect: match args.collect {
            Some(addr) if !addr.ip().is_loopback() => {
                bail!("refusing to collect traces on {addr}: the receiver binds loopback")
            }
            Some(addr) => Some(crate::runner::CollectOptions {
                listener: tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} for --collect"))?,
                dir: RunFolder::new(dir).collect(),
                grace: args.collect_grace,
            }),
            None => None,
        },
        on_drift: Some(Box::new(|change| {
            outln!("{}", crate::report::render_drift_change(change))
        })),
    })
}

/// `--ca-cert`, `--client-cert`/`--client-key` and `--insecure` as a service's `tls`,
/// when any is given.
pub(super) fn tls_flags(args: &RunArgs) -> Result<Option<TlsSpec>> {
    let absolute = |p: &Option<PathBuf>| p.as_deref().map(std::path::absolute).transpose();
    let spec = TlsSpec {
        ca_cert: absolute(&args.ca_cert)?,
        client_cert: absolute(&args.client_cert)?,
        client_key: absolute(&args.client_key)?,
        insecure_skip_verify: args.insecure,
    };
    Ok((spec != TlsSpec::default()).then_some(spec))
}

/// The flags' TLS for every https service that has no `tls` of its own.
pub(super) fn apply_tls_flags(file: &mut SpecFile, tls: Option<&TlsSpec>) {
    let Some(tls) = tls else { return };
    for service in file.inference.services.values_mut() {
        if service.url.starts_with("https://") && service.tls.is_none() {
            service.tls = Some(tls.clone());
        }
    }
}

/// The command-line flag behind a field of the spec the shorthands build.
pub(super) fn flag_for(path: &str) -> Option<&'static str> {
    Some(match path {
        "spec.load[0].rate" => "--rate",
        "spec.load[0].sweep.rates" => "--sweep",
        "spec.load[0].sweep.throughput_concurrency" => "--throughput-concurrency",
        "spec.load[0].concurrency" => "--concurrency",
        "spec.load[0].duration" => "--duration",
        "spec.load[0].requests" => "--requests",
        "spec.services.llm.url" => "--url",
        "spec.services.llm.model" => "--model",
        "spec.services.llm.profile" => "--profile",
        "spec.services.llm.api_key_env" => "--api-key-env",
        "spec.services.llm.tokenizer" => "--tokenizer",
        "spec.payloadTemplate.prompts.synthetic.input_tokens" => "--input-tokens",
        "spec.payloadTemplate.prompts.synthetic.output_tokens" => "--output-tokens",
        "spec.payloadTemplate.prompts.file" | "spec.payloadTemplate.prompts.dataset.file" => {
            "--prompts"
        }
        _ => return None,
    })
}

/// Builds the same spec a YAML file would hold from the command-line shorthands.
/// The spec the shorthands made, as YAML a user could save and run.
fn shorthand_text(spec: &SpecFile) -> Result<String> {
    let document = serde_json::json!({
        "apiVersion": crate::spec::API_VERSION,
        "kind": "InferenceSpec",
        "metadata": spec.metadata,
        "spec": spec.inference,
    });
    Ok(yaml_serde::to_string(&document)?)
}

pub(super) fn shorthand_spec(args: &RunArgs, tls: Option<&TlsSpec>) -> Result<SpecFile> {
    let Some(url) = args.url.clone() else {
        bail!(
            "give a spec file, or --url (e.g. `redline run --url embedded --rate 10 --duration 30s`)"
        );
    };
    let duration = args
        .duration
        .as_deref()
        .map(Dur::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    if duration.is_none() && args.requests.is_none() {
        bail!("say how long to run: --duration (e.g. 30s) and/or --requests N");
    }
    let rate = args.rate;
    let concurrency = match (rate, args.concurrency, args.sweep) {
        (None, None, None) => Some(1),
        (_, c, _) => c,
    };
    let sweep = args.sweep.map(|rates| SweepSpec {
        rates,
        throughput_concurrency: args.throughput_concurrency,
    });
    let prompts = shorthand_prompts(args)?;
    let service = shorthand_service(args, &url, tls);
    Ok(SpecFile {
        path: "command line".into(),
        metadata: Metadata {
            name: "cli".into(),
            labels: BTreeMap::new(),
        },
        inference: InferenceSpec {
            seed: args.seed,
            services: BTreeMap::from([("llm".to_owned(), service)]),
            payload_template: PayloadTemplate {
                prompts: Some(prompts),
                request: None,
                image: None,
                audio: None,
                speech: None,
                mix: Vec::new(),
                service: None,
                stream: !args.no_stream,
                include_usage: true,
                body: serde_json::Map::new(),
                session: None,
                flow: Vec::new(),
                circuit_breaker: None,
            },
            feedback: None,
            load: vec![StageSpec {
                sweep,
                rate,
                concurrency,
                duration,
                requests: args.requests,
                ..StageSpec::default()
            }],
            qps_target: None,
            duration: None,
            warmup: Dur::default(),
            cooldown: Dur::default(),
            timeouts: Default::default(),
            trace_ids: Default::default(),
            limits: Default::default(),
            max_in_flight: None,
            drain_timeout: None,
            goodput: None,
            server_metrics: None,
            faults: Vec::new(),
            disruptions: Vec::new(),
            remediate: None,
        },
        scale: None,
        model_load: None,
    })
}

/// The shorthands' prompts: a JSONL file's, or synthetic ones of the given lengths.
fn shorthand_prompts(args: &RunArgs) -> Result<PromptsSpec> {
    Ok(match &args.prompts {
        // Each record's own max_tokens, else --output-tokens: never the server's default.
        Some(path) => PromptsSpec {
            dataset: Some(DatasetSpec {
                file: std::path::absolute(path)?,
                format: Some(DatasetFormat::Jsonl),
                prompt_column: None,
                max_tokens_column: None,
                order: Default::default(),
                min_input_tokens: None,
                max_input_tokens: None,
                skip_invalid: false,
                output_tokens: Some(LengthSpec::Fixed(args.output_tokens)),
            }),
            synthetic: None,
            file: None,
            templates: None,
        },
        None => PromptsSpec {
            synthetic: Some(SyntheticSpec {
                input_tokens: LengthSpec::Fixed(args.input_tokens),
                output_tokens: LengthSpec::Fixed(args.output_tokens),
                prefix_tokens: 0,
                prefixes: 1,
            }),
            file: None,
            dataset: None,
            templates: None,
        },
    })
}

/// The shorthands' one service, `llm`.
fn shorthand_service(args: &RunArgs, url: &str, tls: Option<&TlsSpec>) -> ServiceSpec {
    ServiceSpec {
        url: url.to_owned(),
        model: args.model.clone(),
        profile: args.profile.clone(),
        api: match args.api {
            LlmApi::Chat => ApiKind::Chat,
            LlmApi::Completions => ApiKind::Completions,
            LlmApi::Tgi => ApiKind::Tgi,
            LlmApi::Ollama => ApiKind::Ollama,
            LlmApi::OllamaGenerate => ApiKind::OllamaGenerate,
            LlmApi::Kserve => ApiKind::Kserve,
            LlmApi::KserveGrpc => ApiKind::KserveGrpc,
        },
        api_key_env: args.api_key_env.clone(),
        headers: BTreeMap::new(),
        http2: args.http2,
        tls: tls.filter(|_| url.starts_with("https://")).cloned(),
        tokenizer: args.tokenizer.clone(),
        ..ServiceSpec::default()
    }
}

/// `URL/v1/traces` unless the URL names the path already.
pub(super) fn otlp_traces_uri(url: &str) -> Result<hyper::Uri> {
    let url = url.trim_end_matches('/');
    let full = if url.ends_with("/v1/traces") {
        url.to_owned()
    } else {
        format!("{url}/v1/traces")
    };
    let uri: hyper::Uri = full
        .parse()
        .with_context(|| format!("--otlp-endpoint `{url}` is not a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        bail!("--otlp-endpoint `{url}`: write an http:// or https:// URL");
    }
    Ok(uri)
}

/// `--segment-of N`: the segment `K/N` of a Kubernetes Indexed Job's pod, whose index
/// (K − 1, from 0) is in JOB_COMPLETION_INDEX.
fn indexed_segment(n: u32) -> Result<Segment> {
    let index = std::env::var("JOB_COMPLETION_INDEX").map_err(|_| {
        anyhow::anyhow!("--segment-of {n}: JOB_COMPLETION_INDEX is not set (it is in the pods of an Indexed Job)")
    })?;
    let index: u32 = index
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("JOB_COMPLETION_INDEX `{index}` is not a number"))?;
    Segment::parse(&format!("{}/{n}", index + 1))
        .map_err(|e| anyhow::anyhow!("--segment-of {n}: {e}"))
}
