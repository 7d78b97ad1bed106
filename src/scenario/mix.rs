//! A mix (`payloadTemplate.mix`): several services on one arrival process, each
//! arrival sent to one of them drawn by weight, each with the workload its API means.

use std::collections::BTreeMap;

use super::prompts::single_workload;
use super::{Service, Workload};
use crate::spec::{ApiKind, Problems, SpecFile};

/// One share of a mix.
#[derive(Debug, Clone)]
pub struct MixEntry {
    /// The service (under the scenario's `services`).
    pub service: String,
    pub weight: u32,
    pub workload: Workload,
}

/// The APIs a mix can send to: those whose requests stand alone.
fn mixable(api: ApiKind) -> bool {
    matches!(
        api,
        ApiKind::Chat
            | ApiKind::Completions
            | ApiKind::Tgi
            | ApiKind::Ollama
            | ApiKind::OllamaGenerate
            | ApiKind::Responses
            | ApiKind::Anthropic
            | ApiKind::Kserve
            | ApiKind::Http
            | ApiKind::Images
            | ApiKind::Transcriptions
            | ApiKind::Speech
            | ApiKind::Realtime
            | ApiKind::Mcp
    )
}

/// The mix's entries, or `None` after reporting what is wrong with them.
pub(super) fn mix_from_spec(
    file: &SpecFile,
    services: &BTreeMap<String, Service>,
    problems: &mut Problems,
) -> Option<Vec<MixEntry>> {
    let template = &file.inference.payload_template;
    let before = problems.len();
    if !template.flow.is_empty() || template.session.is_some() {
        problems.add(
            "spec.payloadTemplate.mix",
            "sends single requests; it cannot go with a `flow` or a `session`".into(),
            Some("remove `mix`, or the flow or session".into()),
        );
    }
    let names: Vec<&str> = file.inference.services.keys().map(String::as_str).collect();
    let mut entries = Vec::new();
    for (i, entry) in template.mix.iter().enumerate() {
        let path = format!("spec.payloadTemplate.mix[{i}]");
        let Some(service) = services.get(&entry.service) else {
            if !file.inference.services.contains_key(&entry.service) {
                let near = crate::spec::error::nearest(&entry.service, &names);
                let fix = near.map(|n| format!("did you mean `{n}`?"));
                problems.add(
                    &format!("{path}.service"),
                    format!(
                        "names service `{}`, which is not under spec.services",
                        entry.service
                    ),
                    fix,
                );
            }
            continue;
        };
        if entry.weight == 0 {
            problems.add(&format!("{path}.weight"), "must be at least 1".into(), None);
        }
        if !mixable(service.api) {
            let api = super::flow::api_name(service.api);
            problems.add(
                &format!("{path}.service"),
                format!(
                    "`{}` speaks `api: {api}`, which a mix cannot send to",
                    entry.service
                ),
                Some(
                    "mix chat, completions, http, images, transcriptions or speech services".into(),
                ),
            );
            continue;
        }
        let tokenizer = service.counting.tokenizer.clone();
        if let Some(workload) = single_workload(file, Some(service.api), tokenizer, problems) {
            entries.push(MixEntry {
                service: entry.service.clone(),
                weight: entry.weight,
                workload,
            });
        }
    }
    let apis: Vec<ApiKind> = template
        .mix
        .iter()
        .filter_map(|e| services.get(&e.service).map(|s| s.api))
        .collect();
    super::media::check_unused_sections(template, &apis, problems);
    (problems.len() == before).then_some(entries)
}
