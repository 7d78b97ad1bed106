//! What each request is sent to, built once per run from the scenario's workload and
//! its service: an LLM API with its prompts, a plain HTTP request, or a media API with
//! its prompts or clips.

use std::sync::Arc;

use anyhow::{Context, Result};
use hyper::header::AUTHORIZATION;

use super::services::BAGGAGE;
use crate::client::http::HttpTarget;
use crate::client::media::{self, MediaInput, MediaTarget};
use crate::client::openai::LlmTarget;
use crate::client::{HttpClient, RunClock};
use crate::record::Record;
use crate::scenario::media::MediaSource;
use crate::scenario::{Scenario, Workload};
use crate::workload::PromptSource;

/// What a request is sent to, with everything it needs.
pub(super) enum Target {
    Llm {
        target: LlmTarget,
        prompts: Arc<PromptSource>,
    },
    Http(HttpTarget),
    Media {
        target: MediaTarget,
        input: MediaSource,
    },
}

pub(super) fn build_target(
    scenario: &Scenario,
    base_url: &str,
    model: &str,
    baggage: &hyper::header::HeaderValue,
) -> Result<Target> {
    let max_response_bytes = scenario.max_response_bytes;
    let service = scenario.service();
    let mut service_headers = service.headers.clone();
    service_headers.push((BAGGAGE.clone(), baggage.clone()));
    Ok(match &scenario.workload {
        Workload::Llm {
            api,
            prompts,
            stream,
            include_usage,
            extra_body,
        } => {
            let path = api.path(model, *stream);
            let target = LlmTarget {
                uri: format!("{base_url}{path}")
                    .parse()
                    .context("building the request URL")?,
                api: *api,
                model: model.to_owned(),
                stream: *stream,
                include_usage: *include_usage,
                api_key: service.api_key.clone(),
                headers: service_headers,
                extra_body: extra_body.clone(),
                timeouts: scenario.timeouts,
                max_response_bytes,
                counting: service.counting.clone(),
            };
            Target::Llm {
                target,
                prompts: Arc::new(prompts.clone()),
            }
        }
        Workload::Http(request) => {
            let mut headers = service_headers;
            headers.extend(request.headers.iter().cloned());
            if let Some(key) = &service.api_key {
                headers.push((AUTHORIZATION, key.clone()));
            }
            Target::Http(HttpTarget {
                uri: format!("{base_url}{}", request.path)
                    .parse()
                    .context("building the request URL")?,
                method: request.method.clone(),
                headers,
                body: request.body.clone(),
                expect_status: request.expect_status,
                timeouts: scenario.timeouts,
                max_response_bytes,
            })
        }
        Workload::Media(workload) => Target::Media {
            target: MediaTarget {
                uri: format!("{base_url}{}", workload.request.path())
                    .parse()
                    .context("building the request URL")?,
                request: workload.request.clone(),
                model: model.to_owned(),
                api_key: service.api_key.clone(),
                headers: service_headers,
                timeouts: scenario.timeouts,
                max_response_bytes,
            },
            input: workload.input.clone(),
        },
    })
}

/// Sends media request `seq` (of a run seeded `seed`): its prompt, or its clip.
pub(super) async fn send_media(
    http: &HttpClient,
    target: &MediaTarget,
    input: &MediaSource,
    (seed, seq): (u64, u64),
    traceparent: &str,
    clock: RunClock,
    record: &mut Record,
) {
    match input {
        MediaSource::Prompts(prompts) => {
            let payload = prompts.payload(seed, seq);
            let text = payload.prompt.user_text();
            media::call(
                http,
                target,
                MediaInput::Text(text),
                traceparent,
                clock,
                record,
            )
            .await;
        }
        MediaSource::Clips(clips) => {
            let clip = &clips[(seq % clips.len() as u64) as usize];
            media::call(
                http,
                target,
                MediaInput::Clip(clip),
                traceparent,
                clock,
                record,
            )
            .await;
        }
    }
}
