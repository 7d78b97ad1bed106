//! `redline datagen`: templates learned from a log, or a synthetic log written.

use super::*;

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

/// `redline datagen`: learn templates from a log, or write a synthetic one.
pub(super) async fn datagen(args: DatagenArgs) -> Result<i32> {
    if let Some(synthetic) = &args.synthetic_log {
        return synthetic_log(synthetic, args.seed);
    }
    let log = args
        .log
        .clone()
        .expect("clap requires a log without --synthetic-log");
    let tokenizer = match LocalTokenizer::by_name(&args.tokenizer) {
        Ok(t) => t,
        Err(e) => {
            errln!("redline: --tokenizer: {e}");
            return Ok(exit::USAGE);
        }
    };
    if args.k == 0 || args.sample == 0 || args.min_length > args.max_length {
        errln!(
            "redline: --k and --sample must be at least 1, and --min-length at most --max-length"
        );
        return Ok(exit::USAGE);
    }
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let options = crate::workload::datagen::Options {
        k: args.k,
        field: args.field.clone(),
        min_length: args.min_length,
        max_length: args.max_length,
        seed: args.seed,
        sample: args.sample,
        skip_invalid: args.skip_invalid,
        label_field: args.label_field.clone(),
        tokenizer,
        read: Some(read.clone()),
    };
    // Both passes read the whole log.
    let size = std::fs::metadata(&log).map_or(0, |m| m.len()) * 2;
    let drawer =
        progress::wanted(args.quiet).then(|| progress::Drawer::for_bytes("learning", read, size));
    let log_path = log.clone();
    let learned =
        tokio::task::spawn_blocking(move || crate::workload::datagen::learn(&log_path, &options))
            .await;
    if let Some(drawer) = drawer {
        drawer.finish().await;
    }
    let (file, fidelity) = match learned.context("the template learner failed")? {
        Ok(learned) => learned,
        Err(e) => {
            errln!("redline: {e}");
            return Ok(exit::USAGE);
        }
    };
    crate::workload::datagen::write(&file, &args.out)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    let s = &file.source;
    outln!(
        "{}: {} lines · {} prompts of {}–{} tokens · {} outside · {} invalid skipped",
        s.log,
        s.lines,
        s.kept,
        args.min_length,
        args.max_length,
        s.outside_length,
        s.skipped_invalid
    );
    outln!(
        "  {} templates → {}",
        file.templates.len(),
        args.out.display()
    );
    if args.preview {
        for t in &file.templates {
            let head: String = t.template.chars().take(40).collect();
            outln!("  {:>6.2}%  {head}", t.weight * 100.0);
        }
    }
    outln!(
        "  generated vs log: length distribution KS distance {:.3} · cluster-share distance {:.3}",
        fidelity.length_ks,
        fidelity.share_distance
    );
    if let Some(ari) = fidelity.ari {
        outln!(
            "  against `{}`: adjusted Rand index {ari:.3}",
            args.label_field.as_deref().unwrap_or("")
        );
    }
    Ok(exit::OK)
}

/// `--synthetic-log LINES FILE`: a log of known families, to learn from in tests.
fn synthetic_log(synthetic: &[String], seed: u64) -> Result<i32> {
    let lines: u64 = synthetic[0]
        .parse()
        .with_context(|| format!("--synthetic-log: `{}` is not a line count", synthetic[0]))?;
    let path = PathBuf::from(&synthetic[1]);
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?,
    );
    let counts = crate::workload::datagen::synth::write_log(&mut out, lines, seed)?;
    std::io::Write::flush(&mut out)?;
    outln!(
        "{}: {lines} prompts from {} families",
        path.display(),
        counts.len()
    );
    for ((share, template, _), count) in
        crate::workload::datagen::synth::FAMILIES.iter().zip(counts)
    {
        outln!(
            "  {count:>9}  ({:>4.1}% planned)  {template}",
            share * 100.0
        );
    }
    Ok(exit::OK)
}
