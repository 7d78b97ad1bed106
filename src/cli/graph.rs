//! `redline graph`: the dependency graph of stored traces, and their join with a run.

use super::*;

pub(super) fn graph(
    input: &Path,
    format: GraphFormat,
    out: Option<&Path>,
    records: Option<&Path>,
) -> Result<i32> {
    let stored = input.join(crate::folder::RunFolder::SPANS);
    let files: Vec<PathBuf> = if stored.is_file() {
        // What `redline collect` stored (beside its counts, collect.json).
        vec![stored]
    } else if input.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(input)
            .with_context(|| format!("cannot read {}", input.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json" || x == "jsonl"))
            .collect();
        files.sort();
        files
    } else {
        vec![input.to_owned()]
    };
    let mut spans = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        spans.extend(
            crate::trace::graph::parse_spans(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?,
        );
    }
    if spans.is_empty() {
        bail!("{} holds no spans", input.display());
    }
    let graph = crate::trace::graph::build(&spans);
    let join = match records {
        Some(path) => {
            let mut records = Vec::new();
            crate::record::read_records(path, None, |r| records.push(r))?;
            let join = crate::trace::graph::join(&spans, &records);
            errln!(
                "redline graph: {} of {} traced requests joined to server spans; {} traces no record started",
                join.joined,
                join.records,
                join.foreign_traces
            );
            Some(join)
        }
        None => None,
    };
    let rendered = match format {
        GraphFormat::Json => {
            serde_json::to_string_pretty(&serde_json::json!({"graph": graph, "join": join}))? + "\n"
        }
        GraphFormat::Dot => crate::trace::graph::render_dot(&graph),
        GraphFormat::Mermaid => crate::trace::graph::render_mermaid(&graph),
    };
    match out {
        Some(path) => std::fs::write(path, rendered)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => output::out(&rendered),
    }
    Ok(exit::OK)
}
