//! KServe v2's gRPC messages (package `inference`, `GRPCInferenceService`, as NVIDIA
//! Triton serves them), written from the published `grpc_service.proto`: inference
//! (`ModelInfer`, and the decoupled `ModelStreamInfer` an LLM streams its tokens on),
//! and the health and metadata calls a client makes first.

use std::collections::HashMap;

/// `ModelInfer`: one request, one response.
pub const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
/// `ModelStreamInfer`: a stream of requests, a stream of responses (decoupled models
/// send one per token).
pub const MODEL_STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";
pub const SERVER_LIVE: &str = "/inference.GRPCInferenceService/ServerLive";
pub const SERVER_READY: &str = "/inference.GRPCInferenceService/ServerReady";
pub const MODEL_READY: &str = "/inference.GRPCInferenceService/ModelReady";
pub const SERVER_METADATA: &str = "/inference.GRPCInferenceService/ServerMetadata";
pub const MODEL_METADATA: &str = "/inference.GRPCInferenceService/ModelMetadata";

/// The parameter Triton sets on a decoupled model's last response.
pub const FINAL_RESPONSE: &str = "triton_final_response";

#[derive(Clone, PartialEq, prost::Message)]
pub struct InferParameter {
    #[prost(oneof = "infer_parameter::Choice", tags = "1, 2, 3, 4, 5")]
    pub choice: Option<infer_parameter::Choice>,
}

pub mod infer_parameter {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Choice {
        #[prost(bool, tag = "1")]
        Bool(bool),
        #[prost(int64, tag = "2")]
        Int64(i64),
        #[prost(string, tag = "3")]
        String(String),
        #[prost(double, tag = "4")]
        Double(f64),
        #[prost(uint64, tag = "5")]
        Uint64(u64),
    }
}

impl InferParameter {
    pub fn of(choice: infer_parameter::Choice) -> InferParameter {
        InferParameter {
            choice: Some(choice),
        }
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InferTensorContents {
    #[prost(bool, repeated, tag = "1")]
    pub bool_contents: Vec<bool>,
    #[prost(int32, repeated, tag = "2")]
    pub int_contents: Vec<i32>,
    #[prost(int64, repeated, tag = "3")]
    pub int64_contents: Vec<i64>,
    #[prost(uint32, repeated, tag = "4")]
    pub uint_contents: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    pub uint64_contents: Vec<u64>,
    #[prost(float, repeated, tag = "6")]
    pub fp32_contents: Vec<f32>,
    #[prost(double, repeated, tag = "7")]
    pub fp64_contents: Vec<f64>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub bytes_contents: Vec<Vec<u8>>,
}

/// An input or output tensor (`InferInputTensor` and `InferOutputTensor` have the
/// same fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Tensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, optional, tag = "5")]
    pub contents: Option<InferTensorContents>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestedOutput {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferRequest {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<Tensor>,
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<RequestedOutput>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub raw_input_contents: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferResponse {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<Tensor>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub raw_output_contents: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelStreamInferResponse {
    #[prost(string, tag = "1")]
    pub error_message: String,
    #[prost(message, optional, tag = "2")]
    pub infer_response: Option<ModelInferResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `ServerLiveResponse`, `ServerReadyResponse` and `ModelReadyResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Flag {
    #[prost(bool, tag = "1")]
    pub value: bool,
}

/// `ModelReadyRequest` and `ModelMetadataRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelRef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerMetadataResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(string, repeated, tag = "3")]
    pub extensions: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelMetadataResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "2")]
    pub versions: Vec<String>,
    #[prost(string, tag = "3")]
    pub platform: String,
    #[prost(message, repeated, tag = "4")]
    pub inputs: Vec<TensorMetadata>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<TensorMetadata>,
}

/// The elements of a BYTES tensor: its `bytes_contents`, or else its raw contents
/// (each element a 4-byte little-endian length, then the bytes); `None` when the raw
/// bytes do not split that way.
pub fn bytes_elements<'a>(tensor: &'a Tensor, raw: Option<&'a [u8]>) -> Option<Vec<&'a [u8]>> {
    if let Some(contents) = &tensor.contents {
        if !contents.bytes_contents.is_empty() {
            return Some(contents.bytes_contents.iter().map(Vec::as_slice).collect());
        }
    }
    let mut raw = raw?;
    let mut out = Vec::new();
    while !raw.is_empty() {
        let len = u32::from_le_bytes(raw.get(..4)?.try_into().ok()?) as usize;
        out.push(raw.get(4..4 + len)?);
        raw = &raw[4 + len..];
    }
    Some(out)
}

/// A BYTES tensor of one element.
pub fn bytes_tensor(name: &str, value: Vec<u8>) -> Tensor {
    Tensor {
        name: name.to_owned(),
        datatype: "BYTES".into(),
        shape: vec![1],
        contents: Some(InferTensorContents {
            bytes_contents: vec![value],
            ..InferTensorContents::default()
        }),
        ..Tensor::default()
    }
}

/// A one-element tensor of a number or a flag.
pub fn scalar_tensor(name: &str, datatype: &str, contents: InferTensorContents) -> Tensor {
    Tensor {
        name: name.to_owned(),
        datatype: datatype.into(),
        shape: vec![1],
        contents: Some(contents),
        ..Tensor::default()
    }
}

impl ModelInferRequest {
    /// The named input and its raw contents, if any (raw contents are in input order).
    pub fn input(&self, name: &str) -> Option<(&Tensor, Option<&[u8]>)> {
        let i = self.inputs.iter().position(|t| t.name == name)?;
        Some((
            &self.inputs[i],
            self.raw_input_contents.get(i).map(Vec::as_slice),
        ))
    }
}

impl ModelInferResponse {
    /// The first element of the named BYTES output, as text.
    pub fn text_output(&self, name: &str) -> Option<String> {
        let i = self.outputs.iter().position(|t| t.name == name)?;
        let raw = self.raw_output_contents.get(i).map(Vec::as_slice);
        let elements = bytes_elements(&self.outputs[i], raw)?;
        Some(String::from_utf8_lossy(elements.first()?).into_owned())
    }
}
