//! Prompt datasets (JSONL, ShareGPT, CSV) and Mooncake-style replay traces: a dataset
//! whose first prompts can be built, or an error naming the line; never a panic. With
//! a grader, each line's expectation is read and the input itself graded as an answer.
#![no_main]

use std::path::Path;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use redline::spec::{DatasetFormat, DatasetOrder, GraderSpec};
use redline::tokenizer::LocalTokenizer;
use redline::workload::grade::Grader;
use redline::workload::tool_ast::MadeCall;
use redline::workload::{dataset, mooncake};

fn tokenizer() -> LocalTokenizer {
    static SIM: OnceLock<LocalTokenizer> = OnceLock::new();
    SIM.get_or_init(|| LocalTokenizer::by_name("sim").unwrap())
        .clone()
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, body)) = input.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    let path = Path::new("fuzz.data");
    let format = match selector % 4 {
        0 => DatasetFormat::Jsonl,
        1 => DatasetFormat::Sharegpt,
        2 => DatasetFormat::Csv,
        _ => {
            if let Ok(trace) = mooncake::parse(path, text, 16) {
                for n in 0..trace.offsets.len().min(3) {
                    let _ = trace.prompts.payload(n, 7, n as u64);
                }
            }
            return;
        }
    };
    let options = dataset::Options {
        format,
        prompt_column: "prompt".into(),
        max_tokens_column: Some("max_tokens".into()),
        min_input_tokens: 1,
        max_input_tokens: 100_000,
        skip_invalid: selector & 4 != 0,
        tokenizer: tokenizer(),
        default_max_tokens: None,
        grader: grader(selector),
    };
    let order = if selector & 8 == 0 {
        DatasetOrder::Sequential
    } else {
        DatasetOrder::Shuffle
    };
    if let Ok(data) = dataset::parse(path, text, order, &options) {
        for index in 0..3 {
            // The input itself as the answer and as a call's arguments: grading never
            // panics on any text.
            if let Some(task) = data.payload(7, index).grade {
                let call = MadeCall {
                    name: "f",
                    arguments: text,
                };
                let _ = task.grade(text, &[call]);
            }
        }
    }
});

/// One grader in two of every four inputs, each kind in turn.
fn grader(selector: u8) -> Option<Arc<Grader>> {
    let spec = match selector >> 4 {
        0..=7 => return None,
        8..=9 => GraderSpec::Exact {
            case_sensitive: false,
            ignore_punctuation: true,
        },
        10..=11 => GraderSpec::Regex,
        12 => GraderSpec::Numeric { tolerance: 0.5 },
        13 => GraderSpec::Choice,
        14 => GraderSpec::JsonSchema { schema: None },
        _ => GraderSpec::ToolAst,
    };
    Some(Arc::new(Grader::from_spec(&spec).expect("a valid grader")))
}
