//! Segmented runs: `run --workers N` (N worker processes on this machine) and
//! `redline merge` (their folders joined into one run). The pipelines are
//! [`crate::dist`]'s; here the flags become a worker's command line.

use std::ffi::OsString;

use super::*;
use crate::dist::merge::{Figures, Parts};
use crate::dist::workers::Seat;
use crate::folder::RunFolder;

/// `redline run SPEC --workers N`: the workers run, then their folders merged into
/// OUT. A worker that fails is reported, and the merge says which share is missing.
pub(super) async fn run_workers(
    args: &RunArgs,
    workers: u32,
    out_dir: &Path,
    scenario: &Scenario,
) -> Result<i32> {
    let command = |seat: &Seat| worker_command(args, seat);
    let say = |line: &str| errln!("{line}");
    let dirs =
        crate::dist::workers::run_workers(workers, out_dir, scenario, command, &say, signal())
            .await?;
    merge(&dirs, out_dir, args.strict, args.quiet, false).await
}

/// The command line of the worker in `seat`: the run's own flags, field by field, but
/// with the seat's segment, folder and coordinator, and quiet. Every field is named,
/// so a new flag of `run` does not compile until it says what a worker gets.
fn worker_command(args: &RunArgs, seat: &Seat) -> Vec<OsString> {
    let RunArgs {
        spec,
        // The seat's own, below.
        out: _,
        quiet: _,
        segment: _,
        workers: _,
        segment_of: _,
        coordinator: _,
        // The coordinator gives the workers the run's ID.
        run_id: _,
        // Refused beside --workers: N processes cannot share one address.
        metrics_addr: _,
        collect: _,
        collect_grace: _,
        strict,
        otlp_endpoint,
        ca_cert,
        client_cert,
        client_key,
        insecure,
        url,
        model,
        profile,
        api,
        tool,
        args: tool_args,
        stdio,
        timeout,
        rate,
        concurrency,
        sweep,
        throughput_concurrency,
        duration,
        requests,
        input_tokens,
        output_tokens,
        prompts,
        http2,
        no_stream,
        tokenizer,
        api_key_env,
        seed,
    } = args;
    let mut line = Argv(vec!["run".into()]);
    if let Some(spec) = spec {
        line.0.push(spec.into());
    }
    line.flag("--strict", *strict);
    line.value("--otlp-endpoint", otlp_endpoint.as_ref());
    line.value("--ca-cert", ca_cert.as_ref().map(|p| p.display()));
    line.value("--client-cert", client_cert.as_ref().map(|p| p.display()));
    line.value("--client-key", client_key.as_ref().map(|p| p.display()));
    line.flag("--insecure", *insecure);
    line.value("--url", url.as_ref());
    line.value("--model", model.as_ref());
    line.value("--profile", profile.as_ref());
    let api = clap::ValueEnum::to_possible_value(api).expect("every API has a name");
    line.value("--api", Some(api.get_name()));
    line.value("--tool", tool.as_ref());
    line.value(
        "--args",
        tool_args
            .as_ref()
            .map(|a| serde_json::Value::Object(a.clone())),
    );
    line.value("--timeout", timeout.map(|t| format!("{}ms", t.as_millis())));
    line.value("--rate", rate.as_ref());
    line.value("--concurrency", concurrency.as_ref());
    line.value("--sweep", sweep.as_ref());
    // clap refuses it without --sweep, even at its default.
    line.value(
        "--throughput-concurrency",
        sweep.map(|_| throughput_concurrency),
    );
    line.value("--duration", duration.as_ref());
    line.value("--requests", requests.as_ref());
    line.value("--input-tokens", Some(input_tokens));
    line.value("--output-tokens", Some(output_tokens));
    line.value("--prompts", prompts.as_ref().map(|p| p.display()));
    line.flag("--http2", *http2);
    line.flag("--no-stream", *no_stream);
    line.value("--tokenizer", tokenizer.as_ref());
    line.value("--api-key-env", api_key_env.as_ref());
    line.value("--seed", Some(seed));
    line.value("--segment", Some(format!("{}/{}", seat.k, seat.n)));
    line.value("--out", Some(seat.dir.display()));
    line.value("--coordinator", Some(&seat.coordinator));
    line.flag("--quiet", true);
    if !stdio.is_empty() {
        line.0.push("--".into());
        line.0.extend(stdio.iter().map(OsString::from));
    }
    line.0
}

/// A command line being built.
struct Argv(Vec<OsString>);

impl Argv {
    fn flag(&mut self, name: &str, set: bool) {
        if set {
            self.0.push(name.into());
        }
    }

    fn value(&mut self, name: &str, value: Option<impl std::fmt::Display>) {
        if let Some(value) = value {
            self.0.extend([name.into(), value.to_string().into()]);
        }
    }
}

/// `redline merge DIR… --out OUT`: the workers' folders joined into one run folder.
pub(super) async fn merge(
    dirs: &[PathBuf],
    out_dir: &Path,
    strict: bool,
    quiet: bool,
    without_records: bool,
) -> Result<i32> {
    let Some(mut parts) = Parts::read(dirs)? else {
        errln!("redline merge: none of the folders holds a finished run's summary.json");
        return Ok(exit::USAGE);
    };
    let folder = RunFolder::new(out_dir);
    let Some(scenario) = scenario_or_problems(&parts.write_spec(&folder)?)? else {
        return Ok(exit::USAGE);
    };
    let from_records = !without_records && parts.have_records();
    let figures = if from_records {
        parts.join_records(&folder)?;
        Figures::Records(read_run(&folder.records(), &scenario, quiet).await?)
    } else {
        Figures::Aggregates(parts.aggregates()?)
    };
    let concluded = parts.conclude(&scenario, figures, &folder, strict)?;
    out(&render_terminal(&concluded.summary));
    let records = if from_records {
        folder.records().display().to_string()
    } else {
        "none (merged from aggregates)".into()
    };
    outln!(
        "  records: {records}  summary: {}",
        folder.summary().display()
    );
    Ok(concluded.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(argv: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(std::iter::once("redline").chain(argv.iter().copied()))
            .expect("the command line parses");
        match cli.command {
            Command::Run(args) => *args,
            other => panic!("not a run: {other:?}"),
        }
    }

    #[test]
    fn a_worker_runs_the_same_flags_with_its_seat() {
        let seat = Seat {
            k: 2,
            n: 4,
            dir: PathBuf::from("o/workers/2-of-4"),
            coordinator: "http://127.0.0.1:9".into(),
        };
        let own = "--segment 2/4 --out o/workers/2-of-4 --coordinator http://127.0.0.1:9 --quiet";
        let cases = [
            ("run spec.yaml --workers 4 --out o", "run spec.yaml"),
            (
                "run spec.yaml --workers 4 --out=o --quiet --strict --rate 2.5 --api completions \
                 --insecure --seed 7 --prompts p.jsonl",
                "run spec.yaml --strict --rate 2.5 --api completions --insecure --seed 7 \
                 --prompts p.jsonl",
            ),
            (
                "run --url embedded --sweep 3 --throughput-concurrency 8 --requests 10 \
                 --workers 4 --http2 --no-stream --out o",
                "run --url embedded --sweep 3 --throughput-concurrency 8 --requests 10 --http2 \
                 --no-stream",
            ),
        ];
        for (parent, worker) in cases {
            let parent: Vec<&str> = parent.split_whitespace().collect();
            let line = worker_command(&run_args(&parent), &seat);
            let line: Vec<&str> = line.iter().map(|a| a.to_str().unwrap()).collect();
            // The worker parses to the parent's flags, but for its seat.
            let expected = format!("{worker} {own}");
            let expected: Vec<&str> = expected.split_whitespace().collect();
            assert_eq!(
                format!("{:?}", run_args(&line)),
                format!("{:?}", run_args(&expected)),
                "{line:?}"
            );
        }
    }
}
