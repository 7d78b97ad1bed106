//! KServe v2 over gRPC (NVIDIA Triton's `GRPCInferenceService`), as an LLM API of the
//! one reader: the request a call sends, and how each response message reads as a
//! `Piece`. Triton's LLM backends take different inputs — TensorRT-LLM's ensemble a
//! `max_tokens` tensor, the vLLM backend a `sampling_parameters` JSON tensor (and no
//! `max_tokens` input, which Triton would refuse) — so a spec's `body:` that names
//! `sampling_parameters` chooses the vLLM backend's inputs, else TensorRT-LLM's; each
//! other `body:` field becomes an input tensor of its JSON type.

use std::borrow::Cow;

use bytes::Bytes;
use prost::Message;
use serde_json::{Map, Value};

use super::piece::Piece;
use crate::grpc::kserve::{
    self, InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse,
    ModelStreamInferResponse, Tensor, bytes_tensor, infer_parameter::Choice, scalar_tensor,
};
use crate::record::ServerTruth;

/// The framed request message of one call.
pub(super) fn request(
    model: &str,
    text: &str,
    max_tokens: Option<u32>,
    stream: bool,
    extra: &Map<String, Value>,
) -> Bytes {
    let mut inputs = vec![bytes_tensor("text_input", text.as_bytes().to_vec())];
    let flag = |name: &str, on: bool| {
        let contents = InferTensorContents {
            bool_contents: vec![on],
            ..InferTensorContents::default()
        };
        scalar_tensor(name, "BOOL", contents)
    };
    inputs.push(flag("stream", stream));
    let mut extra = extra.clone();
    match extra.get_mut("sampling_parameters") {
        Some(Value::Object(sampling)) => {
            // The vLLM backend: its own inputs for what TensorRT-LLM does not have.
            if let Some(max) = max_tokens {
                sampling.entry("max_tokens").or_insert(max.into());
            }
            for name in ["exclude_input_in_output", "return_finish_reason"] {
                if !extra.contains_key(name) {
                    inputs.push(flag(name, true));
                }
            }
        }
        _ => {
            if let Some(max) = max_tokens {
                extra.entry("max_tokens").or_insert(max.into());
            }
        }
    }
    inputs.extend(
        extra
            .iter()
            .filter_map(|(name, value)| tensor_of(name, value)),
    );
    // A decoupled model's last response comes empty and flagged: the end marker. The
    // finish reason and count, where the backend reads request parameters, let the run
    // settle its counts; a backend that does not ignores them.
    let parameters = [
        "triton_enable_empty_final_response",
        "return_finish_reason",
        "return_num_output_tokens",
    ]
    .map(|name| (name.to_owned(), InferParameter::of(Choice::Bool(true))))
    .into();
    crate::grpc::frame(&ModelInferRequest {
        model_name: model.to_owned(),
        parameters,
        inputs,
        ..ModelInferRequest::default()
    })
}

/// A `body:` field as an input tensor: a flag BOOL, an integer INT32 (INT64 past its
/// range), a number FP32, text and JSON BYTES.
fn tensor_of(name: &str, value: &Value) -> Option<Tensor> {
    let contents = |f: &dyn Fn(&mut InferTensorContents)| {
        let mut c = InferTensorContents::default();
        f(&mut c);
        c
    };
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => scalar_tensor(name, "BOOL", contents(&|c| c.bool_contents = vec![*b])),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) if i32::try_from(i).is_ok() => scalar_tensor(
                name,
                "INT32",
                contents(&|c| c.int_contents = vec![i as i32]),
            ),
            (Some(i), _) => scalar_tensor(name, "INT64", contents(&|c| c.int64_contents = vec![i])),
            (None, Some(x)) => scalar_tensor(
                name,
                "FP32",
                contents(&|c| c.fp32_contents = vec![x as f32]),
            ),
            _ => return None,
        },
        Value::String(s) => bytes_tensor(name, s.as_bytes().to_vec()),
        other => bytes_tensor(name, other.to_string().into_bytes()),
    })
}

/// One response message as a [`Piece`]: a `ModelStreamInferResponse` of a stream, or
/// the `ModelInferResponse` of a whole answer.
pub(super) fn piece(data: &[u8], streamed: bool) -> Result<Piece<'static>, prost::DecodeError> {
    let response = if streamed {
        let message = ModelStreamInferResponse::decode(data)?;
        if !message.error_message.is_empty() {
            return Ok(Piece {
                error: Some(message.error_message),
                ..Piece::default()
            });
        }
        message.infer_response.unwrap_or_default()
    } else {
        ModelInferResponse::decode(data)?
    };
    let flag = |name: &str| {
        matches!(
            response
                .parameters
                .get(name)
                .and_then(|p| p.choice.as_ref()),
            Some(Choice::Bool(true))
        )
    };
    let truth = match response
        .parameters
        .get("redline")
        .and_then(|p| p.choice.as_ref())
    {
        Some(Choice::String(json)) => serde_json::from_str::<ServerTruth>(json).ok(),
        _ => None,
    };
    Ok(Piece {
        answer: response
            .text_output("text_output")
            .filter(|t| !t.is_empty())
            .map(Cow::Owned),
        finish_reason: response
            .text_output("finish_reason")
            .filter(|t| !t.is_empty())
            .map(Cow::Owned),
        completion_tokens: output_number(&response, "num_output_tokens"),
        truth,
        done: flag(kserve::FINAL_RESPONSE),
        ..Piece::default()
    })
}

/// A UINT32/INT32 output's first element.
fn output_number(response: &ModelInferResponse, name: &str) -> Option<u32> {
    let i = response.outputs.iter().position(|t| t.name == name)?;
    if let Some(c) = &response.outputs[i].contents {
        if let Some(&n) = c.uint_contents.first() {
            return Some(n);
        }
    }
    let raw = response.raw_output_contents.get(i)?;
    Some(u32::from_le_bytes(raw.get(..4)?.try_into().ok()?))
}
