//! `redline coordinate`: the start barrier and the whole run's SLO gate for workers on
//! several machines (`run --segment K/N --coordinator URL`).

use super::*;
use crate::coordinator::Coordinator;

/// `redline coordinate SPEC --workers N`.
#[derive(Debug, clap::Args)]
pub struct CoordinateArgs {
    /// The spec every worker runs (its SLOs are judged on the merged deltas).
    pub spec: PathBuf,
    /// How many workers: the run's N equal shares, `--segment 1/N` … `N/N`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub workers: u32,
    /// Where to listen. Loopback unless --allow-remote: workers on other machines need
    /// an address they can reach, and the coordinator has no authentication of its own
    /// (put it on a private network, as the workers' results are).
    #[arg(long, default_value = "127.0.0.1:9470")]
    pub listen: std::net::SocketAddr,
    /// Allow --listen on an address other machines can reach.
    #[arg(long)]
    pub allow_remote: bool,
}

pub(super) async fn coordinate(args: CoordinateArgs) -> Result<i32> {
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        bail!(
            "refusing to listen on {}: the coordinator binds loopback unless you pass --allow-remote",
            args.listen
        );
    }
    let Some(scenario) = scenario_or_problems(&args.spec)? else {
        return Ok(exit::USAGE);
    };
    let coordinator = Coordinator::new(
        args.workers,
        scenario.slos.clone(),
        scenario.aggregator(),
        crate::runner::new_run_id(),
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    // The first line, for scripts and tests: where the workers should go.
    outln!(
        "redline coordinate: http://{} for {} workers of {}",
        listener.local_addr()?,
        args.workers,
        scenario.name
    );
    let stop = CancellationToken::new();
    let server = coordinator.serve(listener, stop.clone());
    let mut poll = tokio::time::interval(std::time::Duration::from_millis(250));
    let interrupted = loop {
        tokio::select! {
            _ = poll.tick() => if coordinator.finished() { break false },
            () = signal() => break true,
        }
    };
    stop.cancel();
    server.await.context("the coordinator's server failed")??;
    Ok(report(&coordinator.status(), args.workers, interrupted))
}

/// What the coordinator saw, and its exit code: 1 when it stopped the run on an SLO.
fn report(outcome: &crate::coordinator::Status, n: u32, interrupted: bool) -> i32 {
    for (share, worker) in &outcome.workers {
        let state = if worker.done { "done" } else { "silent" };
        outln!("  worker {share}: {state} after {} pushes", worker.pushes);
    }
    let joined = outcome.workers.len() as u32;
    if joined < n {
        errln!("redline coordinate: only {joined} of {n} workers joined");
    }
    if !outcome.silent.is_empty() {
        errln!(
            "redline coordinate: the share {} fell silent before it was done: `redline merge` will name it missing",
            outcome.silent.join(", ")
        );
    }
    outln!(
        "  requests in the merged deltas: {}",
        outcome.merged_requests
    );
    match &outcome.stopped {
        Some(stopped) => {
            let slos: Vec<&str> = stopped.breaches.iter().map(|v| v.slo.as_str()).collect();
            outln!(
                "  stopped every worker at {:.1}s: the whole run was certain to fail {}",
                stopped.at_s.unwrap_or(0.0),
                slos.join(", ")
            );
            exit::SLO_FAILED
        }
        None if interrupted => exit::INTERRUPTED,
        None => exit::OK,
    }
}
