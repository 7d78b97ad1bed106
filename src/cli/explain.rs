//! `redline explain`: which node made a run breach, from its records (and the spans
//! collected beside them), or from a CSV of latencies with its call graph.

use super::*;
use crate::explain::{self, Explanation, MeasureChoice, Options, Table, Window};

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// A run folder (records.jsonl, and collect/spans.jsonl when the run collected
    /// spans), or a CSV of latencies per node (one row per trace) with --graph.
    input: PathBuf,
    /// The healthy run (folder or CSV) to compare with. Without it, --incident
    /// compares a window with the rest of the run, and without both the run's breaching
    /// traces are explained against the whole run.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// The incident: traces that started in FROM..TO since the run's start (`90s..3m`).
    #[arg(long, value_parser = parse_window)]
    incident: Option<Window>,
    /// What to explain at the root.
    #[arg(long, value_enum, default_value = "breach")]
    measure: MeasureArg,
    /// A trace breaches when it fails or takes this long or longer (default: the
    /// baseline root's p99).
    #[arg(long, value_parser = parse_ms)]
    breach_above: Option<f64>,
    /// For a CSV: the call graph, one `caller -> callee` a line.
    #[arg(long)]
    graph: Option<PathBuf>,
    /// The node to explain instead of the root: a step of a flow (with spans under
    /// it), or the top of a CSV's graph when it has several.
    #[arg(long)]
    root: Option<String>,
    /// Bootstrap resamples for the intervals.
    #[arg(long, default_value_t = 30)]
    bootstrap: usize,
    /// Seed of the sampling (mixed rows, orders, resamples).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print explain.json's content instead of the text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum MeasureArg {
    /// Failed, or took --breach-above or longer.
    Breach,
    /// Mean latency.
    Mean,
    /// Median latency.
    P50,
    /// 99th-percentile latency.
    P99,
    /// Failure rate.
    Failures,
}

fn parse_ms(text: &str) -> Result<f64, String> {
    Ok(spec::Dur::parse(text)?.0.as_secs_f64() * 1e3)
}

fn parse_window(text: &str) -> Result<Window, String> {
    let (from, to) = text
        .split_once("..")
        .ok_or_else(|| format!("`{text}` is not FROM..TO (for example `90s..3m`)"))?;
    let us = |t: &str| spec::Dur::parse(t).map(|d| d.0.as_micros() as u64);
    let window = Window {
        from_us: us(from)?,
        to_us: us(to)?,
    };
    if window.to_us <= window.from_us {
        return Err(format!("`{text}`: the window ends before it starts"));
    }
    Ok(window)
}

pub(super) fn explain_command(args: ExplainArgs) -> Result<i32> {
    let table = read_table(&args.input, &args)?;
    let baseline = args
        .baseline
        .as_deref()
        .map(|path| read_table(path, &args))
        .transpose()?;
    let options = Options {
        measure: match args.measure {
            MeasureArg::Breach => MeasureChoice::Breach,
            MeasureArg::Mean => MeasureChoice::Mean,
            MeasureArg::P50 => MeasureChoice::P50,
            MeasureArg::P99 => MeasureChoice::P99,
            MeasureArg::Failures => MeasureChoice::Failures,
        },
        breach_above_ms: args.breach_above,
        bootstrap: args.bootstrap,
        seed: args.seed,
        ..Options::default()
    };
    let explanation = explain::explain(table, baseline, args.incident, &options)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.input.display()))?;
    write_explanation(&args.input, &explanation, args.json)?;
    Ok(exit::OK)
}

fn write_explanation(input: &Path, explanation: &Explanation, json: bool) -> Result<()> {
    let text = serde_json::to_string_pretty(explanation)? + "\n";
    if input.is_dir() {
        let path = crate::folder::RunFolder::new(input).explain();
        std::fs::write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if json {
        out(&text);
    } else {
        out(&explain::render::render(explanation));
    }
    Ok(())
}

/// A run folder's sessions (with its spans), or a CSV with the graph.
fn read_table(path: &Path, args: &ExplainArgs) -> Result<Table> {
    if path.is_dir() {
        let table = explain::files::read_run(path).and_then(|table| match &args.root {
            Some(root) => table.reroot(root),
            None => Ok(table),
        });
        return table.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()));
    }
    let graph_path = args.graph.as_deref().with_context(|| {
        format!(
            "{} is not a run folder: a CSV of latencies needs --graph (a file of `caller -> callee` lines)",
            path.display()
        )
    })?;
    let csv =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let graph = std::fs::read_to_string(graph_path)
        .with_context(|| format!("cannot read {}", graph_path.display()))?;
    explain::table::from_csv(&csv, &graph, args.root.as_deref())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
