//! `redline coldstart`: the start-up of a model server, cold and warm, timed from
//! outside.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::exit;
use super::output::{errln, out};
use crate::capacity::coldstart::{self, Plan, ProbeTarget, WarmMode, summary};

#[derive(Debug, clap::Args)]
pub struct ColdstartArgs {
    /// GET URL that answers 2xx when the server is ready (503 while loading), e.g.
    /// http://127.0.0.1:8080/health.
    #[arg(long, value_name = "URL")]
    pub ready: String,
    /// Cold starts: a fresh process, with --weights dropped from the page cache first.
    #[arg(long, default_value_t = 5)]
    pub cold: u32,
    /// Warm starts (see --warm-mode).
    #[arg(long, default_value_t = 5)]
    pub warm: u32,
    /// restart: stop the server and start it again with its weights in the page cache;
    /// wake: keep one server and time `POST /wake_up` after `POST /sleep?level=1`
    /// (vLLM's sleep mode; vLLM needs VLLM_SERVER_DEV_MODE=1 for it).
    #[arg(long, value_enum, default_value = "restart")]
    pub warm_mode: WarmMode,
    /// The weights file (a GGUF, a safetensors shard): its pages are dropped from the
    /// page cache before each cold start, and its residency is recorded before each
    /// start. Without it, "cold" starts are only fresh processes.
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,
    /// The model the first-token probe asks for (default: the spec's modelRef, else
    /// the first of /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// A spec with a ModelLoadSpec: its modelRef is the probe's model, and a peak
    /// memory over its resourceLimits.memory fails the measurement (exit 1), as such a
    /// pod would be OOM-killed while starting.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Where the probe goes (default: /v1/chat/completions beside the ready URL).
    #[arg(long, value_name = "URL")]
    pub probe_url: Option<String>,
    /// Tokens the probe asks for (the decode rate is measured over them).
    #[arg(long, default_value_t = 32)]
    pub probe_tokens: u32,
    /// Time only to ready: for a server that is not an LLM.
    #[arg(long, conflicts_with_all = ["model", "probe_url"])]
    pub no_probe: bool,
    /// Longest one start may take, to its first token (e.g. 300s, 10m).
    #[arg(long, default_value = "300s", value_parser = crate::spec::Dur::parse)]
    pub timeout: crate::spec::Dur,
    /// Output folder for coldstart.json and the servers' logs (default:
    /// out/coldstart/<UTC time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The server's command line, after `--` (run as is, never through a shell).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub(super) async fn coldstart_command(args: ColdstartArgs) -> Result<i32> {
    let model_load = match &args.spec {
        Some(path) => match model_load_of(path) {
            Ok(model_load) => Some(model_load),
            Err(why) => {
                errln!("{why}");
                return Ok(exit::USAGE);
            }
        },
        None => None,
    };
    let mut plan = plan_of(&args)?;
    if let (Some(probe), Some(model_load)) = (&mut plan.probe, &model_load)
        && probe.model.is_none()
    {
        probe.model = Some(model_load.model_ref.clone());
    }
    let dir = crate::report::outputs::prepare(args.out.as_deref(), Path::new("out"), "coldstart")
        .context("cannot make the output folder")?
        .path;
    let plan = Plan {
        logs: dir.clone(),
        ..plan
    };
    errln!(
        "redline coldstart: {} cold and {} warm ({}) starts of `{}`",
        plan.cold,
        plan.warm,
        match plan.warm_mode {
            WarmMode::Restart => "restart",
            WarmMode::Wake => "wake",
        },
        plan.command.join(" ")
    );
    let measured = coldstart::measure(&plan, |run| {
        let first = run
            .first_token_ms
            .map_or(String::new(), |ms| format!(", first token {ms:.1} ms"));
        errln!(
            "  {:<5} ready {:.1} ms{first}",
            run.kind.as_str(),
            run.ready_ms
        );
    })
    .await;
    let kinds = summary::summarize(&measured);
    out(&summary::render(&kinds, measured.gpu_note.as_deref()));
    let json = serde_json::json!({
        "command": plan.command,
        "ready": plan.ready.to_string(),
        "warm_mode": plan.warm_mode,
        "weights": plan.weights,
        "runs": measured.runs,
        "summary": kinds,
        "failure": measured.failure,
        "gpu_note": measured.gpu_note,
    });
    let file = dir.join("coldstart.json");
    std::fs::write(&file, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("cannot write {}", file.display()))?;
    errln!("wrote {}", file.display());
    if let Some(why) = &measured.failure {
        errln!("redline coldstart: {why}");
        return Ok(exit::UNREACHABLE);
    }
    let limit = model_load
        .as_ref()
        .and_then(|m| m.resource_limits.get("memory"));
    match limit.map(|text| over_limit(&kinds, text)).transpose() {
        Ok(Some(Some(over))) => {
            errln!("redline coldstart: {over}");
            Ok(exit::SLO_FAILED)
        }
        Ok(_) => Ok(exit::OK),
        Err(e) => {
            errln!("redline coldstart: {e}");
            Ok(exit::USAGE)
        }
    }
}

/// The spec's ModelLoadSpec, or why there is none.
fn model_load_of(path: &Path) -> Result<crate::spec::ModelLoadSpec, String> {
    let spec = crate::spec::load(&path.display().to_string()).map_err(|e| e.to_string())?;
    spec.model_load.ok_or_else(|| {
        format!(
            "{}: no `kind: ModelLoadSpec` document: add one with `modelRef` (see docs/coldstart.md)",
            path.display()
        )
    })
}

/// The most memory a start reached, when it is over the limit `text`.
fn over_limit(kinds: &[summary::KindSummary], text: &str) -> Result<Option<String>, String> {
    let limit = crate::capacity::advise::parse_quantity(text)?;
    let peak = kinds
        .iter()
        .map(|k| k.peak_rss_bytes_max)
        .max()
        .unwrap_or(0);
    Ok((peak > limit).then(|| {
        format!(
            "a start's peak memory {} is over resourceLimits.memory {text}: a pod with this limit would be OOM-killed while starting",
            summary::fmt_bytes(peak)
        )
    }))
}

fn plan_of(args: &ColdstartArgs) -> Result<Plan> {
    let ready: hyper::Uri = parse_url("--ready", &args.ready)?;
    if args.cold + args.warm == 0 {
        bail!("--cold and --warm are both 0: nothing to measure");
    }
    if let Some(weights) = &args.weights
        && let Err(e) = std::fs::metadata(weights)
    {
        bail!("--weights {}: {e}", weights.display());
    }
    let probe = if args.no_probe {
        None
    } else {
        let uri = match &args.probe_url {
            Some(url) => parse_url("--probe-url", url)?,
            None => {
                coldstart::with_path(&ready, "/v1/chat/completions").map_err(anyhow::Error::msg)?
            }
        };
        Some(ProbeTarget {
            uri,
            model: args.model.clone(),
            max_tokens: args.probe_tokens.max(2),
        })
    };
    Ok(Plan {
        command: args.command.clone(),
        ready,
        probe,
        weights: args.weights.clone(),
        cold: args.cold,
        warm: args.warm,
        warm_mode: args.warm_mode,
        timeout: args.timeout.0,
        logs: PathBuf::new(),
    })
}

fn parse_url(flag: &str, url: &str) -> Result<hyper::Uri> {
    let uri: hyper::Uri = url
        .parse()
        .with_context(|| format!("{flag} `{url}` is not a URL"))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some() => Ok(uri),
        _ => bail!(
            "{flag} `{url}`: write an http(s) URL with a host, e.g. http://127.0.0.1:8080/health"
        ),
    }
}
