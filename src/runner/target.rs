//! What each request is sent to, built once per run from the scenario's workload and
//! its service: an LLM API with its prompts, a plain HTTP request, or a media API with
//! its prompts or clips.

use std::sync::Arc;

use anyhow::{Context, Result};
use hyper::header::{AUTHORIZATION, HeaderName, HeaderValue};

use super::feedback::LiveRates;
use super::services::BAGGAGE;
use super::wiring::Servers;
use crate::client::http::HttpTarget;
use crate::client::mcp::{McpTarget, McpTransport};
use crate::client::media::{self, MediaInput, MediaRequest, MediaTarget};
use crate::client::openai::LlmTarget;
use crate::client::realtime::{self, RealtimeInput};
use crate::client::{HttpClient, RunClock};
use crate::record::Record;
use crate::scenario::media::MediaSource;
use crate::scenario::{Endpoint, Scenario, Service, Workload};
use crate::seed::mix_seed;
use crate::workload::PromptSource;
use crate::workload::mcp::McpWorkload;

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
    /// MCP calls, each drawn from the workload's mix, on the target's sessions.
    Mcp {
        target: McpTarget,
        workload: Arc<McpWorkload>,
    },
    /// Each arrival goes to one of these, drawn by weight.
    Mix(Vec<Choice>),
}

/// One share of a mix: its target and its service's own connections.
pub(super) struct Choice {
    /// The cumulative weight up to and with this share.
    until: u64,
    target: Target,
    http: HttpClient,
}

impl Target {
    /// What request `seq` is sent to, and on which connections (`http`, the main
    /// service's, unless a mix draws another service).
    /// A feedback controller's `live` rates, when given, weigh the draw instead of
    /// the mix's weights.
    pub(super) fn pick<'a>(
        &'a self,
        http: &'a HttpClient,
        seed: u64,
        seq: u64,
        live: Option<&LiveRates>,
    ) -> (&'a Target, &'a HttpClient) {
        let Target::Mix(choices) = self else {
            return (self, http);
        };
        let draw = mix_seed(&[seed, 0x4d49_5845, seq]);
        let choice = match live {
            Some(rates) => &choices[rates.pick(draw as f64 / (u64::MAX as f64 + 1.0))],
            None => {
                let total = choices.last().map_or(1, |c| c.until);
                choices
                    .iter()
                    .find(|c| draw % total < c.until)
                    .expect("the draw is below the total")
            }
        };
        (&choice.target, &choice.http)
    }
}

/// The run's target: the main service's workload, or each mixed service's.
pub(super) fn build_target(
    scenario: &Scenario,
    servers: &Servers,
    baggage: &hyper::header::HeaderValue,
) -> Result<Target> {
    let Workload::Mix(entries) = &scenario.workload else {
        return target_for(
            scenario,
            scenario.service(),
            &scenario.workload,
            servers,
            baggage,
        );
    };
    let mut until = 0;
    let mut choices = Vec::new();
    for entry in entries {
        let service = &scenario.services[&entry.service];
        until += u64::from(entry.weight);
        choices.push(Choice {
            until,
            target: target_for(scenario, service, &entry.workload, servers, baggage)?,
            http: service.http_client(&scenario.timeouts),
        });
    }
    Ok(Target::Mix(choices))
}

/// What `workload`'s requests to `service` need.
fn target_for(
    scenario: &Scenario,
    service: &Service,
    workload: &Workload,
    servers: &Servers,
    baggage: &hyper::header::HeaderValue,
) -> Result<Target> {
    let base_url = &servers.request_base(&service.name, servers.url_of(service));
    let model = &servers.model_of(service);
    let max_response_bytes = scenario.max_response_bytes;
    let mut service_headers = service.headers.clone();
    service_headers.push((BAGGAGE.clone(), baggage.clone()));
    Ok(match workload {
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
        Workload::Mcp(workload) => Target::Mcp {
            target: McpTarget::new(
                mcp_transport(service, base_url, service_headers)?,
                scenario.timeouts,
                max_response_bytes,
                workload.progress,
            )
            .listening(workload.listen),
            workload: workload.clone(),
        },
        Workload::Mix(_) => anyhow::bail!("a mix's entries are single workloads"),
    })
}

/// How an `api: mcp` service is reached: its command over stdio, or its endpoint
/// over Streamable HTTP with `headers` and the service's key. The endpoint is the
/// simulator's `/mcp`; a URL as given, or with `/mcp`, the usual path, when it names
/// none.
pub(super) fn mcp_transport(
    service: &Service,
    base_url: &str,
    mut headers: Vec<(HeaderName, HeaderValue)>,
) -> Result<McpTransport> {
    let named_path = base_url
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains('/'));
    let uri = match &service.endpoint {
        Endpoint::Stdio { command } => {
            let program = &command[0];
            anyhow::ensure!(
                is_runnable(program),
                "service `{}`: cannot find `{program}` to start the MCP server (not a file, and not on PATH)",
                service.name
            );
            return Ok(McpTransport::Stdio {
                command: command.clone(),
            });
        }
        Endpoint::Url(_) if named_path => base_url.to_owned(),
        _ => format!("{base_url}/mcp"),
    };
    if let Some(key) = &service.api_key {
        headers.push((AUTHORIZATION, key.clone()));
    }
    let uri = uri
        .parse()
        .with_context(|| format!("building service `{}`'s MCP endpoint", service.name))?;
    Ok(McpTransport::http(uri, headers))
}

/// Whether `program` names a file, or one on `PATH`: a command that cannot start is
/// told before the run, not in every record.
fn is_runnable(program: &str) -> bool {
    if program.contains('/') {
        return std::path::Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
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
    if let MediaRequest::Realtime(request) = &target.request {
        let payload;
        let said = match input {
            MediaSource::Pcm(clips) => {
                RealtimeInput::Pcm(&clips[(seq % clips.len() as u64) as usize])
            }
            MediaSource::Prompts(prompts) => {
                payload = prompts.payload(seed, seq);
                RealtimeInput::Text(payload.prompt.user_text())
            }
            MediaSource::Clips(_) => unreachable!("a Realtime workload's clips are PCM"),
        };
        realtime::session(http, target, request, said, traceparent, clock, record).await;
        return;
    }
    match input {
        MediaSource::Pcm(_) => unreachable!("only a Realtime workload speaks PCM"),
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
