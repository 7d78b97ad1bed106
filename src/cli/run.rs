//! `redline run`: a spec or the shorthands, run, then the report and the exit code.

use super::*;
use crate::folder::RunFolder;
use crate::report::conclude::Finished;
use crate::schedule::segment::Segment;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The spec file (YAML). Without it, the shorthands below describe the test.
    pub spec: Option<PathBuf>,
    /// Output folder for records.jsonl, summary.json and junit.xml; an earlier run's
    /// files there are removed first. By default each run gets a new folder,
    /// `out/NAME/<UTC time>`, with `out/NAME/latest` pointing at it.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Draw no progress bar (it is drawn only on a terminal anyway).
    #[arg(long)]
    pub quiet: bool,
    /// Treat an SLO that is `not_proven` (too little data to decide) as failed.
    #[arg(long)]
    pub strict: bool,
    /// Serve the run's own metrics in Prometheus's text format at
    /// http://ADDR/metrics while it runs (loopback only), for a dashboard such as
    /// deploy/grafana/redline.json.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Export the run's own spans (one per request, in its session's trace, with
    /// `gen_ai.*` attributes) to this OTLP/HTTP endpoint, e.g.
    /// http://127.0.0.1:4318 (`redline collect`, or any OpenTelemetry collector).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Receive the services' OTLP/HTTP traces at ADDR during the run (loopback), store
    /// them in OUT/collect/, and report the dependency graph and, per step, client
    /// time against server span time. redline's own spans go there too, unless
    /// --otlp-endpoint sends them elsewhere.
    #[arg(long, value_name = "ADDR")]
    pub collect: Option<SocketAddr>,
    /// With --collect: how long to wait after the run for the services' last span
    /// batches (OpenTelemetry SDKs export every 5 s by default).
    #[arg(long, value_name = "DURATION", default_value = "6s", value_parser = parse_duration)]
    pub collect_grace: std::time::Duration,

    /// Trust only the CAs in this PEM file for https services (a private CA), unless a
    /// service's `tls` says otherwise; also for an https --otlp-endpoint.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// A client certificate (PEM) for https services that ask for one (mTLS).
    #[arg(long, value_name = "FILE", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// The private key of --client-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Accept any certificate from https services (self-signed, expired, another
    /// host's); the report warns that no server identity was checked.
    #[arg(long, conflicts_with = "ca_cert")]
    pub insecure: bool,

    /// Send only this share of the run: `K/N` (the K-th of N equal parts) or
    /// `FROM:TO` (`0:1/4`). Each arrival of the whole schedule goes to exactly one
    /// segment, with the prompt and trace ID one process would have given it; closed
    /// loops split their slots and budgets. `redline merge` joins the segments' folders.
    #[arg(long, value_name = "SEGMENT", value_parser = crate::schedule::segment::Segment::parse, help_heading = "Segments")]
    pub segment: Option<crate::schedule::segment::Segment>,
    /// Run the spec as N worker processes on this machine, one segment each, meeting at
    /// a coordinator of their own (a start together, the SLO gate on the whole run), and
    /// merge their results into the output folder (each worker's folder is kept in it).
    /// Not with --metrics-addr or --collect, whose one address N workers cannot share.
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = ["segment", "metrics_addr", "collect"],
        help_heading = "Segments"
    )]
    pub workers: Option<u32>,
    /// As --segment K/N, with K − 1 from the environment's JOB_COMPLETION_INDEX (a
    /// Kubernetes Indexed Job's pod index; `redline k8s render` uses it).
    #[arg(long, value_name = "N", conflicts_with_all = ["segment", "workers"], help_heading = "Segments")]
    pub segment_of: Option<u32>,
    /// The run's ID (16 hex digits), shared by the workers of one run so that their
    /// trace IDs and baggage are the run's; set by `--workers`.
    #[arg(long, value_name = "HEX", hide = true, value_parser = parse_run_id)]
    pub run_id: Option<u64>,
    /// Join the coordinator of a run across machines (`redline coordinate`) at this
    /// URL: wait there for every worker, start together, push this segment's figures
    /// every 2 s and stop when the coordinator finds the whole run certain to fail an
    /// `abort_on_fail` SLO. With --segment or --segment-of.
    #[arg(long, value_name = "URL", conflicts_with_all = ["workers", "run_id"], help_heading = "Segments")]
    pub coordinator: Option<String>,

    /// Shorthand: base URL of an OpenAI-compatible server (http:// or https://), or
    /// `embedded`.
    #[arg(long, help_heading = "Shorthands")]
    pub url: Option<String>,
    /// Shorthand: model name (required for a real server, except with `--api tgi`).
    #[arg(long, help_heading = "Shorthands")]
    pub model: Option<String>,
    /// Shorthand: simulator profile for `--url embedded`.
    #[arg(long, help_heading = "Shorthands")]
    pub profile: Option<String>,
    /// Shorthand: which API to call: OpenAI's chat or completions, TGI's native
    /// `/generate_stream`, Ollama's native `/api/chat` or `/api/generate`, KServe v2's
    /// generate extension (Triton), or an MCP server (--url is its endpoint, e.g.
    /// http://127.0.0.1:3001/mcp; --tool and --args say what to call).
    #[arg(long, value_enum, default_value = "chat", help_heading = "Shorthands")]
    pub api: ShorthandApi,
    /// Shorthand, with --api mcp and no --url: the MCP server to start over stdio, once
    /// per session, after `--` (e.g. `-- npx -y @modelcontextprotocol/server-everything
    /// stdio`); its argv as given, never through a shell.
    #[arg(
        last = true,
        value_name = "SERVER COMMAND",
        help_heading = "Shorthands"
    )]
    pub stdio: Vec<String>,
    /// Shorthand, with --api mcp: the tool each call calls (`tools/call`).
    #[arg(long, value_name = "NAME", help_heading = "Shorthands")]
    pub tool: Option<String>,
    /// Shorthand, with --tool: the tool's arguments, a JSON object; strings may hold
    /// `{{ seq }}` (the call's number) and `{{ n }}` (0 to 999, drawn from --seed).
    #[arg(long, value_name = "JSON", requires = "tool", value_parser = parse_args_object, help_heading = "Shorthands")]
    pub args: Option<serde_json::Map<String, serde_json::Value>>,
    /// Shorthand: the longest a request may take, send to last byte (e.g. 30s);
    /// a request still running then ends as a timeout [default: 600s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Shorthands")]
    pub timeout: Option<std::time::Duration>,
    /// Shorthand: open-loop Poisson rate, requests per second.
    #[arg(long, conflicts_with = "concurrency", help_heading = "Shorthands")]
    pub rate: Option<f64>,
    /// Shorthand: closed-loop sessions back to back.
    #[arg(long, conflicts_with = "sweep", help_heading = "Shorthands")]
    pub concurrency: Option<u32>,
    /// Shorthand: sweep — one session, then 256, then N rates in between; --duration
    /// or --requests bound each point. Reports each point and the knee.
    #[arg(
        long,
        value_name = "N",
        conflicts_with = "rate",
        help_heading = "Shorthands"
    )]
    pub sweep: Option<u32>,
    /// Shorthand: the sweep's throughput point, sessions back to back. A server that
    /// serves one request at a time (llama.cpp) wants a small number here.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 256,
        requires = "sweep",
        help_heading = "Shorthands"
    )]
    pub throughput_concurrency: u32,
    /// Shorthand: how long to schedule requests (e.g. 60s).
    #[arg(long, help_heading = "Shorthands")]
    pub duration: Option<String>,
    /// Shorthand: how many requests to schedule.
    #[arg(long, help_heading = "Shorthands")]
    pub requests: Option<u64>,
    /// Shorthand: prompt length in tokens.
    #[arg(long, default_value_t = 256, help_heading = "Shorthands")]
    pub input_tokens: u32,
    /// Shorthand: answer length in tokens (max_tokens); with --prompts, for records that
    /// carry no max_tokens of their own.
    #[arg(long, default_value_t = 128, help_heading = "Shorthands")]
    pub output_tokens: u32,
    /// Shorthand: a JSONL file of prompts instead of synthetic ones.
    #[arg(long, help_heading = "Shorthands")]
    pub prompts: Option<PathBuf>,
    /// Shorthand: speak HTTP/2 (ALPN over https, prior knowledge over http).
    #[arg(long, help_heading = "Shorthands")]
    pub http2: bool,
    /// Shorthand: do not stream (no TTFT or ITL then).
    #[arg(long, help_heading = "Shorthands")]
    pub no_stream: bool,
    /// Shorthand: local tokenizer for counts the server does not report
    /// (cl100k_base, o200k_base, sim, or a Hugging Face tokenizer.json or its
    /// directory) [default: sim for embedded, else cl100k_base].
    #[arg(long, help_heading = "Shorthands")]
    pub tokenizer: Option<String>,
    /// Shorthand: environment variable holding the API key.
    #[arg(long, help_heading = "Shorthands")]
    pub api_key_env: Option<String>,
    /// Shorthand: seed of arrivals and prompts.
    #[arg(long, default_value_t = 0, help_heading = "Shorthands")]
    pub seed: u64,
}

/// What the shorthands call: an LLM API, or an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum ShorthandApi {
    Chat,
    Completions,
    Tgi,
    Ollama,
    OllamaGenerate,
    Kserve,
    KserveGrpc,
    Responses,
    Anthropic,
    Mcp,
}

impl ShorthandApi {
    fn kind(self) -> ApiKind {
        match self {
            ShorthandApi::Chat => ApiKind::Chat,
            ShorthandApi::Completions => ApiKind::Completions,
            ShorthandApi::Tgi => ApiKind::Tgi,
            ShorthandApi::Ollama => ApiKind::Ollama,
            ShorthandApi::OllamaGenerate => ApiKind::OllamaGenerate,
            ShorthandApi::Kserve => ApiKind::Kserve,
            ShorthandApi::KserveGrpc => ApiKind::KserveGrpc,
            ShorthandApi::Responses => ApiKind::Responses,
            ShorthandApi::Anthropic => ApiKind::Anthropic,
            ShorthandApi::Mcp => ApiKind::Mcp,
        }
    }
}

/// `--args`: a JSON object.
fn parse_args_object(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err("the arguments must be a JSON object, e.g. '{\"city\": \"Paris\"}'".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

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
        "spec.timeouts.total" => "--timeout",
        p if p.starts_with("spec.payloadTemplate.mcp.ops[0].args") => "--args",
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
    let url = match (&args.url, args.stdio.is_empty()) {
        (Some(_), false) => {
            bail!("--url and a server command after `--` both say where the server is: keep one")
        }
        (None, false) if args.api != ShorthandApi::Mcp => {
            bail!("a server command after `--` starts an MCP server over stdio: add --api mcp")
        }
        (None, false) => "stdio".to_owned(),
        (Some(url), true) => url.clone(),
        (None, true) => bail!(
            "give a spec file, or --url (e.g. `redline run --url embedded --rate 10 --duration 30s`)"
        ),
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
    let (prompts, mcp) = match args.api {
        ShorthandApi::Mcp => (None, Some(shorthand_mcp(args)?)),
        _ if args.tool.is_some() => bail!("--tool calls an MCP server's tool: add --api mcp"),
        _ => (Some(shorthand_prompts(args)?), None),
    };
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
                prompts,
                request: None,
                image: None,
                audio: None,
                speech: None,
                realtime: None,
                mcp,
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
            timeouts: crate::spec::TimeoutsSpec {
                total: args.timeout.map(Dur),
                ..crate::spec::TimeoutsSpec::default()
            },
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
                grader: None,
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

/// `--tool` and `--args` as an MCP mix of one operation.
fn shorthand_mcp(args: &RunArgs) -> Result<crate::spec::mcp::McpSpec> {
    let Some(tool) = &args.tool else {
        bail!("say which tool to call: --tool NAME (and its arguments: --args JSON)");
    };
    Ok(crate::spec::mcp::McpSpec {
        listen: false,
        ops: vec![crate::spec::mcp::McpOpSpec {
            tool: Some(tool.clone()),
            args: args.args.clone(),
            ..Default::default()
        }],
        churn: 0.0,
        progress: false,
    })
}

/// The shorthands' one service, `llm`.
fn shorthand_service(args: &RunArgs, url: &str, tls: Option<&TlsSpec>) -> ServiceSpec {
    ServiceSpec {
        url: url.to_owned(),
        model: args.model.clone(),
        profile: args.profile.clone(),
        api: args.api.kind(),
        api_key_env: args.api_key_env.clone(),
        headers: BTreeMap::new(),
        http2: args.http2,
        tls: tls.filter(|_| url.starts_with("https://")).cloned(),
        tokenizer: args.tokenizer.clone(),
        command: args.stdio.clone(),
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
