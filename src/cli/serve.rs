//! The commands that serve: the simulator (`redline sim`, and the files it can write),
//! the chaos proxy (`redline chaos`) and the trace receiver (`redline collect`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::output::{err, errln, outln};
use super::{ServerTlsArgs, UpstreamTlsArgs, exit, signal};
use crate::sim::tiers::{LatencySpec, TierConfig};
use crate::sim::{Profile, SimConfig};

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
pub struct SimArgs {
    /// Engine profile: a built-in name (7b, 7b-multimodal, tiny, llamacpp) or a YAML/JSON
    /// profile file.
    #[arg(long, default_value = "7b")]
    pub profile: String,
    /// Plant known differences in the answers, a candidate for `redline replay`:
    /// `style_share=0.15,total_tokens_offset=1,ttft_factor=1.3,random_field=x_sample`
    /// (any of them); `tool_calls_spoiled_above=4` spoils the tool calls planned while
    /// more than 4 requests are in the engine (counted in /redline/truth).
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
    /// Reasoning tokens the model thinks before every answer (chat's
    /// `reasoning_content`, Responses' reasoning items, Messages' thinking blocks when
    /// asked, Ollama's `thinking`); the profile's when not given.
    #[arg(long, value_name = "N")]
    pub reasoning_tokens: Option<u32>,
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
    /// Serve only the MCP server, over stdio (one JSON-RPC message per line; this
    /// process is one session, ended when stdin closes): for clients that start their
    /// tools as child processes. --tool-ms, --tool-failure-rate and --seed apply.
    #[arg(long)]
    pub mcp_stdio: bool,
    /// With --mcp-stdio: append one JSON line per request served to FILE (its method,
    /// tool, and whether it failed), as ground truth that many processes may share.
    #[arg(long, value_name = "FILE", requires = "mcp_stdio")]
    pub mcp_truth: Option<PathBuf>,
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

/// Writes the simulator's tokenizer as a Hugging Face model directory would hold it.
pub(super) fn write_tokenizer(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let config = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1_000_000,
    });
    for (name, value) in [
        (
            "tokenizer.json",
            crate::tokenizer::sim::huggingface_tokenizer_json(),
        ),
        ("tokenizer_config.json", config),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(&value)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        outln!("{}", path.display());
    }
    Ok(())
}

pub(super) async fn sim(args: SimArgs) -> Result<i32> {
    if let Some(dir) = &args.write_tokenizer {
        write_tokenizer(dir)?;
        return Ok(exit::OK);
    }
    if let Some(dir) = &args.write_corpus {
        let profile = Profile::load(&args.profile)?;
        write_corpus(dir, &args, profile.embedding_dim as usize)?;
        return Ok(exit::OK);
    }
    if args.mcp_stdio {
        return mcp_stdio(&args).await;
    }
    if !args.addr.ip().is_loopback() && !args.allow_remote {
        bail!(
            "refusing to listen on {}: the simulator binds loopback unless you pass --allow-remote",
            args.addr
        );
    }
    let mut profile = Profile::load(&args.profile)?;
    if args.planted.is_some() {
        profile.planted = args.planted.clone();
    }
    if let Some(n) = args.reasoning_tokens {
        profile.reasoning_tokens = n;
    }
    let tls = args.tls.load()?;
    let script = match &args.script {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let script = crate::sim::script::Script::parse(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Some(std::sync::Arc::new(script))
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let bind = |port: u16, what: &'static str| async move {
        let addr = SocketAddr::new(args.addr.ip(), port);
        tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} ({what})"))
    };
    let qdrant = bind(args.qdrant_grpc_port, "Qdrant's gRPC API").await?;
    let kserve = bind(args.kserve_grpc_port, "KServe's gRPC API").await?;
    let model = args.model.clone().unwrap_or_else(|| profile.model.clone());
    let scheme = if tls.is_some() { "https" } else { "http" };
    errln!(
        "redline sim: serving `{model}` (profile {}) on {scheme}://{}/v1, Qdrant gRPC on {scheme}://{}, KServe gRPC on {scheme}://{} — Ctrl-C to stop",
        profile.name,
        listener.local_addr()?,
        qdrant.local_addr()?,
        kserve.local_addr()?
    );
    let grpc = crate::sim::server::GrpcListeners {
        qdrant: Some(qdrant),
        kserve: Some(kserve),
    };
    let config = SimConfig {
        profile,
        model: args.model,
        seed: args.seed,
        tiers: TierConfig {
            corpus_size: args.corpus_size,
            search_latency: LatencySpec {
                ms: Some(args.search_ms),
                ..LatencySpec::default()
            },
            tool_latency: LatencySpec {
                ms: Some(args.tool_ms),
                ..LatencySpec::default()
            },
            tool_failure_rate: args.tool_failure_rate,
            // A standalone simulator may be searched by anyone.
            warm_corpus: true,
        },
        script,
        startup: args.startup.model(),
    };
    crate::sim::server::serve(listener, grpc, tls, config, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(0)
}

/// `redline sim --mcp-stdio`: the MCP server on stdin and stdout until stdin ends.
async fn mcp_stdio(args: &SimArgs) -> Result<i32> {
    let truth = match &args.mcp_truth {
        Some(path) => Some(std::sync::Arc::new(std::sync::Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open {}", path.display()))?,
        ))),
        None => None,
    };
    let tiers = TierConfig {
        corpus_size: args.corpus_size,
        tool_latency: LatencySpec {
            ms: Some(args.tool_ms),
            ..LatencySpec::default()
        },
        tool_failure_rate: args.tool_failure_rate,
        ..TierConfig::default()
    };
    // Each process is one session: the seed is mixed with the process's id, so that a
    // client churning sessions does not meet the same planted failures in each.
    let seed = crate::seed::mix_seed(&[args.seed, u64::from(std::process::id())]);
    let dim = Profile::load(&args.profile)?.embedding_dim as usize;
    let tiers = std::sync::Arc::new(crate::sim::tiers::Tiers::new(tiers, seed, dim));
    let mcp = std::sync::Arc::new(crate::sim::mcp::McpServer::new(tiers, seed));
    crate::sim::mcp::stdio::serve(mcp, tokio::io::stdin(), tokio::io::stdout(), truth).await?;
    Ok(exit::OK)
}

pub(super) async fn chaos(args: ChaosArgs) -> Result<i32> {
    for (what, addr) in [("proxy", args.listen), ("admin API", args.admin)] {
        if !addr.ip().is_loopback() && !args.allow_remote {
            bail!(
                "refusing to serve the {what} on {addr}: the chaos proxy binds loopback unless you pass --allow-remote"
            );
        }
    }
    let upstream = crate::chaos::upstream_uri(&args.upstream, args.allow_remote_upstream)?;
    let (file, rules) = match &args.rules {
        Some(path) => match crate::chaos::load_rules(&path.display().to_string()) {
            Ok(loaded) => loaded,
            Err(errors) => {
                err(&errors.to_string());
                return Ok(exit::USAGE);
            }
        },
        None => Default::default(),
    };
    let log: Option<Box<dyn std::io::Write + Send>> = match &args.log {
        Some(path) => Some(Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        ))),
        None => None,
    };
    let log = std::sync::Arc::new(crate::chaos::FaultLog::to_writer(log));
    let upstream_tls = args.upstream_tls.load()?;
    let count = rules.len();
    let proxy = crate::chaos::RunningProxy::start(crate::chaos::ProxyConfig {
        upstreams: vec![upstream],
        balance: Default::default(),
        upstream_http2: args.upstream_http2,
        listen: args.listen,
        admin: Some(args.admin),
        rules,
        seed: args.seed.unwrap_or(file.seed),
        allow_header_faults: args.allow_header_faults || file.allow_header_faults,
        log: log.clone(),
        tls: args.tls.load()?,
        upstream_tls: Some(upstream_tls),
        tap: None,
        mirror: None,
    })
    .await?;
    errln!(
        "redline chaos: {} -> {} with {count} rule{}; admin API on http://{} — Ctrl-C to stop",
        proxy.base_url(),
        args.upstream,
        if count == 1 { "" } else { "s" },
        proxy.admin_addr.map_or(String::new(), |a| a.to_string()),
    );
    signal().await;
    let stats = proxy.chaos.stats();
    drop(proxy);
    log.flush();
    errln!(
        "redline chaos: {} requests over {} connections, {} upstream errors",
        stats.requests,
        stats.connections,
        stats.upstream_errors
    );
    for rule in &stats.rules {
        errln!(
            "  {:<20} {:<18} matched {:>8}  injected {:>8}",
            rule.name,
            rule.fault,
            rule.matched,
            rule.injected
        );
    }
    Ok(exit::OK)
}

/// The simulator's search corpus and its ground truth, as files a real vector database
/// can load and a spec can send.
pub(super) fn write_corpus(dir: &Path, args: &SimArgs, dim: usize) -> Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let corpus = crate::sim::tiers::Corpus::generate(args.seed, args.corpus_size, dim);
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join("corpus.jsonl"))?);
    for doc in &corpus.documents {
        let line = serde_json::json!({
            "id": doc.id,
            "text": doc.text,
            "embedding": corpus.embedding(doc.id),
        });
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join("queries.jsonl"))?);
    for query in corpus.queries(args.seed, args.queries) {
        writeln!(out, "{}", serde_json::to_string(&query)?)?;
    }
    out.flush()?;
    errln!(
        "redline sim: wrote {} documents ({dim} dimensions) and {} queries to {}",
        corpus.documents.len(),
        args.queries,
        dir.display()
    );
    Ok(())
}

pub(super) async fn collect(
    listen: SocketAddr,
    out: &Path,
    max_spans: u64,
    allow_remote: bool,
    tls: &super::ServerTlsArgs,
) -> Result<i32> {
    if !listen.ip().is_loopback() && !allow_remote {
        bail!(
            "refusing to listen on {listen}: the receiver binds loopback unless you pass --allow-remote"
        );
    }
    let collector = std::sync::Arc::new(
        crate::trace::receiver::SpanStore::create(out, max_spans)
            .with_context(|| format!("cannot write to {}", out.display()))?,
    );
    let tls = tls.load()?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    errln!(
        "redline collect: OTLP/HTTP traces at {}://{}/v1/traces into {} — Ctrl-C to stop",
        if tls.is_some() { "https" } else { "http" },
        listener.local_addr()?,
        collector.path.display()
    );
    let app = crate::trace::receiver::app(collector.clone());
    crate::net::accept_loop(
        listener,
        tls,
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new()),
        || hyper_util::service::TowerToHyperService::new(app.clone()),
        signal(),
        Some(std::time::Duration::from_secs(5)),
    )
    .await;
    let stats = serde_json::to_string_pretty(&collector.stats)?;
    std::fs::write(out.join("collect.json"), &stats)
        .with_context(|| format!("cannot write {}", out.join("collect.json").display()))?;
    errln!("redline collect: {stats}");
    Ok(exit::OK)
}
