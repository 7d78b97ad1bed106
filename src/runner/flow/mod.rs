//! Flow sessions: each arrival (or closed-loop slot) runs the flow's steps in order
//! as one W3C trace, one request per step — a tool step one request per tool call and
//! a follow-up chat per round. A failed step ends the session; consecutive tool
//! timeouts open the circuit breaker, which skips what is left and ends the session
//! as `fallback`.

use std::collections::HashMap;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use hyper::header::CONTENT_TYPE;
use serde_json::{Value, json};

mod mcp;
mod steps;

use super::breaker::{Breaker, Heed};
use super::*;
use crate::client::Timeouts;
use crate::client::grpc::{self as grpc_client, GrpcTarget};
use crate::client::json::{self as json_client, JsonAnswer};
use crate::client::openai::Answer;
use crate::client::search::{
    Hit, PgTable, qdrant_body, qdrant_grpc_hits, qdrant_grpc_request, qdrant_hits,
};
use crate::flow::assert::{Output, lexical_similarity, similarity_verdict};
use crate::grpc::qdrant;
use crate::record::{FallbackReason, SessionEnd, SessionOutcome, StepMark};
use crate::scenario::flow::{ChatPlan, FlowPlan, HttpPlan, SearchPlan, Step, StepKind, ToolPlan};
use crate::spec::ApiKind;
use crate::vector::cosine;
use steps::{chat, embed, http_step, search, tool};

/// Largest JSON answer a step reads.
const MAX_JSON_BYTES: usize = 64 << 20;

/// What flow sessions share: the plan, where each service is, and open pools.
pub(super) struct FlowRuntime {
    plan: Arc<FlowPlan>,
    urls: BTreeMap<String, String>,
    models: BTreeMap<String, String>,
    /// One target per chat step.
    chats: BTreeMap<String, LlmTarget>,
    tables: BTreeMap<String, PgTable>,
    /// Services reached over gRPC.
    grpc: BTreeMap<String, GrpcTarget>,
    /// A keep-alive pool per service: its own HTTP version and TLS.
    clients: BTreeMap<String, HttpClient>,
    timeouts: Timeouts,
    /// The run's W3C baggage, sent with every request.
    baggage: hyper::header::HeaderValue,
    /// The services the flow calls: their keys, headers and TLS.
    services: BTreeMap<String, Service>,
    /// Where each session's question comes from.
    prompts: Arc<PromptSource>,
    /// Embeddings of assertions' expected answers, by (service, text).
    expected: tokio::sync::Mutex<HashMap<(String, String), Vec<f32>>>,
    /// The MCP targets of steps that call an `api: mcp` service, by step name.
    mcp: BTreeMap<String, crate::client::mcp::McpTarget>,
}

impl FlowRuntime {
    pub(super) fn new(
        plan: Arc<FlowPlan>,
        urls: BTreeMap<String, String>,
        models: BTreeMap<String, String>,
        scenario: &Scenario,
        baggage: hyper::header::HeaderValue,
        prompts: Arc<PromptSource>,
    ) -> Result<FlowRuntime> {
        let mut chats = BTreeMap::new();
        for step in &plan.steps {
            if let StepKind::Chat(ChatPlan { body, .. }) = &step.kind {
                let service = &scenario.services[&step.service];
                let api = crate::scenario::llm_api(service.api);
                let model = &models[&step.service];
                chats.insert(
                    step.name.clone(),
                    LlmTarget {
                        uri: format!("{}{}", urls[&step.service], api.path(model, true))
                            .parse()
                            .context("building a chat step's URL")?,
                        api,
                        model: model.clone(),
                        stream: true,
                        include_usage: true,
                        api_key: service.api_key.clone(),
                        headers: service
                            .headers
                            .iter()
                            .cloned()
                            .chain([(BAGGAGE.clone(), baggage.clone())])
                            .collect(),
                        extra_body: body.clone(),
                        timeouts: scenario.timeouts,
                        max_response_bytes: MAX_JSON_BYTES,
                        counting: service.counting.clone(),
                    },
                );
            }
        }
        let clients = plan
            .services
            .keys()
            .map(|name| {
                (
                    name.clone(),
                    scenario.services[name].http_client(&scenario.timeouts),
                )
            })
            .collect();
        let mut tables = BTreeMap::new();
        let mut grpc = BTreeMap::new();
        for (name, service) in &plan.services {
            if let (ApiKind::Pgvector, Some(spec)) = (service.api, &service.pgvector) {
                let table = PgTable::new(&urls[name], spec)
                    .map_err(|e| anyhow::anyhow!("service `{name}`: {e}"))?;
                tables.insert(name.clone(), table);
            }
            if service.api == ApiKind::QdrantGrpc {
                let service = &scenario.services[name];
                let headers = service
                    .api_key
                    .iter()
                    .map(|key| (AUTHORIZATION, key.clone()));
                let target = GrpcTarget {
                    base: urls[name].clone(),
                    headers: headers
                        .chain(service.headers.iter().cloned())
                        .chain([(BAGGAGE.clone(), baggage.clone())])
                        .collect(),
                    timeouts: scenario.timeouts,
                    max_message_bytes: MAX_JSON_BYTES,
                };
                grpc.insert(name.clone(), target);
            }
        }
        let mcp = mcp::targets(&plan, &urls, scenario, &baggage)?;
        Ok(FlowRuntime {
            mcp,
            plan,
            urls,
            models,
            chats,
            tables,
            grpc,
            clients,
            timeouts: scenario.timeouts,
            baggage,
            prompts,
            services: scenario.services.clone(),
            expected: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Offers `tools: { from }` chat steps their service's tools (see [`mcp`]).
    pub(super) async fn offer_listed_tools(&mut self, scenario: &Scenario) -> Result<()> {
        mcp::offer_listed_tools(self, scenario).await
    }

    /// The pool of a service the flow calls.
    fn client(&self, service: &str) -> &HttpClient {
        &self.clients[service]
    }

    /// A JSON POST (or `method`) to a service, with its headers and the trace.
    fn request(
        &self,
        service: &str,
        method: hyper::Method,
        path: &str,
        body: Vec<u8>,
        traceparent: &str,
    ) -> Result<Request<Full<Bytes>>, String> {
        let (Some(flow_service), Some(url)) = (self.services.get(service), self.urls.get(service))
        else {
            return Err(format!("service `{service}` is not one this flow calls"));
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{url}{path}"))
            .header(CONTENT_TYPE, "application/json")
            .header("traceparent", traceparent)
            .header(&BAGGAGE, &self.baggage);
        if let Some(key) = &flow_service.api_key {
            builder = builder.header(AUTHORIZATION, key);
        }
        for (name, value) in &flow_service.headers {
            builder = builder.header(name, value);
        }
        builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("cannot build the request: {e}"))
    }
}

/// One session's state as its steps run.
struct Session<'a> {
    shared: &'a Arc<Shared>,
    runtime: &'a FlowRuntime,
    stage: u32,
    id: u64,
    trace_id: String,
    rng: ChaCha8Rng,
    snapshot: String,
    /// What templates see: `prompt`, `steps`, `passages`.
    context: Value,
    prompt: String,
    vectors: HashMap<String, Vec<f32>>,
    /// Each chat step's conversation so far, and its latest answer.
    conversations: HashMap<String, (Vec<Value>, Answer)>,
    requests: u32,
    breaker: Breaker,
    failed: bool,
    fallback: Option<FallbackReason>,
    /// The latest record, held back so the last one can carry the session's end.
    held: Option<Box<Record>>,
    run: SessionRun,
    first_intended_us: u64,
}

/// A request's record, its permits and its traceparent, between admission and emit.
struct Slot {
    record: Box<Record>,
    traceparent: String,
    _permits: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
}

impl Session<'_> {
    /// Admits the session's next request; `None` if the in-flight limit refused it.
    fn begin(&mut self, step: &Step, tool: Option<(String, String)>) -> Option<Slot> {
        let intended = self.shared.clock.start().elapsed();
        let seq = self.shared.take_seq();
        let Some(admitted) = admit(self.shared, self.stage, intended, seq, None) else {
            let at = intended.as_micros() as u64;
            self.run.requests.push((at, Outcome::Dropped, at));
            return None;
        };
        self.requests += 1;
        let traceparent = traceparent(&self.trace_id, self.rng.random());
        let mut record = admitted.record;
        record.traceparent = Some(traceparent.clone());
        record.session = Some(SessionMark {
            id: self.id,
            turn: self.requests,
            trace_id: self.trace_id.clone(),
            snapshot: self.snapshot.clone(),
        });
        let (tool, tool_call_hash) = tool.unzip();
        record.step = Some(StepMark {
            name: step.name.clone(),
            kind: step.kind.name().to_owned(),
            service: Some(step.service.clone()),
            agent_step_seq: self.requests,
            tool,
            tool_call_hash,
            results: None,
            recall: None,
        });
        Some(Slot {
            record,
            traceparent,
            _permits: admitted._permits,
        })
    }

    /// Records the request's end; the previous record goes to the recorder.
    fn finish(&mut self, slot: Slot) {
        let mut record = slot.record;
        record.note_given_up(self.shared.clock.now_us());
        self.run
            .requests
            .push((record.intended_us, record.outcome, record.done_us()));
        if let Some(previous) = self.held.replace(record) {
            self.shared.emit(previous);
        }
    }

    /// Runs `request` unless the drain runs out first: then `None`, and the caller
    /// marks the record [`cancelled`](Self::cancelled).
    async fn guarded<T>(
        abort: &CancellationToken,
        request: impl Future<Output = Option<T>>,
    ) -> Option<Option<T>> {
        tokio::select! {
            out = request => Some(out),
            _ = abort.cancelled() => None,
        }
    }

    fn cancelled<T>(record: &mut Record) -> Option<T> {
        record.fail(
            Outcome::Cancelled,
            FailStage::Client,
            "cancelled",
            "still in flight when the drain timeout ran out",
        );
        None
    }

    fn set_step(&mut self, name: &str, value: Value) {
        self.context["steps"][name] = value;
    }

    /// Checks the step's assertion on a successful request's output.
    async fn check(&self, step: &Step, record: &mut Record, output: &Output<'_>) {
        let Some(assertion) = &step.assert else {
            return;
        };
        if record.outcome != Outcome::Ok {
            return;
        }
        let pointed;
        let text;
        let output = match &assertion.field {
            None => output,
            Some(pointer) => match output.json.and_then(|json| json.pointer(pointer)) {
                Some(value) => {
                    text = value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned);
                    pointed = Output {
                        text: &text,
                        json: Some(value),
                        ..Output::default()
                    };
                    &pointed
                }
                None => {
                    record.fail(
                        Outcome::Error,
                        FailStage::Assert,
                        "assert",
                        format!("step `{}`: the output has no `{pointer}`", step.name),
                    );
                    return;
                }
            },
        };
        let mut verdict = assertion.check(output);
        if verdict.is_ok()
            && let Some(similar) = &assertion.similar
        {
            verdict = match &similar.embed_service {
                Some(service) => match self
                    .similarity(service, &similar.expected, output.text)
                    .await
                {
                    Ok(similarity) => similarity_verdict(similarity, similar),
                    Err(e) => Err(format!("similarity not judged: {e}")),
                },
                None => {
                    similarity_verdict(lexical_similarity(&similar.expected, output.text), similar)
                }
            };
        }
        if let Err(message) = verdict {
            record.fail(
                Outcome::Error,
                FailStage::Assert,
                "assert",
                format!("step `{}`: {message}", step.name),
            );
        }
    }

    /// Cosine similarity of two texts by a service's embeddings (the expected text's
    /// embedding is cached). Judging is not load: these calls are not recorded.
    async fn similarity(&self, service: &str, expected: &str, text: &str) -> Result<f64, String> {
        let runtime = self.runtime;
        let key = (service.to_owned(), expected.to_owned());
        let cached = runtime.expected.lock().await.get(&key).cloned();
        let inputs: Vec<&str> = match &cached {
            Some(_) => vec![text],
            None => vec![text, expected],
        };
        let body = json!({"model": runtime.models.get(service).cloned().unwrap_or_default(), "input": inputs});
        let request = runtime.request(
            service,
            hyper::Method::POST,
            "/v1/embeddings",
            body.to_string().into_bytes(),
            "00-00000000000000000000000000000001-0000000000000001-00",
        )?;
        let mut scratch = Record::unsent(0, 0, Phase::Measure, 0);
        let answer = json_client::call(
            runtime.client(service),
            request,
            runtime.timeouts.total,
            None,
            MAX_JSON_BYTES,
            self.shared.clock,
            &mut scratch,
        )
        .await
        .ok_or_else(|| {
            scratch.error.map_or("no answer".to_owned(), |e| {
                format!("{}: {}", e.kind, e.message)
            })
        })?;
        let vector = |i: usize| embedding_of(&answer.json, i);
        let got = vector(0).ok_or("the embeddings answer holds no vector")?;
        let want = match cached {
            Some(v) => v,
            None => {
                let v = vector(1).ok_or("the embeddings answer holds no second vector")?;
                runtime.expected.lock().await.insert(key, v.clone());
                v
            }
        };
        Ok(f64::from(cosine(&got, &want)))
    }
}

fn embedding_of(answer: &Value, index: usize) -> Option<Vec<f32>> {
    answer["data"][index]["embedding"]
        .as_array()?
        .iter()
        .map(|x| x.as_f64().map(|x| x as f32))
        .collect()
}

/// FNV-1a of a tool's name and its arguments with keys sorted, as hex.
pub fn tool_call_hash(name: &str, arguments: &Value) -> String {
    fn canonical(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let sorted: std::collections::BTreeMap<_, _> =
                    map.iter().map(|(k, v)| (k.clone(), canonical(v))).collect();
                Value::Object(sorted.into_iter().collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    let text = format!("{name}\u{0}{}", canonical(arguments));
    format!("{:016x}", crate::seed::fnv64(text.as_bytes()))
}

/// Runs one flow session; returns each request's (intended, outcome, end).
pub(super) async fn run_flow(
    shared: &Arc<Shared>,
    runtime: &FlowRuntime,
    start: SessionStart<'_>,
) -> SessionRun {
    let prompts = &runtime.prompts;
    // Each step is intended when it is sent, after the one before: the arrival's
    // intended start is not used.
    let SessionStart {
        stage,
        stage_permit: _held_for_the_session,
        budget,
        stop,
        ..
    } = start;
    if budget.is_some_and(|b| !b.take()) {
        return SessionRun {
            out_of_budget: true,
            ..SessionRun::default()
        };
    }
    let id = shared.next_session.fetch_add(1, Ordering::Relaxed);
    let seed = shared.scenario.seed;
    let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, 0x464c_4f57, id]));
    let trace_id = new_trace_id(&mut rng, shared.trace_key);
    let prompt = prompts.payload(seed, id).prompt.user_text().to_owned();
    let mut session = Session {
        shared,
        runtime,
        stage,
        id,
        trace_id,
        rng,
        snapshot: format!("{}@seed={seed}", shared.scenario.name),
        context: json!({"prompt": prompt, "steps": {}, "passages": []}),
        prompt,
        vectors: HashMap::new(),
        conversations: HashMap::new(),
        requests: 0,
        breaker: Breaker::new(runtime.plan.breaker),
        failed: false,
        fallback: None,
        held: None,
        run: SessionRun::default(),
        first_intended_us: shared.clock.now_us(),
    };
    let plan = &runtime.plan;
    let mut cancelled = false;
    for (i, step) in plan.steps.iter().enumerate() {
        if stop.is_cancelled() {
            cancelled = true;
            break;
        }
        let went_on = match &step.kind {
            StepKind::Embed => embed(&mut session, step).await,
            StepKind::Search(plan) => search(&mut session, step, plan).await,
            StepKind::Chat(plan) => chat(&mut session, step, plan, None).await,
            StepKind::Tool(plan) => tool(&mut session, step, plan).await,
            StepKind::Http(plan) => http_step(&mut session, step, plan).await,
            StepKind::Mcp(plan) => mcp::mcp_step(&mut session, step, plan).await,
        };
        if let Some(reason) = &mut session.fallback {
            reason.skipped = plan.steps[i + 1..].iter().map(|s| s.name.clone()).collect();
            break;
        }
        match went_on {
            Went::On => {}
            Went::Stopped => break,
            Went::Refused => {
                cancelled = true;
                break;
            }
        }
    }
    let outcome = if session.fallback.is_some() {
        SessionOutcome::Fallback
    } else if session.failed {
        SessionOutcome::Failed
    } else if cancelled {
        SessionOutcome::Cancelled
    } else {
        SessionOutcome::Ok
    };
    if let Some(mut last) = session.held.take() {
        last.session_end = Some(SessionEnd {
            outcome,
            fallback_reason: session.fallback.take(),
            requests: session.requests,
            e2e_us: last.done_us().saturating_sub(session.first_intended_us),
        });
        shared.emit(last);
    }
    session.run
}

/// Whether the session goes on after a step.
enum Went {
    On,
    /// A step failed: the rest depends on it.
    Stopped,
    /// The in-flight limit refused a request.
    Refused,
}

impl Session<'_> {
    fn went(&mut self, record_ok: bool) -> Went {
        if record_ok {
            Went::On
        } else {
            self.failed = true;
            Went::Stopped
        }
    }

    /// A step that cannot be sent (a template that does not render): a failure of the
    /// step, recorded without a request.
    fn unsendable(&mut self, mut slot: Slot, kind: &str, message: String) -> Went {
        slot.record
            .fail(Outcome::Error, FailStage::Client, kind, message);
        self.finish(slot);
        self.failed = true;
        Went::Stopped
    }

    /// A JSON call of a step; `None` on failure (the record says how).
    async fn json_call(&self, slot: &mut Slot, call: Call<'_>) -> Option<JsonAnswer> {
        let request = match self.runtime.request(
            call.service,
            call.method,
            call.path,
            call.body,
            &slot.traceparent,
        ) {
            Ok(r) => r,
            Err(e) => {
                slot.record
                    .fail(Outcome::Error, FailStage::Client, "request", e);
                return None;
            }
        };
        let answer = json_client::call(
            self.runtime.client(call.service),
            request,
            call.timeout,
            call.expect_status,
            MAX_JSON_BYTES,
            self.shared.clock,
            &mut slot.record,
        );
        Self::guarded(&self.shared.abort, answer)
            .await
            .unwrap_or_else(|| Self::cancelled(&mut slot.record))
    }
}

/// One JSON request of a step.
struct Call<'a> {
    service: &'a str,
    method: hyper::Method,
    path: &'a str,
    body: Vec<u8>,
    timeout: Duration,
    expect_status: Option<u16>,
}

impl<'a> Call<'a> {
    fn post(service: &'a str, path: &'a str, body: Vec<u8>, timeout: Duration) -> Call<'a> {
        Call {
            service,
            method: hyper::Method::POST,
            path,
            body,
            timeout,
            expect_status: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_hashes_ignore_key_order_and_whitespace() {
        let a = tool_call_hash("weather", &json!({"city": "Oslo", "days": 2}));
        let b = tool_call_hash(
            "weather",
            &serde_json::from_str(r#"{ "days":2,"city":"Oslo" }"#).unwrap(),
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            tool_call_hash("forecast", &json!({"city": "Oslo", "days": 2}))
        );
        assert_ne!(
            a,
            tool_call_hash("weather", &json!({"city": "Bergen", "days": 2}))
        );
        assert_eq!(a.len(), 16);
    }
}
