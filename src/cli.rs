//! The `redline` command line: subcommands parse their arguments and call into the
//! library; no logic of their own.

use std::net::SocketAddr;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use crate::sim::{Profile, SimConfig};

#[derive(Debug, Parser)]
#[command(
    name = "redline",
    version,
    about = "A load tester for AI-native services"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the LLM simulator: an OpenAI-compatible server (chat, completions,
    /// embeddings, /metrics) driven by a continuous-batching engine model.
    Sim(SimArgs),
}

#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Engine profile: a built-in name (7b, tiny) or a YAML/JSON profile file.
    #[arg(long, default_value = "7b")]
    pub profile: String,
    /// Address to listen on. Loopback by default; anything else needs --allow-remote.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub addr: SocketAddr,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    pub allow_remote: bool,
    /// Seed of every answer (together with the prompt).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Model name to serve (default: the profile's, e.g. sim-7b).
    #[arg(long)]
    pub model: Option<String>,
}

/// Runs the parsed command; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Sim(args) => sim(args).await,
    }
}

async fn sim(args: SimArgs) -> Result<i32> {
    if !args.addr.ip().is_loopback() && !args.allow_remote {
        bail!(
            "refusing to listen on {}: the simulator binds loopback unless you pass --allow-remote",
            args.addr
        );
    }
    let profile = Profile::load(&args.profile)?;
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let model = args.model.clone().unwrap_or_else(|| profile.model.clone());
    eprintln!(
        "redline sim: serving `{model}` (profile {}) on http://{}/v1 — Ctrl-C to stop",
        profile.name,
        listener.local_addr()?
    );
    let config = SimConfig {
        profile,
        model: args.model,
        seed: args.seed,
    };
    crate::sim::server::serve(listener, config, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(0)
}
