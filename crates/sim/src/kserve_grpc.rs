//! KServe v2 over gRPC, as NVIDIA Triton serves an LLM: `ModelStreamInfer` (the
//! decoupled stream: a response per token, then a last one flagged
//! `triton_final_response` that carries the ground truth in its `redline` parameter),
//! `ModelInfer` (one whole response; the truth in the `x-redline-*` headers), and the
//! health and metadata calls clients make first. Requests are read as Triton's LLM
//! backends take them: `text_input`, options as input tensors (TensorRT-LLM's
//! `max_tokens`), request parameters, or the vLLM backend's `sampling_parameters`
//! JSON. A stream's requests are answered one after another, in order.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Frame;
use prost::Message;
use serde_json::Value;
use tonic::Code;

use super::answer::{Format, answer, engine_gone, stream_events};
use super::native::{KserveOptions, kserve_plan, unknown_model_message};
use super::scheduler::Timeline;
use super::state::SimState;
use super::text::FinishReason;
use redline_base::grpc::kserve::{
    self, Empty, Flag, InferParameter, ModelInferRequest, ModelInferResponse,
    ModelMetadataResponse, ModelRef, ModelStreamInferResponse, ServerMetadataResponse, Tensor,
    TensorMetadata, infer_parameter::Choice,
};
use redline_base::grpc::{frame, ok_trailers, trailers_only};

/// Largest request message read.
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// The routes of the KServe gRPC listener.
pub fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route(kserve::MODEL_STREAM_INFER, post(stream_infer))
        .route(kserve::MODEL_INFER, post(infer))
        .route(kserve::SERVER_LIVE, post(live))
        .route(kserve::SERVER_READY, post(live))
        .route(kserve::MODEL_READY, post(model_ready))
        .route(kserve::SERVER_METADATA, post(server_metadata))
        .route(kserve::MODEL_METADATA, post(model_metadata))
        .fallback(super::grpc::unimplemented)
        .with_state(state)
}

/// One unary call answered by `answer` through tonic's server codec.
async fn unary<Req, Resp, F>(request: Request, answer: F) -> Response
where
    Req: Message + Default + Send + 'static,
    Resp: Message + Send + 'static,
    F: Fn(Req) -> Result<Resp, tonic::Status> + Clone + Send + 'static,
{
    let service = tower::service_fn(move |request: tonic::Request<Req>| {
        let answer = answer.clone();
        async move { answer(request.into_inner()).map(tonic::Response::new) }
    });
    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<Resp, Req>::default());
    grpc.unary(service, request).await.into_response()
}

async fn live(request: Request) -> Response {
    unary(request, |_: Empty| Ok(Flag { value: true })).await
}

async fn model_ready(State(state): State<Arc<SimState>>, request: Request) -> Response {
    let answer = move |asked: ModelRef| {
        Ok(Flag {
            value: asked.name == state.model(),
        })
    };
    unary(request, answer).await
}

async fn server_metadata(request: Request) -> Response {
    let answer = |_: Empty| {
        Ok(ServerMetadataResponse {
            name: "redline-sim".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: Vec::new(),
        })
    };
    unary(request, answer).await
}

async fn model_metadata(State(state): State<Arc<SimState>>, request: Request) -> Response {
    let answer = move |asked: ModelRef| {
        if let Some(message) = unknown_model_message(&state, &asked.name) {
            return Err(tonic::Status::not_found(message));
        }
        let tensor = |name: &str| TensorMetadata {
            name: name.into(),
            datatype: "BYTES".into(),
            shape: vec![-1],
        };
        Ok(ModelMetadataResponse {
            name: asked.name,
            versions: vec!["1".into()],
            platform: "redline-sim".into(),
            inputs: vec![tensor("text_input")],
            outputs: vec![tensor("text_output")],
        })
    };
    unary(request, answer).await
}

/// `ModelInfer`: the whole answer in one response.
async fn infer(State(state): State<Arc<SimState>>, request: Request) -> Response {
    let arrival_ns = state.now_ns();
    let mut messages = Messages::new(request.into_body());
    let asked = match messages.next().await {
        Some(Ok(bytes)) => bytes,
        Some(Err(refused)) => return trailers_only(refused.code(), refused.message()),
        None => return trailers_only(Code::Internal, "no request message"),
    };
    match planned(&state, &asked, false) {
        Ok((plan, format)) => {
            answer(
                &state,
                plan,
                format,
                arrival_ns,
                redline_base::seed::fnv64(&asked),
            )
            .await
        }
        Err(status) => trailers_only(status.code(), status.message()),
    }
}

/// `ModelStreamInfer`: each request of the stream answered a token at a time, in
/// order; the call ends OK when the client ends its side.
async fn stream_infer(State(state): State<Arc<SimState>>, request: Request) -> Response {
    let messages = Messages::new(request.into_body());
    let answers = futures_util::stream::unfold(Some(messages), move |messages| {
        let state = state.clone();
        async move {
            let mut messages = messages?;
            let arrival_ns = state.now_ns();
            let asked = match messages.next().await? {
                Ok(bytes) => bytes,
                Err(refused) => {
                    let error = stream_error(refused.message().to_owned());
                    return Some((futures_util::stream::iter([Ok(error)]).boxed(), None));
                }
            };
            let answer = match planned(&state, &asked, true) {
                Ok((plan, format)) => {
                    let hash = redline_base::seed::fnv64(&asked);
                    stream_events(&state, plan, format, arrival_ns, hash).boxed()
                }
                Err(status) => {
                    let error = stream_error(status.message().to_owned());
                    futures_util::stream::iter([Ok(error)]).boxed()
                }
            };
            Some((answer, Some(messages)))
        }
    });
    let data = answers.flatten().map(|bytes| bytes.map(Frame::data));
    let end =
        futures_util::stream::once(async { Ok::<_, Infallible>(Frame::trailers(ok_trailers())) });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/grpc")
        .body(Body::new(http_body_util::StreamBody::new(data.chain(end))))
        .expect("static headers are valid")
}

/// A per-request error inside a stream, as Triton reports one.
fn stream_error(message: String) -> Bytes {
    frame(&ModelStreamInferResponse {
        error_message: message,
        infer_response: None,
    })
}

/// A request's plan on the engine and the format of its answer; or the status that
/// refuses it.
fn planned(
    state: &SimState,
    asked: &[u8],
    stream: bool,
) -> Result<(super::openai::Plan, GrpcFormat), tonic::Status> {
    let request = ModelInferRequest::decode(asked)
        .map_err(|e| tonic::Status::invalid_argument(format!("not a ModelInferRequest: {e}")))?;
    if let Some(message) = unknown_model_message(state, &request.model_name) {
        return Err(tonic::Status::not_found(message));
    }
    let (tensor, raw) = request
        .input("text_input")
        .ok_or_else(|| tonic::Status::invalid_argument("expected input 'text_input'"))?;
    let text = kserve::bytes_elements(tensor, raw)
        .and_then(|elements| {
            elements
                .first()
                .map(|e| String::from_utf8_lossy(e).into_owned())
        })
        .ok_or_else(|| tonic::Status::invalid_argument("'text_input' holds no BYTES element"))?;
    let options = options_of(&request);
    let plan = kserve_plan(state, &text, &options, stream)
        .map_err(|e| tonic::Status::invalid_argument(e.message))?;
    let format = GrpcFormat {
        model: state.model().to_owned(),
        id: request.id,
        prompt: (options.exclude_input_in_output != Some(true)).then_some(text),
        finish_reason: options.return_finish_reason == Some(true),
        output_tokens: options.return_num_output_tokens == Some(true),
    };
    Ok((plan, format))
}

/// Options as Triton's LLM backends take them: input tensors first (TensorRT-LLM),
/// then request parameters, then the vLLM backend's `sampling_parameters` JSON.
fn options_of(request: &ModelInferRequest) -> KserveOptions {
    let number = |name: &str| {
        let (tensor, raw) = request.input(name)?;
        tensor_number(tensor, raw)
    };
    let flag = |name: &str| number(name).map(|n| n != 0.0);
    let from_tensors = KserveOptions {
        max_tokens: number("max_tokens").map(|n| n as u32),
        temperature: number("temperature"),
        seed: number("seed")
            .or_else(|| number("random_seed"))
            .map(|n| n as i64),
        exclude_input_in_output: flag("exclude_input_in_output"),
        return_finish_reason: flag("return_finish_reason"),
        return_num_input_tokens: flag("return_num_input_tokens"),
        return_num_output_tokens: flag("return_num_output_tokens"),
    };
    let from_parameters: KserveOptions =
        serde_json::from_value(Value::Object(parameters_json(&request.parameters)))
            .unwrap_or_default();
    let sampling: KserveOptions = request
        .input("sampling_parameters")
        .and_then(|(tensor, raw)| {
            let elements = kserve::bytes_elements(tensor, raw)?;
            serde_json::from_slice(elements.first()?).ok()
        })
        .unwrap_or_default();
    from_tensors.or(from_parameters).or(sampling)
}

/// Request parameters as JSON values.
fn parameters_json(parameters: &HashMap<String, InferParameter>) -> serde_json::Map<String, Value> {
    parameters
        .iter()
        .filter_map(|(name, p)| {
            let value = match p.choice.as_ref()? {
                Choice::Bool(b) => Value::from(*b),
                Choice::Int64(n) => Value::from(*n),
                Choice::Uint64(n) => Value::from(*n),
                Choice::Double(x) => Value::from(*x),
                Choice::String(s) => Value::from(s.as_str()),
            };
            Some((name.clone(), value))
        })
        .collect()
}

/// The first element of a numeric or BOOL tensor, from its contents or raw bytes.
fn tensor_number(tensor: &Tensor, raw: Option<&[u8]>) -> Option<f64> {
    if let Some(c) = &tensor.contents {
        let first = [
            c.int_contents.first().map(|&n| f64::from(n)),
            c.int64_contents.first().map(|&n| n as f64),
            c.uint_contents.first().map(|&n| f64::from(n)),
            c.uint64_contents.first().map(|&n| n as f64),
            c.fp32_contents.first().map(|&x| f64::from(x)),
            c.fp64_contents.first().copied(),
            c.bool_contents.first().map(|&b| f64::from(u8::from(b))),
        ];
        if let Some(n) = first.into_iter().flatten().next() {
            return Some(n);
        }
    }
    let mut raw = raw?;
    Some(match tensor.datatype.as_str() {
        "BOOL" | "UINT8" => f64::from(raw.first().copied()?),
        "INT32" if raw.len() >= 4 => f64::from(raw.get_i32_le()),
        "UINT32" if raw.len() >= 4 => f64::from(raw.get_u32_le()),
        "INT64" if raw.len() >= 8 => raw.get_i64_le() as f64,
        "UINT64" if raw.len() >= 8 => raw.get_u64_le() as f64,
        "FP32" if raw.len() >= 4 => f64::from(raw.get_f32_le()),
        "FP64" if raw.len() >= 8 => raw.get_f64_le(),
        _ => return None,
    })
}

/// The request messages of a call's body, as they complete; a message over the
/// limit, or compressed, ends the call with a status.
struct Messages {
    body: Body,
    buffer: BytesMut,
}

impl Messages {
    fn new(body: Body) -> Messages {
        Messages {
            body,
            buffer: BytesMut::new(),
        }
    }

    async fn next(&mut self) -> Option<Result<Bytes, tonic::Status>> {
        loop {
            if self.buffer.len() >= 5 {
                if self.buffer[0] != 0 {
                    return Some(Err(tonic::Status::unimplemented("compressed requests")));
                }
                let len = u32::from_be_bytes([
                    self.buffer[1],
                    self.buffer[2],
                    self.buffer[3],
                    self.buffer[4],
                ]) as usize;
                if len > MAX_REQUEST_BYTES {
                    return Some(Err(tonic::Status::resource_exhausted(
                        "request message too large",
                    )));
                }
                if self.buffer.len() >= 5 + len {
                    self.buffer.advance(5);
                    return Some(Ok(self.buffer.split_to(len).freeze()));
                }
            }
            match self.body.frame().await? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Err(_) => return None, // the client went away
            }
        }
    }
}

/// Triton's responses for one request: a BYTES `text_output` per token, then the last
/// response (its text empty) flagged final, with the finish reason and count when
/// asked and the ground truth.
struct GrpcFormat {
    model: String,
    id: String,
    /// The prompt, when a whole answer repeats it (no `exclude_input_in_output`).
    prompt: Option<String>,
    finish_reason: bool,
    output_tokens: bool,
}

impl GrpcFormat {
    fn response(&self, text: &str) -> ModelInferResponse {
        ModelInferResponse {
            model_name: self.model.clone(),
            model_version: "1".into(),
            id: self.id.clone(),
            outputs: vec![output("text_output", "BYTES")],
            raw_output_contents: vec![raw_bytes(text.as_bytes())],
            ..ModelInferResponse::default()
        }
    }

    /// The outputs the request asked for besides the text.
    fn asked(&self, response: &mut ModelInferResponse, reason: FinishReason, t: &Timeline) {
        if self.finish_reason {
            response.outputs.push(output("finish_reason", "BYTES"));
            response
                .raw_output_contents
                .push(raw_bytes(reason.as_str().as_bytes()));
        }
        if self.output_tokens {
            response.outputs.push(output("num_output_tokens", "UINT32"));
            response
                .raw_output_contents
                .push(t.completion_tokens.to_le_bytes().to_vec());
        }
    }
}

fn output(name: &str, datatype: &str) -> Tensor {
    Tensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: vec![1],
        ..Tensor::default()
    }
}

/// One BYTES element as raw contents: its length (4 bytes, little-endian), the bytes.
fn raw_bytes(bytes: &[u8]) -> Vec<u8> {
    let mut raw = (bytes.len() as u32).to_le_bytes().to_vec();
    raw.extend_from_slice(bytes);
    raw
}

fn in_stream(response: ModelInferResponse) -> Bytes {
    frame(&ModelStreamInferResponse {
        error_message: String::new(),
        infer_response: Some(response),
    })
}

impl Format for GrpcFormat {
    fn stream_type(&self) -> &'static str {
        "application/grpc"
    }

    fn token(&mut self, _index: u32, delta: &str) -> Option<Bytes> {
        Some(in_stream(self.response(delta)))
    }

    fn finish(&mut self, reason: FinishReason, timeline: &Timeline, truth: Value) -> Bytes {
        let mut last = self.response("");
        self.asked(&mut last, reason, timeline);
        last.parameters.insert(
            kserve::FINAL_RESPONSE.into(),
            InferParameter::of(Choice::Bool(true)),
        );
        last.parameters.insert(
            "redline".into(),
            InferParameter::of(Choice::String(truth.to_string())),
        );
        in_stream(last)
    }

    fn broken(&self) -> Bytes {
        stream_error(engine_gone().message)
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
        let mut response = self.response(&text);
        self.asked(&mut response, reason, timeline);
        let frames = [
            Ok::<_, Infallible>(Frame::data(frame(&response))),
            Ok(Frame::trailers(ok_trailers())),
        ];
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/grpc")
            .body(Body::new(http_body_util::StreamBody::new(
                futures_util::stream::iter(frames),
            )))
            .expect("static headers are valid")
    }

    fn trailers(&self) -> Option<axum::http::HeaderMap> {
        Some(ok_trailers())
    }
}
