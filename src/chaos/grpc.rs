//! gRPC calls through the proxy: the proxy's own answers to them (an injected abort,
//! a rate limit, its failure) are trailers-only responses (HTTP 200, `grpc-status` and
//! `grpc-message` in the head, [`crate::grpc::trailers_only`]), as a gRPC server gives
//! them, so the caller's client reports the status rather than a protocol error.

use hyper::header;
use hyper::http::request::Parts;

/// Whether the request is a gRPC call (by its `content-type`).
pub fn is_call(head: &Parts) -> bool {
    head.headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|c| crate::grpc::is_grpc(c.as_bytes()))
}
