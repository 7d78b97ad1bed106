//! The proxy's own answers to gRPC calls: an injected abort, a rate limit or the
//! proxy's failure is a trailers-only response (HTTP 200, `grpc-status` and
//! `grpc-message` in the head), as a gRPC server gives them, so the caller's client
//! reports the status rather than a protocol error.

use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use tonic::Code;

use super::proxy::ProxyBody;

/// Whether the request is a gRPC call (by its `content-type`).
pub fn is_call(head: &Parts) -> bool {
    head.headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|c| crate::grpc::is_grpc(c.as_bytes()))
}

/// A trailers-only answer with this status.
pub fn trailers_only(code: Code, message: &str) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::default());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    // `add_header` percent-encodes the message; it fails only on a message it cannot.
    if tonic::Status::new(code, message)
        .add_header(headers)
        .is_err()
    {
        let _ = tonic::Status::new(code, "").add_header(headers);
    }
    response
}
