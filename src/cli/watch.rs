//! `redline watch`: parse, read the sources through the spec's streaming SLOs
//! (`slo::streaming::watch`), print.

use std::time::Duration;

use super::*;
use crate::slo::streaming::Monitor;
use crate::slo::streaming::watch::{Heard, SourceArgs, Watched, rfc3339, seen_together};

/// What to watch and how.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The spec whose ScaleSpec has the `streaming:` block or windowed SLOs.
    #[arg(long)]
    pub spec: PathBuf,
    #[command(flatten)]
    pub sources: SourceArgs,
    /// Keep reading as the sources grow (new records, new log lines, new points) until
    /// Ctrl-C or `--for`.
    #[arg(long)]
    pub follow: bool,
    /// With `--follow`: stop after this long.
    #[arg(long = "for", requires = "follow", value_parser = parse_duration, value_name = "DURATION")]
    pub follow_for: Option<Duration>,
    /// Also write what was seen (windows, episodes) as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Every window of the sources through the detectors of `spec`; exit 1 when an
/// episode opened.
pub(super) async fn watch(args: WatchArgs) -> Result<i32> {
    let Some(scenario) = scenario_or_problems(&args.spec)? else {
        return Ok(exit::USAGE);
    };
    let Some(plan) = scenario.streaming.clone() else {
        errln!(
            "{}: no streaming SLOs to watch: add `streaming:` or a windowed SLO (`p99: \"<= 800ms over 30s for 3 windows\"`) to the spec's `kind: ScaleSpec` document (see docs/slo.md)",
            args.spec.display()
        );
        return Ok(exit::USAGE);
    };
    let watched = match Watched::of(&args.sources, &plan) {
        Ok(watched) => watched,
        Err(problem) => {
            errln!("redline watch: {problem}");
            return Ok(exit::USAGE);
        }
    };
    let stop = CancellationToken::new();
    if args.follow {
        tokio::spawn(stop_after(stop.clone(), args.follow_for));
    }
    outln!(
        "redline watch · {} · {} over {}s windows every {}s",
        watched.describe(),
        plan.describe(),
        plan.window.as_secs_f64(),
        plan.step.as_secs_f64()
    );
    let mut monitor = Monitor::new(plan);
    let end_us = watched
        .watch(&mut monitor, args.follow, &stop, &print_heard)
        .await?;
    let (summary, changes) = monitor.finish(end_us);
    changes
        .into_iter()
        .for_each(|c| print_heard(Heard::Change(c)));
    out(&crate::report::render_drift_summary(&summary));
    let together = seen_together(&summary);
    if !together.is_empty() {
        outln!("seen by more than one source at once:");
        together.iter().for_each(|line| outln!("  {line}"));
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(if summary.episodes.is_empty() {
        exit::OK
    } else {
        exit::SLO_FAILED
    })
}

fn print_heard(heard: Heard) {
    match heard {
        Heard::Change(change) => outln!("{}", crate::report::render_drift_change(&change)),
        Heard::Origin(unix_s) => outln!("  t = 0 s is {}", rfc3339(unix_s)),
        Heard::Note(note) => outln!("  note: {note}"),
        Heard::Retrying(problem) => errln!("  note: {problem}; trying again"),
    }
}

async fn stop_after(stop: CancellationToken, after: Option<Duration>) {
    let limit = async {
        match after {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = signal() => {}
        _ = limit => {}
    }
    stop.cancel();
}
