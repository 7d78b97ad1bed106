//! The simulator's native LLM APIs beside its OpenAI ones, from the same engine:
//! Hugging Face TGI (`/generate`, `/generate_stream`, its compat route `/`, `/info`),
//! Ollama (`/api/chat`, `/api/generate`, `/api/tags`, `/api/version`) and the KServe v2
//! generate extension as Triton serves it (`/v2/models/{model}/generate`,
//! `generate_stream`, the health and model-metadata routes). Each answer carries the
//! ground truth as the OpenAI answers do (a `redline` object on the last event,
//! `x-redline-*` headers on a whole answer), and the timings each API reports of
//! itself (TGI's `x-*-time` headers, Ollama's durations) are computed from the same
//! timeline, so a client's reading of them can be checked.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::answer::{Format, answer, engine_gone, json_response, json_string};
use super::openai::{self, ApiError, ChatRequest, Message, Plan, Sampling, Stop, Tool};
use super::scheduler::Timeline;
use super::state::SimState;
use super::text::{FinishReason, ToolCall};
use redline_base::sim_tokenizer;

/// An error as TGI and Ollama write it: `{"error": "…"}` (TGI adds `error_type`).
fn native_error(error: ApiError, error_type: Option<&str>) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut body = json!({"error": error.message});
    if let Some(kind) = error_type {
        body["error_type"] = json!(kind);
    }
    json_response(status, &body)
}

/// TGI's `POST /generate` body.
#[derive(Debug, Deserialize)]
struct TgiRequest {
    inputs: String,
    #[serde(default)]
    parameters: TgiParameters,
    /// Read only on the compat route `/`, where it picks the answer's shape.
    #[serde(default)]
    stream: bool,
}

#[derive(Debug, Default, Deserialize)]
struct TgiParameters {
    max_new_tokens: Option<u32>,
    /// TGI decodes greedily unless asked to sample (or given a temperature).
    #[serde(default)]
    do_sample: bool,
    temperature: Option<f64>,
    seed: Option<u64>,
    #[serde(default)]
    stop: Vec<String>,
    #[serde(default)]
    details: bool,
}

fn tgi_plan(state: &SimState, body: &[u8], route: TgiRoute) -> Result<(Plan, bool), ApiError> {
    let request: TgiRequest = openai::parse(body)?;
    let stream = match route {
        TgiRoute::Generate => false,
        TgiRoute::Stream => true,
        TgiRoute::Compat => request.stream,
    };
    let p = request.parameters;
    if let Some(t) = p.temperature.filter(|t| *t <= 0.0) {
        return Err(ApiError {
            status: 422,
            kind: "validation",
            message: format!(
                "Input validation error: `temperature` must be strictly positive, got {t}"
            ),
        });
    }
    let sampled = p.do_sample || p.temperature.is_some();
    let sampling = Sampling {
        model: None,
        stream,
        stream_options: None,
        max_tokens: p.max_new_tokens,
        max_completion_tokens: None,
        temperature: Some(if sampled {
            p.temperature.unwrap_or(1.0).min(2.0)
        } else {
            0.0
        }),
        seed: p.seed.map(|s| s as i64),
        stop: Some(Stop::Many(p.stop)),
        n: None,
    };
    let prompt = sim_tokenizer::encode(&request.inputs);
    let plan = openai::plan(
        prompt,
        sampling.max_tokens,
        sampling,
        None,
        &state.context(),
    )?;
    Ok((plan, p.details))
}

/// Which of TGI's generating routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TgiRoute {
    /// `/generate`: a whole answer, one object.
    Generate,
    /// `/generate_stream`.
    Stream,
    /// `/`: streamed when the body says `stream: true`, else a one-element array
    /// (what Hugging Face's `text-generation` client calls).
    Compat,
}

pub async fn tgi_generate(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    tgi(state, body, TgiRoute::Generate).await
}

pub async fn tgi_generate_stream(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    tgi(state, body, TgiRoute::Stream).await
}

pub async fn tgi_compat(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    tgi(state, body, TgiRoute::Compat).await
}

async fn tgi(state: Arc<SimState>, body: Bytes, route: TgiRoute) -> Response {
    let arrival_ns = state.now_ns();
    match tgi_plan(&state, &body, route) {
        Ok((plan, details)) => {
            let format = TgiFormat {
                details,
                array: route == TgiRoute::Compat,
                text: String::new(),
            };
            answer(
                &state,
                plan,
                format,
                arrival_ns,
                redline_base::seed::fnv64(&body),
            )
            .await
        }
        Err(error) => native_error(error, Some("validation")),
    }
}

/// `GET /info`: what TGI says of itself.
pub async fn tgi_info(State(state): State<Arc<SimState>>) -> Response {
    let max_total = state.profile().max_model_len;
    json_response(
        StatusCode::OK,
        &json!({
            "model_id": state.model(),
            "max_total_tokens": max_total,
            "max_input_tokens": max_total.saturating_sub(1),
            "router": "redline-sim",
            "version": env!("CARGO_PKG_VERSION"),
        }),
    )
}

fn tgi_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::Stop | FinishReason::ToolCalls => "eos_token",
    }
}

/// TGI's answer: a token event per token, then a last event with the whole text and
/// the details. The engine says an answer is finished after its last token, so that
/// last event carries an empty special token (as TGI's end-of-sequence token is).
struct TgiFormat {
    details: bool,
    /// A whole answer is a one-element array (the compat route).
    array: bool,
    /// The answer so far: TGI repeats it whole on the last event.
    text: String,
}

impl TgiFormat {
    fn details_json(&self, reason: FinishReason, t: &Timeline, whole: bool) -> Value {
        if !self.details {
            return Value::Null;
        }
        let mut details = json!({
            "finish_reason": tgi_reason(reason),
            "generated_tokens": t.completion_tokens,
            "seed": null,
        });
        if whole {
            details["prefill"] = json!([]);
            details["tokens"] = json!([]);
        } else {
            details["input_length"] = json!(t.prompt_tokens);
        }
        details
    }
}

impl Format for TgiFormat {
    fn stream_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn token(&mut self, index: u32, delta: &str) -> Option<Bytes> {
        self.text.push_str(delta);
        Some(Bytes::from(format!(
            "data:{{\"index\":{},\"token\":{{\"id\":{},\"text\":{},\"logprob\":-0.25,\"special\":false}},\"generated_text\":null,\"details\":null}}\n\n",
            index + 1,
            sim_tokenizer::piece_id(delta),
            json_string(delta)
        )))
    }

    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes {
        let last = json!({
            "index": timeline.completion_tokens + 1,
            "token": {"id": 0, "text": "", "logprob": 0.0, "special": true},
            "generated_text": self.text,
            "details": self.details_json(reason, timeline, false),
            "redline": truth,
        });
        Bytes::from(format!("data:{last}\n\n"))
    }

    fn broken(&self) -> Bytes {
        let error = json!({"error": engine_gone().message, "error_type": "generation"});
        Bytes::from(format!("data:{error}\n\n"))
    }

    fn whole(&self, text: &str, _reasoning: &str, reason: FinishReason, t: &Timeline) -> Response {
        let mut body = json!({
            "generated_text": text,
            "details": self.details_json(reason, t, true),
        });
        if self.array {
            body = json!([body]);
        }
        let mut response = json_response(StatusCode::OK, &body);
        let ms = |ns: u64| HeaderValue::from(ns / 1_000_000);
        let inference_ns = t.finish_ns - t.scheduled_ns;
        let headers = response.headers_mut();
        headers.insert("x-compute-type", HeaderValue::from_static("redline-sim"));
        headers.insert("x-total-time", ms(t.finish_ns - t.arrival_ns));
        headers.insert("x-validation-time", ms(0));
        headers.insert("x-queue-time", ms(t.scheduled_ns - t.arrival_ns));
        headers.insert("x-inference-time", ms(inference_ns));
        headers.insert(
            "x-time-per-token",
            ms(inference_ns / u64::from(t.completion_tokens.max(1))),
        );
        headers.insert("x-prompt-tokens", HeaderValue::from(t.prompt_tokens));
        headers.insert("x-generated-tokens", HeaderValue::from(t.completion_tokens));
        response
    }
}

fn yes() -> bool {
    true
}

/// Ollama's `options` that change an answer.
#[derive(Debug, Default, Deserialize)]
struct OllamaOptions {
    /// Tokens to generate; -1 (unlimited) and -2 (fill the context) leave it to the
    /// model.
    num_predict: Option<i64>,
    temperature: Option<f64>,
    seed: Option<i64>,
    stop: Option<Vec<String>>,
}

impl OllamaOptions {
    fn sampling(self, model: String, stream: bool) -> Sampling {
        let max_tokens = self
            .num_predict
            .filter(|n| *n > 0)
            .map(|n| n.min(i64::from(u32::MAX)) as u32);
        Sampling {
            model: Some(model),
            stream,
            stream_options: None,
            max_tokens,
            max_completion_tokens: None,
            // Ollama's default temperature.
            temperature: Some(self.temperature.unwrap_or(0.8)),
            seed: self.seed,
            stop: self.stop.map(Stop::Many),
            n: None,
        }
    }
}

/// `POST /api/chat`. With `tools`, the model calls the one the last user message
/// names (OpenAI's `auto`), and answers in text after a `tool` message.
#[derive(Debug, Deserialize)]
struct OllamaChat {
    model: String,
    messages: Vec<Message>,
    #[serde(default = "yes")]
    stream: bool,
    #[serde(default)]
    options: OllamaOptions,
    tools: Option<Vec<Tool>>,
    /// `false` turns a thinking model's reasoning off.
    think: Option<bool>,
}

/// `POST /api/generate`.
#[derive(Debug, Deserialize)]
struct OllamaGenerate {
    model: String,
    prompt: String,
    system: Option<String>,
    #[serde(default = "yes")]
    stream: bool,
    #[serde(default)]
    options: OllamaOptions,
}

/// Which of Ollama's generating routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OllamaRoute {
    Chat,
    Generate,
}

fn ollama_plan(state: &SimState, body: &[u8], route: OllamaRoute) -> Result<Plan, ApiError> {
    let planned = match route {
        OllamaRoute::Chat => {
            let request: OllamaChat = openai::parse(body)?;
            // A chat request as OpenAI's API has it: the same template and tools.
            let chat = ChatRequest {
                messages: request.messages,
                sampling: request.options.sampling(request.model, request.stream),
                tools: request.tools,
                tool_choice: None,
                reasoning_effort: (request.think == Some(false)).then(|| "none".to_owned()),
                reasoning_tokens: None,
            };
            openai::plan_chat(chat, &state.context())
        }
        OllamaRoute::Generate => {
            let request: OllamaGenerate = openai::parse(body)?;
            let prompt = match request.system {
                Some(system) => format!("{system}\n{}", request.prompt),
                None => request.prompt,
            };
            let sampling = request.options.sampling(request.model, request.stream);
            let prompt = sim_tokenizer::encode(&prompt);
            openai::plan(
                prompt,
                sampling.max_tokens,
                sampling,
                None,
                &state.context(),
            )
        }
    };
    planned.map_err(|e| {
        if e.status == 404 {
            let model = state.model();
            ApiError {
                message: format!(
                    "model not found, try pulling it first (this server has \"{model}\")"
                ),
                ..e
            }
        } else {
            e
        }
    })
}

pub async fn ollama_chat(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    ollama(state, body, OllamaRoute::Chat).await
}

pub async fn ollama_generate(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    ollama(state, body, OllamaRoute::Generate).await
}

async fn ollama(state: Arc<SimState>, body: Bytes, route: OllamaRoute) -> Response {
    let arrival_ns = state.now_ns();
    match ollama_plan(&state, &body, route) {
        Ok(plan) => {
            let created_at = time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default();
            let head = format!(
                "{{\"model\":{},\"created_at\":{},",
                json_string(state.model()),
                json_string(&created_at)
            );
            let format = OllamaFormat {
                route,
                model: state.model().to_owned(),
                created_at,
                head,
                tool_call: plan.tool_call.clone(),
                reasoning: plan.generator.reasoning_length(),
            };
            answer(
                &state,
                plan,
                format,
                arrival_ns,
                redline_base::seed::fnv64(&body),
            )
            .await
        }
        Err(error) => native_error(error, None),
    }
}

/// `GET /api/tags`: the one model this server has.
pub async fn ollama_tags(State(state): State<Arc<SimState>>) -> Response {
    let model = state.model();
    json_response(
        StatusCode::OK,
        &json!({"models": [{
            "name": model, "model": model,
            "modified_at": "2026-01-01T00:00:00Z", "size": 0,
            "digest": format!("{:016x}", redline_base::seed::fnv64(model.as_bytes())),
            "details": {"format": "redline-sim", "family": "sim", "parameter_size": "0", "quantization_level": "none"},
        }]}),
    )
}

/// `GET /api/version`.
pub async fn ollama_version() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"version": concat!(env!("CARGO_PKG_VERSION"), "-redline-sim")}),
    )
}

/// Ollama's answer: a JSON line per token, then a last line with `done`, the counts and
/// the durations (nanoseconds) from the timeline: prompt evaluation from admission to
/// the first token, evaluation from there to the end. A tool call comes whole, as
/// Ollama sends one once it has parsed it: one line when the answer is complete, its
/// arguments an object.
struct OllamaFormat {
    route: OllamaRoute,
    model: String,
    /// The request's time, on every line.
    created_at: String,
    /// `{"model":…,"created_at":…,` rendered once.
    head: String,
    tool_call: Option<ToolCall>,
    /// Tokens of thinking before the answer (`message.thinking`).
    reasoning: u32,
}

impl OllamaFormat {
    fn last(&self, text: &str, reason: FinishReason, t: &Timeline) -> Value {
        let mut last = json!({
            "model": self.model,
            "created_at": self.created_at,
            "done": true,
            "done_reason": if reason == FinishReason::Length { "length" } else { "stop" },
            "total_duration": t.finish_ns - t.arrival_ns,
            "load_duration": 0,
            "prompt_eval_count": t.prompt_tokens,
            "prompt_eval_duration": t.first_token_ns - t.scheduled_ns,
            "eval_count": t.completion_tokens,
            "eval_duration": t.finish_ns - t.first_token_ns,
        });
        match self.route {
            OllamaRoute::Chat => last["message"] = json!({"role": "assistant", "content": text}),
            OllamaRoute::Generate => last["response"] = json!(text),
        }
        last
    }

    /// A message with the tool call, in Ollama's shape.
    fn tool_message(call: &ToolCall) -> Value {
        let arguments: Value = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": call.name, "arguments": arguments}}
        ]})
    }
}

impl Format for OllamaFormat {
    fn stream_type(&self) -> &'static str {
        "application/x-ndjson"
    }

    fn token(&mut self, index: u32, delta: &str) -> Option<Bytes> {
        let delta = json_string(delta);
        if index < self.reasoning {
            return Some(Bytes::from(format!(
                "{}\"message\":{{\"role\":\"assistant\",\"content\":\"\",\"thinking\":{delta}}},\"done\":false}}\n",
                self.head
            )));
        }
        if self.tool_call.is_some() {
            return None;
        }
        let line = match self.route {
            OllamaRoute::Chat => format!(
                "{}\"message\":{{\"role\":\"assistant\",\"content\":{delta}}},\"done\":false}}\n",
                self.head
            ),
            OllamaRoute::Generate => {
                format!("{}\"response\":{delta},\"done\":false}}\n", self.head)
            }
        };
        Some(Bytes::from(line))
    }

    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes {
        let mut out = String::new();
        if let Some(call) = &self.tool_call {
            let line = json!({
                "model": self.model, "created_at": self.created_at,
                "message": Self::tool_message(call), "done": false,
            });
            out.push_str(&format!("{line}\n"));
        }
        let mut last = self.last("", reason, timeline);
        last["redline"] = truth;
        out.push_str(&format!("{last}\n"));
        Bytes::from(out)
    }

    fn broken(&self) -> Bytes {
        Bytes::from(format!("{}\n", json!({"error": engine_gone().message})))
    }

    fn whole(
        &self,
        text: &str,
        reasoning: &str,
        reason: FinishReason,
        timeline: &Timeline,
    ) -> Response {
        let mut last = self.last(text, reason, timeline);
        if let Some(call) = &self.tool_call {
            last["message"] = Self::tool_message(call);
        }
        if !reasoning.is_empty() && self.route == OllamaRoute::Chat {
            last["message"]["thinking"] = json!(reasoning);
        }
        json_response(StatusCode::OK, &last)
    }
}

/// A KServe v2 generate request (Triton's generate extension): `text_input`, and options
/// either at the top level (TensorRT-LLM's input tensors) or under `parameters` (the
/// vLLM backend's); the top level wins.
#[derive(Debug, Deserialize)]
struct KserveRequest {
    text_input: String,
    #[serde(flatten)]
    options: KserveOptions,
    #[serde(default)]
    parameters: KserveOptions,
}

/// A KServe request's options, from JSON (HTTP) or tensors and parameters (gRPC).
#[derive(Debug, Default, Deserialize)]
pub(super) struct KserveOptions {
    pub(super) max_tokens: Option<u32>,
    pub(super) temperature: Option<f64>,
    pub(super) seed: Option<i64>,
    pub(super) exclude_input_in_output: Option<bool>,
    pub(super) return_finish_reason: Option<bool>,
    pub(super) return_num_input_tokens: Option<bool>,
    pub(super) return_num_output_tokens: Option<bool>,
}

impl KserveOptions {
    /// These options, each taken from `fallback` where not given here.
    pub(super) fn or(self, fallback: KserveOptions) -> KserveOptions {
        KserveOptions {
            max_tokens: self.max_tokens.or(fallback.max_tokens),
            temperature: self.temperature.or(fallback.temperature),
            seed: self.seed.or(fallback.seed),
            exclude_input_in_output: self
                .exclude_input_in_output
                .or(fallback.exclude_input_in_output),
            return_finish_reason: self.return_finish_reason.or(fallback.return_finish_reason),
            return_num_input_tokens: self
                .return_num_input_tokens
                .or(fallback.return_num_input_tokens),
            return_num_output_tokens: self
                .return_num_output_tokens
                .or(fallback.return_num_output_tokens),
        }
    }
}

/// Triton's answer to a request for a model it does not serve.
fn unknown_model(state: &SimState, model: &str) -> Option<Response> {
    unknown_model_message(state, model).map(|m| native_error(ApiError::not_found(m), None))
}

/// Triton's words for a model it does not serve.
pub(super) fn unknown_model_message(state: &SimState, model: &str) -> Option<String> {
    (model != state.model()).then(|| format!("Request for unknown model: '{model}' is not found"))
}

/// The engine's plan for a KServe request (HTTP or gRPC).
pub(super) fn kserve_plan(
    state: &SimState,
    text_input: &str,
    options: &KserveOptions,
    stream: bool,
) -> Result<Plan, ApiError> {
    let sampling = Sampling {
        model: None,
        stream,
        stream_options: None,
        max_tokens: options.max_tokens,
        max_completion_tokens: None,
        temperature: options.temperature,
        seed: options.seed,
        stop: None,
        n: None,
    };
    let prompt = sim_tokenizer::encode(text_input);
    openai::plan(
        prompt,
        sampling.max_tokens,
        sampling,
        None,
        &state.context(),
    )
}

pub async fn kserve_generate(
    State(state): State<Arc<SimState>>,
    Path(model): Path<String>,
    body: Bytes,
) -> Response {
    kserve(state, model, body, false).await
}

pub async fn kserve_generate_stream(
    State(state): State<Arc<SimState>>,
    Path(model): Path<String>,
    body: Bytes,
) -> Response {
    kserve(state, model, body, true).await
}

async fn kserve(state: Arc<SimState>, model: String, body: Bytes, stream: bool) -> Response {
    let arrival_ns = state.now_ns();
    if let Some(refused) = unknown_model(&state, &model) {
        return refused;
    }
    let request: KserveRequest = match openai::parse(&body) {
        Ok(request) => request,
        Err(error) => return native_error(error, None),
    };
    let options = request.options.or(request.parameters);
    // The route says whether to stream (the vLLM backend also wants `stream: true`).
    let plan = match kserve_plan(&state, &request.text_input, &options, stream) {
        Ok(plan) => plan,
        Err(error) => return native_error(error, None),
    };
    let format = KserveFormat {
        head: format!(
            "{{\"model_name\":{},\"model_version\":\"1\",",
            json_string(state.model())
        ),
        model: state.model().to_owned(),
        prompt: (options.exclude_input_in_output != Some(true)).then_some(request.text_input),
        finish_reason: options.return_finish_reason == Some(true),
        input_tokens: options.return_num_input_tokens == Some(true),
        output_tokens: options.return_num_output_tokens == Some(true),
    };
    answer(
        &state,
        plan,
        format,
        arrival_ns,
        redline_base::seed::fnv64(&body),
    )
    .await
}

/// `GET /v2/health/ready` and `/v2/health/live`.
pub async fn kserve_health() -> StatusCode {
    StatusCode::OK
}

/// `GET /v2/models/{model}` (its metadata) and `/v2/models/{model}/ready`.
pub async fn kserve_model(
    State(state): State<Arc<SimState>>,
    Path(model): Path<String>,
) -> Response {
    if let Some(refused) = unknown_model(&state, &model) {
        return refused;
    }
    json_response(
        StatusCode::OK,
        &json!({
            "name": model, "versions": ["1"], "platform": "redline-sim",
            "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [-1]}],
            "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}],
        }),
    )
}

/// Triton's generate answers: a response per token with the new text, then a last one
/// with no text (and the finish reason and counts when asked for, as the vLLM backend
/// gives them). A whole answer begins with the prompt unless
/// `exclude_input_in_output` was set, as the vLLM backend's does.
struct KserveFormat {
    /// `{"model_name":…,"model_version":"1",` rendered once.
    head: String,
    model: String,
    /// The prompt, when whole answers repeat it.
    prompt: Option<String>,
    finish_reason: bool,
    input_tokens: bool,
    output_tokens: bool,
}

impl KserveFormat {
    fn asked(&self, mut answer: Value, reason: FinishReason, t: &Timeline) -> Value {
        if self.finish_reason {
            answer["finish_reason"] = json!(reason.as_str());
        }
        if self.input_tokens {
            answer["num_input_tokens"] = json!(t.prompt_tokens);
        }
        if self.output_tokens {
            answer["num_output_tokens"] = json!(t.completion_tokens);
        }
        answer
    }
}

impl Format for KserveFormat {
    fn stream_type(&self) -> &'static str {
        "text/event-stream; charset=utf-8"
    }

    fn token(&mut self, _index: u32, delta: &str) -> Option<Bytes> {
        Some(Bytes::from(format!(
            "data: {}\"text_output\":{}}}\n\n",
            self.head,
            json_string(delta)
        )))
    }

    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes {
        let last = json!({"model_name": self.model, "model_version": "1", "text_output": ""});
        let mut last = self.asked(last, reason, timeline);
        last["redline"] = truth;
        Bytes::from(format!("data: {last}\n\n"))
    }

    fn broken(&self) -> Bytes {
        Bytes::from(format!(
            "data: {}\n\n",
            json!({"error": engine_gone().message})
        ))
    }

    fn whole(
        &self,
        text: &str,
        _reasoning: &str,
        reason: FinishReason,
        timeline: &Timeline,
    ) -> Response {
        let text = match &self.prompt {
            Some(prompt) => format!("{prompt}{text}"),
            None => text.to_owned(),
        };
        let answer = json!({"model_name": self.model, "model_version": "1", "text_output": text});
        json_response(StatusCode::OK, &self.asked(answer, reason, timeline))
    }
}
