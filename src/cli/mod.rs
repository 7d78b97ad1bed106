//! The `redline` command line: subcommands parse their arguments and call into the
//! library; no logic of their own.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::report::{render_header, render_terminal};
use crate::runner::{RunOptions, run as run_scenario};
use crate::scenario::Scenario;
use crate::spec::{
    self, ApiKind, DatasetFormat, DatasetSpec, Dur, InferenceSpec, LengthSpec, Metadata,
    PayloadTemplate, PromptsSpec, ServiceSpec, SpecErrors, SpecFile, StageSpec, SweepSpec,
    SyntheticSpec, TlsSpec,
};
use crate::tokenizer::LocalTokenizer;

mod output;
mod progress;
mod advise;
mod check;
mod coldstart;
mod compare;
mod datagen;
mod explain;
mod graph;
mod heal;
mod k8s;
mod report;
mod serve;
mod run;
mod coordinate;
mod segments;
mod shadow;
mod validate;
mod watch;

use advise::*;
use check::*;
use coldstart::*;
use compare::*;
use datagen::*;
use explain::*;
use graph::*;
use heal::*;
use k8s::*;
use report::*;
use run::*;
use segments::*;
use validate::*;

use output::{err, errln, out, outln};
use serve::{chaos, collect, sim};

pub use crate::report::outputs::exit;

#[derive(Debug, Parser)]
#[command(
    name = "redline",
    version,
    about = "A load tester for AI-native services",
    after_help = "Exit codes: 0 the run completed and its SLOs passed · 1 some SLO failed (or was not proven, under --strict) or a streaming SLO opened an episode, or, without SLOs, more than 1% of requests failed or none succeeded · 2 spec or usage error · 3 no request reached the target · 130 interrupted (records and a partial report are written)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a load test from a spec file, or from shorthands
    /// (`redline run --url http://127.0.0.1:8000 --model M --rate 20 --duration 60s`).
    Run(Box<RunArgs>),
    /// Judge a finished run's records against a spec's SLOs (`sloThresholds`), offline:
    /// other thresholds, another confidence, the same data.
    Check {
        /// records.jsonl of the run.
        records: PathBuf,
        /// The spec whose ScaleSpec holds the SLOs (and whose goodput bounds apply).
        #[arg(long)]
        spec: PathBuf,
        /// Treat `not_proven` as failure.
        #[arg(long)]
        strict: bool,
        /// Also write the verdicts as JUnit XML to this file.
        #[arg(long)]
        junit: Option<PathBuf>,
        /// Draw no progress bar (it is drawn only on a terminal anyway).
        #[arg(long)]
        quiet: bool,
    },
    /// Run a spec's streaming SLOs (`streaming:` and windowed SLOs in its ScaleSpec)
    /// over a run's records, Prometheus or VictoriaMetrics range queries, or a
    /// JSON-lines log: the windows, detectors and episodes a live run would have had.
    /// `--follow` keeps reading as they grow. Exits 1 when an episode opened.
    Watch(watch::WatchArgs),
    /// Which service made a run breach: the call graph reversed into a causal model
    /// (each node's latency a function of its callees' plus its own, failures a
    /// noisy-OR), the change from a baseline split among the nodes by Shapley values
    /// with bootstrap intervals, and `do(node = baseline)` for each. Writes
    /// RUN/explain.json.
    Explain(ExplainArgs),
    /// The remediation agent: an LLM (any OpenAI-compatible server) reads a failed
    /// run's report and picks actions from a runbook's whitelist, each checked against
    /// its JSON Schema, at most 3 steps, rolled back when it fails and verified with a
    /// short load. A dry run unless --execute; everything goes to RUN/heal.jsonl.
    Heal(HealArgs),
    /// How long a model server takes to serve its first token after being started:
    /// cold (a fresh process, the weights dropped from the page cache) and warm (a
    /// restart, or a wake from sleep mode), each phase timed from outside (port open,
    /// ready, first token, decode rate) with peak and steady memory. Writes
    /// coldstart.json and the servers' logs.
    Coldstart(ColdstartArgs),
    /// Autoscaler settings from measurements: a VerticalPodAutoscaler (memory bounds
    /// by the cold rule, peak × 1.3, or the warm rule, steady × 1.05; the update mode
    /// by the start-up time), replicas for --target-rate from a sweep's knee, and the
    /// HPA's scale-up lead time. Each number says which measurement it came from.
    Advise(AdviseArgs),
    /// SLOs as code beyond a run: `redline slo rules SPEC` prints Prometheus alerting
    /// rules for the spec's SLOs.
    Slo {
        #[command(subcommand)]
        command: SloCommand,
    },
    /// Build a run folder's report.html again (and timeline.json) from its
    /// summary.json and records.jsonl: for an interrupted run, or to restyle an old one.
    /// A run killed before it wrote summary.json gets one rebuilt from its records
    /// with `--spec`.
    Report {
        /// The run folder (`out/NAME/latest`, or what `--out` named).
        dir: PathBuf,
        /// Write the HTML here instead of DIR/report.html.
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// The spec the run ran: when DIR has no summary.json, it is rebuilt from
        /// records.jsonl with this spec's SLOs (and marked interrupted).
        #[arg(long)]
        spec: Option<PathBuf>,
    },
    /// Coordinate workers on several machines (`run --segment K/N --coordinator URL`):
    /// they wait for each other and start together, push their figures every 2 s, and
    /// are all stopped once the whole run is certain to fail an `abort_on_fail` SLO.
    /// Exits 1 when it stopped them, after every worker is done or silent for 10 s.
    Coordinate(coordinate::CoordinateArgs),
    /// Join the folders of a segmented run's workers (`run --segment`) into one run
    /// folder: one records file, summary, SLO verdict, JUnit file and report. Folders
    /// of different specs are refused; a share no folder holds is named as missing.
    Merge {
        /// The workers' run folders.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// The merged run's folder.
        #[arg(long)]
        out: PathBuf,
        /// Treat an SLO that is `not_proven` as failed.
        #[arg(long)]
        strict: bool,
        /// Draw no progress bar.
        #[arg(long)]
        quiet: bool,
        /// Merge the folders' `aggregate.json` files (HDR histograms and counts) and
        /// not their records: for runs too big to read again. The figures and the SLO
        /// verdicts are the same; report.html, timeline.json and windowed SLOs need the
        /// records and are left out. Used by itself when a folder has no records.
        #[arg(long)]
        without_records: bool,
    },
    /// Compare runs with the first (the baseline): each metric's percentiles, whether a
    /// difference is beyond noise (a 95 % bootstrap interval, and Mann–Whitney U), and
    /// a regression gate: `--fail-on 'ttft.p99 > +10%'` exits 1 when a rise past the
    /// bound is also beyond noise.
    Compare {
        /// Run folders: the baseline, then one or more to compare with it.
        #[arg(required = true, num_args = 2..)]
        runs: Vec<PathBuf>,
        /// METRIC.STAT > +N% (or +Nms, or < -N%); metrics ttft, itl, tpot, e2e; stats
        /// p50, p90, p99. May be repeated.
        #[arg(long)]
        fail_on: Vec<String>,
        /// The smallest change called a difference, in percent: runs of one spec on
        /// one machine drift by a few percent.
        #[arg(long, default_value_t = 5.0)]
        min_change: f64,
        /// Also write the comparison as a self-contained HTML page.
        #[arg(long)]
        html: Option<PathBuf>,
    },
    /// Check a spec file and print what it would run, without running it.
    Validate {
        /// The spec file.
        spec: PathBuf,
    },
    /// Print a JSON Schema: `spec` (one document of a spec file), `summary`
    /// (summary.json) or `record` (one line of records.jsonl).
    Schema {
        #[arg(value_enum)]
        of: SchemaOf,
    },
    /// Learn prompt templates from a log (JSONL with a prompt/messages field, or one
    /// prompt a line): TF-IDF, k-means++, one template per cluster with its weight and
    /// slots. The output is a prompt source for specs (`prompts: { templates: … }`).
    Datagen(DatagenArgs),
    /// Kubernetes manifests for a segmented run (`k8s render`).
    K8s {
        #[command(subcommand)]
        command: K8sCommand,
    },
    /// Print Kubernetes CustomResourceDefinitions for the spec kinds, so a spec file
    /// can be applied to a cluster (`redline crd | kubectl apply -f -`).
    Crd,
    /// Serve the LLM simulator: an OpenAI-compatible server (chat, completions,
    /// embeddings, /metrics) driven by a continuous-batching engine model.
    Sim(SimArgs),
    /// Put a fault-injecting reverse proxy in front of a service: per-request delays,
    /// aborts, rate limits, emptied JSON results, and token-stream faults (stalls,
    /// drips, cuts, corrupt events, a missing `[DONE]`); rules from a file or changed
    /// live through the admin API.
    Chaos(ChaosArgs),
    /// The dependency graph of traces: nodes service/operation, edges caller → callee
    /// with calls, latency percentiles, error rate and weight, and the reasoning paths
    /// with their frequencies. Reads OTLP/JSON or Jaeger JSON (a file, or every
    /// .json/.jsonl file in a directory).
    Graph {
        /// A trace export, what `redline collect` stored (its directory), or a
        /// directory of exports.
        input: PathBuf,
        #[arg(long, value_enum, default_value = "json")]
        format: GraphFormat,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Join the spans to a run's records.jsonl by traceparent: per step, client
        /// time against the server span's time (in the JSON output).
        #[arg(long)]
        records: Option<PathBuf>,
    },
    /// Receive OTLP/HTTP traces (protobuf or JSON, POST /v1/traces) from the services
    /// under test and store them in DIR/spans.jsonl for `redline graph`.
    /// A recording proxy: every exchange with a service (bodies, event streams with
    /// their timing, trace IDs), credentials redacted, written to a versioned
    /// recording; optionally mirrored to a shadow (Envoy's semantics).
    Record(shadow::RecordArgs),
    /// Replay a recording against a primary, a candidate and a secondary (the noise
    /// baseline), and diff the answers field by field: flagged only where the
    /// candidate differs beyond what the primary's version does anyway, each named
    /// with its module. Writes diff.json; exit 1 under --fail-on-diff when flagged.
    Replay(shadow::ReplayArgs),
    Collect {
        /// Where to listen (loopback unless --allow-remote).
        #[arg(long, default_value = "127.0.0.1:4318")]
        listen: SocketAddr,
        /// The directory for spans.jsonl and collect.json (the counts).
        #[arg(long, default_value = "out/collect")]
        out: PathBuf,
        /// Spans to store at most; past it they are dropped and counted.
        #[arg(long, default_value_t = 5_000_000)]
        max_spans: u64,
        /// Allow listening on a non-loopback address.
        #[arg(long)]
        allow_remote: bool,
        #[command(flatten)]
        tls: ServerTlsArgs,
    },
}

/// Certificates for an https upstream of one of redline's proxies (`chaos`, `record`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UpstreamTlsArgs {
    /// For an https upstream: trust only the CAs in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca_cert: Option<PathBuf>,
    /// For an https upstream: accept any certificate.
    #[arg(long, conflicts_with = "upstream_ca_cert")]
    pub upstream_insecure: bool,
}

impl UpstreamTlsArgs {
    pub fn load(&self) -> Result<crate::client::tls::TlsSettings> {
        crate::client::tls::TlsSettings::load(&crate::client::tls::TlsOptions {
            ca_cert: self.upstream_ca_cert.clone(),
            insecure_skip_verify: self.upstream_insecure,
            ..Default::default()
        })
        .map_err(|e| anyhow::anyhow!("--upstream-{}: {}", e.field.replace('_', "-"), e.message))
    }
}

/// TLS on one of redline's servers.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerTlsArgs {
    /// Serve https with this certificate chain (PEM); needs --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "tls_self_signed"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve https with a certificate for localhost, 127.0.0.1 and ::1 from a CA made
    /// at start; the CA's certificate is written to CA_FILE for clients to trust
    /// (`--ca-cert CA_FILE`, `curl --cacert`, `SSL_CERT_FILE`).
    #[arg(long, value_name = "CA_FILE")]
    pub tls_self_signed: Option<PathBuf>,
    /// Require client certificates signed by the CAs in this PEM file (mTLS).
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
}

impl ServerTlsArgs {
    /// The server's TLS, when asked for.
    pub fn load(&self) -> Result<Option<crate::net::ServerTls>> {
        let client_ca = self.tls_client_ca.as_deref();
        match (&self.tls_cert, &self.tls_key, &self.tls_self_signed) {
            (Some(cert), Some(key), _) => {
                crate::net::ServerTls::from_files(cert, key, client_ca).map(Some)
            }
            (_, _, Some(ca)) => crate::net::ServerTls::self_signed(ca, client_ca).map(Some),
            _ if client_ca.is_some() => {
                bail!("--tls-client-ca needs --tls-cert and --tls-key, or --tls-self-signed")
            }
            _ => Ok(None),
        }
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum GraphFormat {
    Json,
    Dot,
    Mermaid,
}

#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// The service to forward to, e.g. http://127.0.0.1:8000 (loopback unless
    /// --allow-remote-upstream).
    #[arg(long)]
    pub upstream: String,
    /// Where the proxy listens. Loopback by default; anything else needs --allow-remote.
    #[arg(long, default_value = "127.0.0.1:8100")]
    pub listen: SocketAddr,
    /// The admin API's address (GET/POST /rules, PUT/DELETE /rules/NAME, GET /stats,
    /// POST /reset).
    #[arg(long, default_value = "127.0.0.1:8474")]
    pub admin: SocketAddr,
    /// The rules file (YAML: `seed`, `allow_header_faults`, `rules`). Without it the
    /// proxy starts with no rules; add them through the admin API.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Seed of every fault decision (overrides the rules file's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Let requests ask for faults with `x-redline-fault-*` headers.
    #[arg(long)]
    pub allow_header_faults: bool,
    /// Write every injected fault as a JSON line (with the request's traceparent).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Speak HTTP/2 to the upstream (ALPN over https, prior knowledge over http).
    #[arg(long)]
    pub upstream_http2: bool,
    #[command(flatten)]
    pub upstream_tls: UpstreamTlsArgs,
    #[command(flatten)]
    pub tls: ServerTlsArgs,
    /// Allow an upstream that is not on this machine.
    #[arg(long)]
    pub allow_remote_upstream: bool,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    pub allow_remote: bool,
}

#[derive(Debug, clap::Args)]
pub struct DatagenArgs {
    /// The log to learn from.
    #[arg(required_unless_present = "synthetic_log")]
    pub log: Option<PathBuf>,
    /// Templates (clusters) to learn.
    #[arg(long, default_value_t = 8)]
    pub k: usize,
    /// Where to write the templates (YAML).
    #[arg(long, default_value = "templates.yaml")]
    pub out: PathBuf,
    /// JSON field holding the prompt [default: prompt, else messages].
    #[arg(long)]
    pub field: Option<String>,
    /// Keep prompts of at least this many tokens.
    #[arg(long, default_value_t = 12)]
    pub min_length: u32,
    /// Keep prompts of at most this many tokens.
    #[arg(long, default_value_t = 512)]
    pub max_length: u32,
    /// Seed of the sample and of k-means++.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Prompts held in memory to fit on (a seeded reservoir sample of the log).
    #[arg(long, default_value_t = 10_000)]
    pub sample: usize,
    /// Count and skip lines that are not valid JSON or have no prompt.
    #[arg(long)]
    pub skip_invalid: bool,
    /// A JSON field with each line's known family: also print how well the clusters
    /// recover it (adjusted Rand index).
    #[arg(long)]
    pub label_field: Option<String>,
    /// Tokenizer for the length bounds and statistics (as in specs).
    #[arg(long, default_value = "cl100k_base")]
    pub tokenizer: String,
    /// Print each template's weight and first 40 characters.
    #[arg(long)]
    pub preview: bool,
    /// Draw no progress bar (it is drawn only on a terminal anyway).
    #[arg(long)]
    pub quiet: bool,
    /// Instead of learning: write a synthetic log of N lines from eight known prompt
    /// families (with a `family` field) to LOG_FILE, for demos and tests.
    #[arg(long, value_names = ["N", "LOG_FILE"], num_args = 2, conflicts_with = "log")]
    pub synthetic_log: Option<Vec<String>>,
}

#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Engine profile: a built-in name (7b, 7b-multimodal, tiny, llamacpp) or a YAML/JSON
    /// profile file.
    #[arg(long, default_value = "7b")]
    pub profile: String,
    /// Plant known differences in the answers, a candidate for `redline replay`:
    /// `style_share=0.15,total_tokens_offset=1,ttft_factor=1.3,random_field=x_sample`
    /// (any of them).
    #[arg(long, value_parser = crate::sim::planted::Planted::parse)]
    pub planted: Option<crate::sim::planted::Planted>,
    /// Address to listen on. Loopback by default; anything else needs --allow-remote.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub addr: SocketAddr,
    /// Port of Qdrant's gRPC API, on the address's host (0: a free one, named in the
    /// start-up line and in `GET /redline/endpoints`).
    #[arg(long, default_value_t = 0)]
    pub qdrant_grpc_port: u16,
    /// Port of KServe v2's gRPC API (Triton's), likewise.
    #[arg(long, default_value_t = 0)]
    pub kserve_grpc_port: u16,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    pub allow_remote: bool,
    #[command(flatten)]
    pub tls: ServerTlsArgs,
    /// Seed of every answer (together with the prompt).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Model name to serve (default: the profile's, e.g. sim-7b).
    #[arg(long)]
    pub model: Option<String>,
    /// Write the simulator's tokenizer to DIR (tokenizer.json, tokenizer_config.json)
    /// and exit: for clients that need one on disk, such as GuideLLM or AIPerf.
    #[arg(long, value_name = "DIR")]
    pub write_tokenizer: Option<PathBuf>,
    /// Documents in the vector-search corpus (`/collections/NAME/points/search`).
    #[arg(long, default_value_t = 1000)]
    pub corpus_size: usize,
    /// Latency of each vector search, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub search_ms: f64,
    /// Latency of each tool call (`POST /tools/NAME`), milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub tool_ms: f64,
    /// Share of tool calls that fail with 500.
    #[arg(long, default_value_t = 0.0)]
    pub tool_failure_rate: f64,
    /// Answer chat requests from this script (a YAML list of `tool_call: {name,
    /// arguments}`, `content: TEXT`, `json: VALUE` or `error: {status, body}`), one
    /// per request in order, instead of the engine: to drive an agent through an exact
    /// path. `GET /redline/script` lists what it was asked.
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Write the search corpus (corpus.jsonl: id, text, embedding) and ground-truth
    /// queries (queries.jsonl: prompt, relevant) to DIR and exit: to load the same
    /// corpus into a real vector database.
    #[arg(long, value_name = "DIR")]
    pub write_corpus: Option<PathBuf>,
    /// Queries to write with --write-corpus.
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
    #[command(flatten)]
    pub startup: SimStartupArgs,
}

/// `redline sim --startup`: model a server's start-up (docs/coldstart.md).
#[derive(Debug, clap::Args)]
pub struct SimStartupArgs {
    /// Model start-up like llama.cpp's server: the port opens at once, /health and
    /// the model's routes answer 503 until the weights are loaded, the context
    /// allocated and the warm-up done; vLLM's sleep mode (POST /sleep, /wake_up);
    /// fragmentation after hot restarts; GET /redline/startup tells the truth.
    #[arg(long)]
    pub startup: bool,
    /// The weights file whose page-cache residency makes a start cold (from the disk)
    /// or warm (from the page cache); it is read at each start. Without it every
    /// start is cold.
    #[arg(long, value_name = "FILE", requires = "startup")]
    pub weights: Option<PathBuf>,
    /// Bytes of weights each start loads (default: a 7B model in fp16).
    #[arg(long, value_name = "SIZE", default_value = "14GB", value_parser = crate::spec::Size::parse, requires = "startup")]
    pub weights_size: crate::spec::Size,
    /// Disk read bandwidth per second (cold starts).
    #[arg(long, value_name = "SIZE", default_value = "2GB", value_parser = crate::spec::Size::parse, requires = "startup")]
    pub disk_bandwidth: crate::spec::Size,
    /// Page cache to device bandwidth per second (warm starts).
    #[arg(long, value_name = "SIZE", default_value = "12GB", value_parser = crate::spec::Size::parse, requires = "startup")]
    pub cache_bandwidth: crate::spec::Size,
    /// Host memory to device bandwidth per second (waking from sleep).
    #[arg(long, value_name = "SIZE", default_value = "24GB", value_parser = crate::spec::Size::parse, requires = "startup")]
    pub host_bandwidth: crate::spec::Size,
    /// Warm-up of a fresh process after loading, milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 1000.0,
        requires = "startup"
    )]
    pub warmup_ms: f64,
}

impl SimStartupArgs {
    /// The start-up model these flags describe, when `--startup` is given.
    pub fn model(&self) -> Option<crate::sim::startup::StartupModel> {
        self.startup.then(|| crate::sim::startup::StartupModel {
            weights_bytes: self.weights_size.0,
            disk_bytes_per_s: self.disk_bandwidth.0 as f64,
            cache_bytes_per_s: self.cache_bandwidth.0 as f64,
            host_bytes_per_s: self.host_bandwidth.0 as f64,
            weights_file: self.weights.clone(),
            warmup_ms: self.warmup_ms.max(0.0),
            ..Default::default()
        })
    }
}

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
    /// generate extension (Triton).
    #[arg(long, value_enum, default_value = "chat", help_heading = "Shorthands")]
    pub api: crate::client::dialect::LlmApi,
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

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaOf {
    Spec,
    Summary,
    Record,
    /// `redline replay`'s diff.json.
    Diff,
}

#[derive(Debug, Subcommand)]
pub enum SloCommand {
    /// The spec's SLOs as Prometheus rules: recording rules for each SLO's error ratio
    /// over 5m, 30m, 1h, 2h, 6h, 1d and 3d, and multi-window multi-burn-rate alerts
    /// (page: 14.4× over 5m and 1h, 6× over 30m and 6h; ticket: 3× over 2h and 1d, 1×
    /// over 6h and 3d), over redline's live metrics (`run --metrics-addr`) or vLLM's.
    Rules {
        /// The spec whose ScaleSpec holds the SLOs.
        spec: PathBuf,
        /// `prometheus-rule` (a Prometheus Operator resource) or `prometheus` (a rule
        /// file for `promtool check rules` and `rule_files:`).
        #[arg(long, value_enum, default_value_t = crate::slo::rules::RulesFormat::PrometheusRule)]
        format: crate::slo::rules::RulesFormat,
        /// Whose metric names the rules query.
        #[arg(long, value_enum, default_value_t = crate::slo::rules::MetricNames::Redline)]
        metrics: crate::slo::rules::MetricNames,
    },
}

/// Runs the parsed command; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Run(args) => run_command(*args).await,
        Command::Validate { spec } => validate(&spec),
        Command::Report { dir, out, spec } => report(&dir, out.as_deref(), spec.as_deref()).await,
        Command::Coordinate(args) => coordinate::coordinate(args).await,
        Command::Merge {
            dirs,
            out,
            strict,
            quiet,
            without_records,
        } => merge(&dirs, &out, strict, quiet, without_records).await,
        Command::Slo {
            command:
                SloCommand::Rules {
                    spec,
                    format,
                    metrics,
                },
        } => slo_rules(&spec, format, metrics),
        Command::Watch(args) => watch::watch(args).await,
        Command::Explain(args) => explain_command(args),
        Command::Heal(args) => heal_command(args).await,
        Command::Coldstart(args) => coldstart_command(args).await,
        Command::Advise(args) => advise_command(args),
        Command::Compare {
            runs,
            fail_on,
            min_change,
            html,
        } => compare_runs(&runs, &fail_on, min_change, html.as_deref()),
        Command::Check {
            records,
            spec,
            strict,
            junit,
            quiet,
        } => check(&records, &spec, strict, junit.as_deref(), quiet).await,
        Command::Schema { of } => {
            let schema = match of {
                SchemaOf::Spec => crate::spec::schema::spec_schema(),
                SchemaOf::Summary => crate::report::summary_schema(),
                SchemaOf::Record => crate::report::record_schema(),
                SchemaOf::Diff => crate::shadow::diff::schema(),
            };
            outln!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(exit::OK)
        }
        Command::Datagen(args) => datagen(args).await,
        Command::K8s { command } => k8s(command),
        Command::Crd => {
            out(&crate::spec::schema::crds());
            Ok(exit::OK)
        }
        Command::Sim(args) => sim(args).await,
        Command::Chaos(args) => chaos(args).await,
        Command::Graph {
            input,
            format,
            out,
            records,
        } => graph(&input, format, out.as_deref(), records.as_deref()),
        Command::Record(args) => shadow::record(args).await,
        Command::Replay(args) => shadow::replay(args).await,
        Command::Collect {
            listen,
            out,
            max_spans,
            allow_remote,
            tls,
        } => collect(listen, &out, max_spans, allow_remote, &tls).await,
    }
}

/// `redline slo rules`: the spec's SLOs as Prometheus rules on stdout; the SLOs that
/// cannot be written over those metrics are named on stderr.
fn slo_rules(
    spec: &Path,
    format: crate::slo::rules::RulesFormat,
    metrics: crate::slo::rules::MetricNames,
) -> Result<i32> {
    let Some(scenario) = scenario_or_problems(spec)? else {
        return Ok(exit::USAGE);
    };
    let Some(slos) = &scenario.slos else {
        errln!(
            "{}: no SLOs: add a `kind: ScaleSpec` document with `sloThresholds` (see examples/redlines.yaml)",
            spec.display()
        );
        return Ok(exit::USAGE);
    };
    let (yaml, skipped) = crate::slo::rules::render(slos, &scenario.name, metrics, format);
    for why in &skipped {
        errln!("redline: left out {why}");
    }
    out(&yaml);
    Ok(exit::OK)
}

/// A spec file's scenario; or, when it has problems, every one printed and none.
fn scenario_or_problems(path: &std::path::Path) -> Result<Option<Scenario>> {
    Ok(match load_scenario(path)? {
        Ok(scenario) => Some(scenario),
        Err(errors) => {
            err(&errors.to_string());
            None
        }
    })
}

/// A spec file's scenario, or every problem in it.
fn load_scenario(path: &std::path::Path) -> Result<Result<Scenario, SpecErrors>> {
    load_scenario_with(path, |_| {})
}

/// [`load_scenario`], with the parsed spec amended first (by command-line flags).
fn load_scenario_with(
    path: &std::path::Path,
    amend: impl FnOnce(&mut SpecFile),
) -> Result<Result<Scenario, SpecErrors>> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the spec file {name}"))?;
    Ok(spec::parse(&name, &text).and_then(|mut file| {
        amend(&mut file);
        Scenario::from_spec(&file, &text)
    }))
}

/// Ctrl-C or SIGTERM: stop scheduling and drain.
async fn stop_on_signal(stop: CancellationToken) {
    signal().await;
    errln!("redline: stopping — draining requests in flight, then writing the partial report");
    stop.cancel();
}

/// Ctrl-C or SIGTERM.
async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

fn parse_run_id(text: &str) -> Result<u64, String> {
    u64::from_str_radix(text, 16).map_err(|_| format!("`{text}` is not 16 hex digits"))
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    crate::spec::values::Dur::parse(text).map(|d| d.0)
}
