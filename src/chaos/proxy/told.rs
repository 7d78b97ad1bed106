//! How the proxy tells what it injected: the fault header and W3C baggage on the
//! request and the answer, the fault log's entries, and the answers it makes itself
//! (an error in the upstream's dialect, an emptied search result).

use super::*;

pub(super) fn note(
    log: &FaultLog,
    id: &RequestId<'_>,
    rule: String,
    fault: &str,
    added_ms: Option<f64>,
) -> InjectedFault {
    let fault = InjectedFault {
        rule,
        fault: fault.to_owned(),
        added_ms,
    };
    log.note(id, fault.clone());
    fault
}

/// Tells the upstream, in W3C baggage, which rules fired on this request
/// (`redline.fault=rule`), so its own spans can be joined to the fault.
pub(super) fn add_fault_baggage(headers: &mut HeaderMap, noted: &[InjectedFault]) {
    if noted.is_empty() {
        return;
    }
    let rules: Vec<String> = noted.iter().map(|f| baggage_value(&f.rule)).collect();
    let entry = format!("redline.fault={}", rules.join("+"));
    let value = match headers.get("baggage").and_then(|v| v.to_str().ok()) {
        Some(existing) if !existing.is_empty() => format!("{existing},{entry}"),
        _ => entry,
    };
    if let Ok(value) = HeaderValue::try_from(value) {
        headers.insert("baggage", value);
    }
}

/// Text as a W3C baggage value: unreserved characters kept, the rest percent-encoded.
pub fn baggage_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// `rule=fault, …` for the response header.
pub(super) fn fault_header(noted: &[InjectedFault]) -> Option<HeaderValue> {
    if noted.is_empty() {
        return None;
    }
    let text = noted
        .iter()
        .map(|f| format!("{}={}", f.rule, f.fault))
        .collect::<Vec<_>>()
        .join(", ");
    HeaderValue::try_from(text).ok()
}

/// A `tools/list` response of at least `bytes`: made-up tools, each with a 4 KiB
/// description, as a server with a huge catalogue would list them.
fn oversized_tools(bytes: u64, id: &Value, rule: &str) -> String {
    let description = format!("padding injected by chaos rule `{rule}` ").repeat(4096 / 40);
    let mut body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":["#);
    let mut n = 0u64;
    while (body.len() as u64) < bytes {
        if n > 0 {
            body.push(',');
        }
        let tool = serde_json::json!({
            "name": format!("padding-{n}"),
            "description": description,
            "inputSchema": {"type": "object"},
        });
        body.push_str(&tool.to_string());
        n += 1;
    }
    body.push_str("]}}");
    body
}

/// The answer in the upstream's place: a gRPC status to a gRPC call, else an HTTP
/// status with a JSON error.
pub(super) fn fault_response(
    answer: StatusAnswer,
    rule: &str,
    noted: Vec<InjectedFault>,
    grpc: bool,
) -> Response<ProxyBody> {
    if grpc {
        let (code, message) = match answer {
            StatusAnswer::Abort(status, _) => (crate::grpc::code_of_http(status), None),
            StatusAnswer::Grpc(code, message) => (code, message),
            StatusAnswer::RateLimited(_) => (tonic::Code::ResourceExhausted, None),
            StatusAnswer::McpError { message, .. } => (tonic::Code::Internal, message),
            StatusAnswer::McpOversize { .. } => (tonic::Code::ResourceExhausted, None),
        };
        let message = message.unwrap_or_else(|| format!("injected by chaos rule `{rule}`"));
        let mut response = crate::grpc::trailers_only::<ProxyBody>(code, &message);
        if let Some(value) = fault_header(&noted) {
            response.headers_mut().insert(FAULT_HEADER, value);
        }
        return response;
    }
    let (status, body, retry_after) = match answer {
        StatusAnswer::Grpc(code, message) => {
            let status = crate::grpc::http_of_code(code);
            let message = message.unwrap_or_else(|| format!("injected by chaos rule `{rule}`"));
            (status, error_json(&message, "chaos_abort", status), None)
        }
        StatusAnswer::Abort(status, Some(body)) => (status, body, None),
        StatusAnswer::Abort(status, None) => (
            status,
            error_json(
                &format!("injected by chaos rule `{rule}`"),
                "chaos_abort",
                status,
            ),
            None,
        ),
        StatusAnswer::RateLimited(seconds) => (
            429,
            error_json(
                &format!("rate limited by chaos rule `{rule}`"),
                "rate_limit_exceeded",
                429,
            ),
            Some(seconds),
        ),
        StatusAnswer::McpError { code, message, id } => {
            let message = message.unwrap_or_else(|| format!("injected by chaos rule `{rule}`"));
            let error = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
            (200, error.to_string(), None)
        }
        StatusAnswer::McpOversize { bytes, id } => (200, oversized_tools(bytes, &id, rule), None),
    };
    let mut response = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(seconds) = retry_after {
        response = response.header(header::RETRY_AFTER, seconds);
    }
    if let Some(value) = fault_header(&noted) {
        response = response.header(FAULT_HEADER, value);
    }
    response
        .body(
            Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .expect("status and headers are valid")
}

/// The proxy's own failure (not an injected fault): to a gRPC call, the code its
/// status maps to; else in OpenAI's error shape.
pub(super) fn proxy_error(grpc: bool, status: StatusCode, message: &str) -> Response<ProxyBody> {
    if grpc {
        let code = match status {
            StatusCode::BAD_REQUEST => tonic::Code::InvalidArgument,
            status => crate::grpc::code_of_http(status.as_u16()),
        };
        let mut response = crate::grpc::trailers_only::<ProxyBody>(code, message);
        let headers = response.headers_mut();
        headers.insert("x-redline-proxy-error", HeaderValue::from_static("1"));
        return response;
    }
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-redline-proxy-error", "1")
        .body(
            Full::new(Bytes::from(error_json(
                message,
                "proxy_error",
                status.as_u16(),
            )))
            .map_err(|never| match never {})
            .boxed_unsync(),
        )
        .expect("status and headers are valid")
}

pub(super) fn error_json(message: &str, kind: &str, code: u16) -> String {
    serde_json::json!({"error": {"message": message, "type": kind, "code": code}}).to_string()
}

/// The JSON with the list at `path` emptied, if the body is JSON and holds a list
/// there.
pub(super) fn empty_list(body: &[u8], path: &[String]) -> Option<Bytes> {
    let mut json: Value = serde_json::from_slice(body).ok()?;
    let list = path
        .iter()
        .try_fold(&mut json, |value, key| value.get_mut(key.as_str()))?;
    list.as_array_mut()?.clear();
    serde_json::to_vec(&json).ok().map(Bytes::from)
}
