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
use serve::{ChaosArgs, SimArgs, chaos, collect, sim};

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
    /// bound is also beyond noise. Graded runs compare their accuracy too.
    Compare {
        /// Run folders: the baseline, then one or more to compare with it.
        #[arg(required = true, num_args = 2..)]
        runs: Vec<PathBuf>,
        /// METRIC.STAT > +N% (or +Nms, or < -N%); metrics ttft, itl, tpot, e2e,
        /// time_to_first_answer, reasoning_time, time_to_first_audio,
        /// time_to_first_transcript; stats p50, p90, p99. Or `accuracy < -Npp` for
        /// graded runs. May be repeated.
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
    /// embeddings, /metrics) driven by a continuous-batching engine model, with the
    /// other tiers of an agent beside it: vector search, tools, an MCP server (/mcp).
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
