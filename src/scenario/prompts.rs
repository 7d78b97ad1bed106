//! What each request sends, checked against the service's API: the prompt sources
//! (synthetic, a file, a dataset, learned templates) and plain HTTP requests.

use super::*;
use crate::spec::GraderSpec;
use crate::workload::grade::Grader;

/// What each request sends, checked against the service's API (a mix's: each of its
/// services').
pub(super) fn workload_from_spec(
    file: &SpecFile,
    api: Option<ApiKind>,
    tokenizer: LocalTokenizer,
    services: &BTreeMap<String, Service>,
    problems: &mut Problems,
) -> Option<Workload> {
    let template = &file.inference.payload_template;
    if !template.mix.is_empty() {
        return mix::mix_from_spec(file, services, problems).map(Workload::Mix);
    }
    if let Some(api) = api {
        media::check_unused_sections(template, &[api], problems);
    }
    single_workload(file, api, tokenizer, problems)
}

/// What each request to a service of `api` sends.
pub(super) fn single_workload(
    file: &SpecFile,
    api: Option<ApiKind>,
    tokenizer: LocalTokenizer,
    problems: &mut Problems,
) -> Option<Workload> {
    let spec = &file.inference;
    let template = &spec.payload_template;
    match (api, &template.prompts, &template.request) {
        (None, prompts, request) => {
            // The service is already reported; still check what the payload says.
            if let Some(prompts) = prompts {
                prompts_from_spec(
                    prompts,
                    &file.path,
                    spec.seed,
                    LocalTokenizer::Sim,
                    problems,
                );
            }
            if let Some(request) = request {
                http_request_from_spec(request, problems);
            }
            None
        }
        (Some(ApiKind::Http), Some(_), _) => {
            problems.add(
                "spec.payloadTemplate.prompts",
                "applies to chat and completions services, not `api: http`".into(),
                Some("describe the request under `request:` instead".into()),
            );
            None
        }
        (Some(ApiKind::Http), None, None) => {
            problems.add(
                "spec.payloadTemplate",
                "an `api: http` service needs a `request`".into(),
                Some("add e.g. `request: { method: GET, path: / }`".into()),
            );
            None
        }
        (Some(ApiKind::Http), None, Some(request)) => {
            http_request_from_spec(request, problems).map(Workload::Http)
        }
        (Some(ApiKind::Mcp), prompts, request) => {
            mcp_workload(template, prompts, request, problems)
        }
        (Some(kind), prompts, None) if media::is_media(kind) => {
            let prompts = prompts
                .as_ref()
                .and_then(|p| prompts_from_spec(p, &file.path, spec.seed, tokenizer, problems));
            let spec_dir = Path::new(&file.path).parent().unwrap_or(Path::new("."));
            media::media_workload(kind, template, prompts, spec_dir, spec.seed, problems)
                .map(Workload::Media)
        }
        (Some(_), _, Some(_)) => {
            problems.add(
                "spec.payloadTemplate.request",
                "applies only to `api: http` services".into(),
                Some("set `api: http` on the service, or describe prompts instead".into()),
            );
            None
        }
        (Some(_), None, None) => {
            problems.add(
                "spec.payloadTemplate",
                "needs `prompts`: where do the prompts come from?".into(),
                Some(
                    "add e.g. `prompts: { synthetic: { input_tokens: 256, output_tokens: 128 } }`"
                        .into(),
                ),
            );
            None
        }
        (Some(kind), Some(prompts), None) => {
            prompts_from_spec(prompts, &file.path, spec.seed, tokenizer, problems).map(|prompts| {
                Workload::Llm {
                    api: llm_api(kind),
                    prompts,
                    stream: template.stream,
                    include_usage: template.include_usage,
                    extra_body: template.body.clone(),
                }
            })
        }
    }
}

/// What each call to an `api: mcp` service sends: `payloadTemplate.mcp`, and no
/// prompts or plain request.
fn mcp_workload(
    template: &crate::spec::PayloadTemplate,
    prompts: &Option<PromptsSpec>,
    request: &Option<HttpRequestSpec>,
    problems: &mut Problems,
) -> Option<Workload> {
    let at = "spec.payloadTemplate";
    for (name, given) in [
        ("prompts", prompts.is_some()),
        ("request", request.is_some()),
    ] {
        if given {
            problems.add(
                &format!("{at}.{name}"),
                "does not apply to an `api: mcp` service, whose calls `mcp` describes".into(),
                Some(format!("remove `{name}`")),
            );
        }
    }
    let Some(spec) = &template.mcp else {
        problems.add(
            at,
            "an `api: mcp` service needs `mcp`: which calls to make".into(),
            Some(
                "add e.g. `mcp: { ops: [ { tool: echo, args: { text: hi } }, { list: tools } ] }`"
                    .into(),
            ),
        );
        return None;
    };
    let workload = McpWorkload::from_spec(spec, &format!("{at}.mcp"), problems)?;
    let refused = prompts.is_some() || request.is_some();
    (!refused).then(|| Workload::Mcp(Arc::new(workload)))
}

/// The LLM API a service of this kind speaks (chat for kinds that are not LLM APIs:
/// a flow's prompts feed its steps).
pub(crate) fn llm_api(kind: ApiKind) -> LlmApi {
    match kind {
        ApiKind::Completions => LlmApi::Completions,
        ApiKind::Tgi => LlmApi::Tgi,
        ApiKind::Ollama => LlmApi::Ollama,
        ApiKind::OllamaGenerate => LlmApi::OllamaGenerate,
        ApiKind::Kserve => LlmApi::Kserve,
        ApiKind::KserveGrpc => LlmApi::KserveGrpc,
        ApiKind::Responses => LlmApi::Responses,
        ApiKind::Anthropic => LlmApi::Anthropic,
        _ => LlmApi::Chat,
    }
}

/// A validated prompt source, or `None` after reporting why not.
pub(super) fn prompts_from_spec(
    prompts: &PromptsSpec,
    spec_path: &str,
    seed: u64,
    tokenizer: LocalTokenizer,
    problems: &mut Problems,
) -> Option<PromptSource> {
    let given = [
        prompts.synthetic.is_some(),
        prompts.file.is_some(),
        prompts.dataset.is_some(),
        prompts.templates.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        problems.add(
            "spec.payloadTemplate.prompts",
            "needs exactly one source".into(),
            Some(
                "give `synthetic: {…}`, `file: prompts.jsonl`, `dataset: { file: … }` or `templates: { file: templates.yaml, output_tokens: 128 }`"
                    .into(),
            ),
        );
        return None;
    }
    let relative = |path: &Path| {
        Path::new(spec_path)
            .parent()
            .unwrap_or(Path::new("."))
            .join(path)
    };
    if let Some(t) = &prompts.templates {
        return templates_source(t, &relative(&t.file), tokenizer, problems);
    }
    if let Some(s) = &prompts.synthetic {
        return synthetic_source(s, seed, problems);
    }
    if let Some(path) = &prompts.file {
        return file_source(&relative(path), tokenizer, problems);
    }
    let d = prompts.dataset.as_ref()?;
    dataset_source(d, &relative(&d.file), tokenizer, problems)
}

pub(super) fn templates_source(
    t: &crate::spec::TemplatesSpec,
    path: &Path,
    tokenizer: LocalTokenizer,
    problems: &mut Problems,
) -> Option<PromptSource> {
    let generator = crate::workload::datagen::TemplateSampler::load(path)
        .map_err(|e| problems.add("spec.payloadTemplate.prompts.templates.file", e, None))
        .ok();
    let output = Length::from_spec(&t.output_tokens)
        .map_err(|e| {
            problems.add(
                "spec.payloadTemplate.prompts.templates.output_tokens",
                e,
                None,
            )
        })
        .ok();
    generator
        .zip(output)
        .map(|(generator, output)| PromptSource::Templates {
            generator,
            output,
            tokenizer,
        })
}

pub(super) fn synthetic_source(
    s: &crate::spec::SyntheticSpec,
    seed: u64,
    problems: &mut Problems,
) -> Option<PromptSource> {
    let input = Length::from_spec(&s.input_tokens)
        .map_err(|e| {
            problems.add(
                "spec.payloadTemplate.prompts.synthetic.input_tokens",
                e,
                None,
            )
        })
        .ok();
    let output = Length::from_spec(&s.output_tokens)
        .map_err(|e| {
            problems.add(
                "spec.payloadTemplate.prompts.synthetic.output_tokens",
                e,
                None,
            )
        })
        .ok();
    if let Some(input) = input
        && s.prefix_tokens > 0
        && input.upper() <= s.prefix_tokens
    {
        problems.add(
            "spec.payloadTemplate.prompts.synthetic.prefix_tokens",
            format!(
                "{} leaves no room in prompts of at most {} tokens",
                s.prefix_tokens,
                input.upper()
            ),
            Some("make input_tokens longer than prefix_tokens".into()),
        );
    }
    input
        .zip(output)
        .map(|(i, o)| PromptSource::synthetic(i, o, s.prefix_tokens, s.prefixes, seed))
}

/// `prompts: { file: … }`: JSONL prompts in order, with their own max_tokens.
pub(super) fn file_source(
    path: &Path,
    tokenizer: LocalTokenizer,
    problems: &mut Problems,
) -> Option<PromptSource> {
    let options = crate::workload::dataset::Options {
        format: DatasetFormat::Jsonl,
        prompt_column: "prompt".into(),
        max_tokens_column: None,
        min_input_tokens: 0,
        max_input_tokens: u32::MAX,
        skip_invalid: false,
        tokenizer,
        default_max_tokens: None,
        grader: None,
    };
    crate::workload::dataset::load(path, DatasetOrder::Sequential, &options)
        .map(PromptSource::Dataset)
        .map_err(|e| problems.add("spec.payloadTemplate.prompts.file", e, None))
        .ok()
}

pub(super) fn dataset_source(
    d: &crate::spec::DatasetSpec,
    path: &Path,
    tokenizer: LocalTokenizer,
    problems: &mut Problems,
) -> Option<PromptSource> {
    let format = d
        .format
        .unwrap_or_else(|| match d.file.extension().and_then(|e| e.to_str()) {
            _ if d.file.to_str().is_some_and(|f| f.contains("BFCL_")) => DatasetFormat::Bfcl,
            Some("json") => DatasetFormat::Sharegpt,
            Some("csv") => DatasetFormat::Csv,
            _ => DatasetFormat::Jsonl,
        });
    let (min, max) = (
        d.min_input_tokens.unwrap_or(0),
        d.max_input_tokens.unwrap_or(u32::MAX),
    );
    if min > max {
        problems.add(
            "spec.payloadTemplate.prompts.dataset.min_input_tokens",
            format!("is above max_input_tokens ({min} > {max})"),
            None,
        );
        return None;
    }
    let default_max_tokens = match &d.output_tokens {
        Some(spec) => Some(
            Length::from_spec(spec)
                .map_err(|e| {
                    problems.add(
                        "spec.payloadTemplate.prompts.dataset.output_tokens",
                        e,
                        None,
                    )
                })
                .ok()?,
        ),
        None => None,
    };
    let grader = match &d.grader {
        None if format == DatasetFormat::Bfcl => Some(std::sync::Arc::new(Grader::ToolAst)),
        None => None,
        Some(GraderSpec::ToolAst) if format == DatasetFormat::Bfcl => {
            Some(std::sync::Arc::new(Grader::ToolAst))
        }
        Some(_) if format == DatasetFormat::Bfcl => {
            problems.add(
                "spec.payloadTemplate.prompts.dataset.grader",
                "a BFCL dataset is graded by its possible answers".into(),
                Some("leave `grader` out, or write `grader: { type: tool_ast }`".into()),
            );
            return None;
        }
        Some(_) if format != DatasetFormat::Jsonl => {
            problems.add(
                "spec.payloadTemplate.prompts.dataset.grader",
                "grades JSONL datasets, whose lines carry their `expected` answers".into(),
                Some("write the dataset as JSONL: {\"prompt\": …, \"expected\": …}".into()),
            );
            return None;
        }
        Some(spec) => Some(std::sync::Arc::new(
            crate::workload::grade::Grader::from_spec(spec)
                .map_err(|e| problems.add("spec.payloadTemplate.prompts.dataset.grader", e, None))
                .ok()?,
        )),
    };
    let options = crate::workload::dataset::Options {
        default_max_tokens,
        grader,
        format,
        prompt_column: d.prompt_column.clone().unwrap_or_else(|| "prompt".into()),
        max_tokens_column: d.max_tokens_column.clone(),
        min_input_tokens: min,
        max_input_tokens: max,
        skip_invalid: d.skip_invalid,
        tokenizer,
    };
    let path = match format {
        DatasetFormat::Bfcl => crate::workload::bfcl::locate(&d.file, path)
            .map_err(|e| problems.add("spec.payloadTemplate.prompts.dataset.file", e, None))
            .ok()?,
        _ => path.to_owned(),
    };
    crate::workload::dataset::load(&path, d.order, &options)
        .map(PromptSource::Dataset)
        .map_err(|e| problems.add("spec.payloadTemplate.prompts.dataset.file", e, None))
        .ok()
}

pub(super) fn http_request_from_spec(
    r: &HttpRequestSpec,
    problems: &mut Problems,
) -> Option<HttpRequest> {
    let path = "spec.payloadTemplate.request";
    let method = Method::from_bytes(r.method.as_bytes())
        .map_err(|_| {
            problems.add(
                &format!("{path}.method"),
                format!("`{}` is not an HTTP method", r.method),
                Some("write e.g. GET or POST".into()),
            )
        })
        .ok();
    if !r.path.starts_with('/') || r.path.parse::<hyper::Uri>().is_err() {
        problems.add(
            &format!("{path}.path"),
            format!("`{}` is not a path", r.path),
            Some("start it with `/`, e.g. `/health`".into()),
        );
        return None;
    }
    if let Some(status) = r.expect_status
        && !(100..=599).contains(&status)
    {
        problems.add(
            &format!("{path}.expect_status"),
            format!("{status} is not an HTTP status"),
            None,
        );
    }
    let headers = headers_from_spec(&r.headers, path, problems);
    Some(HttpRequest {
        method: method?,
        path: r.path.clone(),
        headers,
        body: Bytes::from(r.body.clone().unwrap_or_default()),
        expect_status: r.expect_status,
    })
}
