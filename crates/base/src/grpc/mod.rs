//! gRPC on the wire: the services' messages (Qdrant's, written from its published
//! protos), the length-prefixed message framing, and the one rewrite the chaos proxy
//! makes inside a message (a repeated field dropped: an empty result). Calls and
//! servers are the client's and the simulator's; tonic carries the framing rules and
//! statuses both sides share.

pub mod kserve;
pub mod qdrant;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

/// `application/grpc`, and its `+proto` spelling.
pub fn is_grpc(content_type: &[u8]) -> bool {
    content_type.starts_with(b"application/grpc")
}

/// One message as gRPC frames it: an uncompressed flag, the length (big-endian u32),
/// the protobuf bytes.
pub fn frame(message: &impl Message) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.encoded_len());
    out.put_u8(0);
    out.put_u32(message.encoded_len() as u32);
    message
        .encode(&mut out)
        .expect("the buffer was sized for the message");
    out.freeze()
}

/// The messages of a whole gRPC body, or why it is not one: a compressed message
/// (redline never offers compression), or bytes left over.
pub fn messages(mut body: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            return Err("a message prefix is cut short");
        }
        if body[0] != 0 {
            return Err("a message is compressed");
        }
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let rest = &body[5..];
        if rest.len() < len {
            return Err("a message is cut short");
        }
        out.push(&rest[..len]);
        body = &rest[len..];
    }
    Ok(out)
}

/// The protobuf message with every top-level occurrence of field `tag` dropped (a
/// repeated field emptied, a singular one reset to its default), the rest byte for
/// byte; `None` when the bytes are not a protobuf message.
pub fn without_field(message: &[u8], tag: u32) -> Option<Vec<u8>> {
    use prost::encoding::{DecodeContext, decode_key, skip_field};
    let mut kept = Vec::with_capacity(message.len());
    let mut rest = message;
    while rest.has_remaining() {
        let start = message.len() - rest.remaining();
        let (field, wire_type) = decode_key(&mut rest).ok()?;
        skip_field(wire_type, field, &mut rest, DecodeContext::default()).ok()?;
        let end = message.len() - rest.remaining();
        if field != tag {
            kept.extend_from_slice(&message[start..end]);
        }
    }
    Some(kept)
}

/// A whole gRPC body with field `tag` dropped from each message, reframed; `None`
/// when it is not a body of uncompressed protobuf messages.
pub fn body_without_field(body: &[u8], tag: u32) -> Option<Bytes> {
    let mut out = BytesMut::with_capacity(body.len());
    for message in messages(body).ok()? {
        let kept = without_field(message, tag)?;
        out.put_u8(0);
        out.put_u32(kept.len() as u32);
        out.extend_from_slice(&kept);
    }
    Some(out.freeze())
}

/// A trailers-only answer (HTTP 200, the status in the head), as a gRPC server
/// refuses a call before any message.
pub fn trailers_only<B: Default>(code: tonic::Code, message: &str) -> hyper::Response<B> {
    use hyper::header::{CONTENT_TYPE, HeaderValue};
    let mut response = hyper::Response::new(B::default());
    let headers = response.headers_mut();
    *headers = status_headers(code, message);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// `grpc-status` and `grpc-message`: a call's end, in its trailers (or head).
pub fn status_headers(code: tonic::Code, message: &str) -> hyper::HeaderMap {
    let mut headers = hyper::HeaderMap::new();
    // `add_header` percent-encodes the message; it fails only on a message it cannot.
    if tonic::Status::new(code, message)
        .add_header(&mut headers)
        .is_err()
    {
        let _ = tonic::Status::new(code, "").add_header(&mut headers);
    }
    headers
}

/// The trailers of a call that ended well.
pub fn ok_trailers() -> hyper::HeaderMap {
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
    trailers
}

/// A status code's name as records and reports spell outcome kinds (`unavailable`,
/// `resource_exhausted`).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The code a gRPC client reads from an HTTP status that is not 200 (gRPC's
/// "HTTP to gRPC status code mapping").
pub fn code_of_http(status: u16) -> tonic::Code {
    use tonic::Code;
    match status {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// The HTTP status a gateway answers a plain HTTP caller with for a code (as
/// grpc-gateway maps them).
pub fn http_of_code(code: tonic::Code) -> u16 {
    use tonic::Code;
    match code {
        Code::Ok => 200,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
        Code::Unauthenticated => 401,
        Code::PermissionDenied => 403,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::ResourceExhausted => 429,
        Code::Cancelled => 499,
        Code::Unimplemented => 501,
        Code::Unavailable => 503,
        Code::DeadlineExceeded => 504,
        Code::Unknown | Code::Internal | Code::DataLoss => 500,
    }
}

/// A code from its number or its name (`14`, `unavailable`, `UNAVAILABLE`).
pub fn code_from(text: &str) -> Option<tonic::Code> {
    if let Ok(n) = text.parse::<i32>() {
        return (0..=16).contains(&n).then(|| tonic::Code::from_i32(n));
    }
    (0..=16)
        .map(tonic::Code::from_i32)
        .find(|&code| code_name(code).eq_ignore_ascii_case(text))
}

#[cfg(test)]
mod tests {
    use super::qdrant::{PointId, PointsResponse, ScoredPoint};
    use super::*;

    fn answer(points: u64) -> PointsResponse {
        PointsResponse {
            result: (0..points)
                .map(|i| ScoredPoint {
                    id: Some(PointId::num(i)),
                    score: 0.5,
                    ..ScoredPoint::default()
                })
                .collect(),
            time: 0.25,
        }
    }

    #[test]
    fn dropping_the_result_field_empties_the_answer_and_keeps_the_rest() {
        let body = frame(&answer(3));
        let emptied = body_without_field(&body, qdrant::RESULT_FIELD).unwrap();
        let messages = messages(&emptied).unwrap();
        assert_eq!(messages.len(), 1);
        let decoded = PointsResponse::decode(messages[0]).unwrap();
        assert!(decoded.result.is_empty());
        assert_eq!(decoded.time, 0.25);
        assert_eq!(decoded, answer(0));
    }

    #[test]
    fn broken_bodies_are_refused_not_guessed() {
        let body = frame(&answer(2));
        assert_eq!(
            messages(&body[..body.len() - 1]),
            Err("a message is cut short")
        );
        assert_eq!(messages(&body[..3]), Err("a message prefix is cut short"));
        let mut compressed = body.to_vec();
        compressed[0] = 1;
        assert_eq!(messages(&compressed), Err("a message is compressed"));
        // A field header with a length past the end.
        assert_eq!(without_field(&[0x0a, 0x7f, 1], 1), None);
        assert!(body_without_field(b"\0\0\0\0\x03\x0a\x7f\x01", 1).is_none());
    }

    #[test]
    fn codes_read_by_number_or_name() {
        assert_eq!(code_from("14"), Some(tonic::Code::Unavailable));
        assert_eq!(
            code_from("RESOURCE_EXHAUSTED"),
            Some(tonic::Code::ResourceExhausted)
        );
        assert_eq!(code_from("unavailable"), Some(tonic::Code::Unavailable));
        assert_eq!(code_from("17"), None);
        assert_eq!(code_from("teapot"), None);
        for n in 0..=16 {
            let code = tonic::Code::from_i32(n);
            assert_eq!(code_from(code_name(code)), Some(code));
        }
    }
}
