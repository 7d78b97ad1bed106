//! The recording format, version 1: a folder holding `manifest.json`,
//! `exchanges.jsonl` (one exchange a line, written as each answer ends) and
//! `bodies/` (bodies over the inline limit, one file each). `docs/recording.md`
//! describes every field. Secrets never reach it: the headers named in the manifest's
//! `redacted_headers` are stored as `[redacted]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};

/// The `format` every manifest names.
pub const FORMAT: &str = "redline-recording";
/// The version this redline writes and reads.
pub const VERSION: u32 = 1;
/// What a redacted header's value is replaced with.
pub const REDACTED: &str = "[redacted]";
/// Headers always redacted: credentials and session state.
pub const ALWAYS_REDACTED: [&str; 7] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "openai-api-key",
];

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// When recording began (Unix milliseconds).
    pub started_unix_ms: u64,
    /// When it ended; absent while recording (or when the recorder was killed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_unix_ms: Option<u64>,
    /// Where the requests went.
    pub upstream: String,
    /// Where copies went, when mirrored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<String>,
    /// Header names (lower case) whose values were replaced by `[redacted]`.
    pub redacted_headers: Vec<String>,
    /// Bodies larger than this many bytes are stored in `bodies/`.
    pub inline_body_limit: usize,
    /// Exchanges written, when the recording ended cleanly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchanges: Option<u64>,
}

/// One line of `exchanges.jsonl`: a request and the answer it got, from the primary
/// (`role: primary`) or from the mirror's shadow (`role: shadow`, same `seq`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exchange {
    pub seq: u64,
    pub role: Role,
    /// The W3C trace ID the request carried (or was given, when it carried none):
    /// what a replay aligns answers by.
    pub trace_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baggage: Option<String>,
    /// When the request arrived, microseconds since the recording began.
    pub at_us: u64,
    pub request: RecordedRequest,
    pub response: RecordedResponse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Primary,
    Shadow,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedRequest {
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    /// In the order sent, names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedResponse {
    /// None when no answer came (`error` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body, for an answer that is not an event stream.
    #[serde(default, skip_serializing_if = "Body::is_empty")]
    pub body: Body,
    /// An event stream's events, each with when it came.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    /// Microseconds from the request's arrival to the answer's head, first byte and end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_us: Option<u64>,
    /// Why the answer broke or never came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One server-sent event: its `data`, and microseconds since the request arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub at_us: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    pub data: String,
}

/// A body: JSON kept as JSON (readable, diffable), other UTF-8 as text, anything else
/// as base64, and a large one as a file beside the recording.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Body {
    #[default]
    Empty,
    Json(serde_json::Value),
    Text(String),
    Base64(String),
    /// A path relative to the recording's folder, and the body's length.
    File {
        path: String,
        bytes: u64,
    },
}

impl Body {
    pub fn is_empty(&self) -> bool {
        matches!(self, Body::Empty)
    }

    /// How `bytes` are kept: inline when small enough, else written to `file` (whose
    /// name relative to the recording is `relative`).
    pub fn store(bytes: &[u8], limit: usize, file: &Path, relative: &str) -> std::io::Result<Body> {
        if bytes.is_empty() {
            return Ok(Body::Empty);
        }
        if bytes.len() > limit {
            std::fs::write(file, bytes)?;
            return Ok(Body::File {
                path: relative.to_owned(),
                bytes: bytes.len() as u64,
            });
        }
        Ok(Body::inline(bytes))
    }

    pub fn inline(bytes: &[u8]) -> Body {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) {
            // Kept as JSON only when it reads back to the same bytes' meaning; the
            // bytes themselves may differ in spacing, which no server depends on.
            return Body::Json(value);
        }
        match std::str::from_utf8(bytes) {
            Ok(text) => Body::Text(text.to_owned()),
            Err(_) => Body::Base64(base64::engine::general_purpose::STANDARD.encode(bytes)),
        }
    }

    /// The bytes to send again.
    pub fn bytes(&self, dir: &Path) -> Result<Vec<u8>, String> {
        match self {
            Body::Empty => Ok(Vec::new()),
            Body::Json(value) => Ok(value.to_string().into_bytes()),
            Body::Text(text) => Ok(text.as_bytes().to_vec()),
            Body::Base64(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| format!("a base64 body does not decode: {e}")),
            Body::File { path, bytes } => {
                let full = dir.join(path);
                let read = std::fs::read(&full)
                    .map_err(|e| format!("cannot read {}: {e}", full.display()))?;
                if read.len() as u64 != *bytes {
                    return Err(format!(
                        "{} holds {} bytes, the recording says {bytes}",
                        full.display(),
                        read.len()
                    ));
                }
                Ok(read)
            }
        }
    }
}

/// A recording read back: its primary exchanges in arrival order, each with the
/// shadow's answer when it was mirrored, and what could not be read.
#[derive(Debug)]
pub struct Recording {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub exchanges: Vec<Exchange>,
    pub shadows: BTreeMap<u64, Exchange>,
    /// Lines skipped, each with its file and line number and why.
    pub skipped: Vec<String>,
}

impl Recording {
    /// Reads a recording. A wrong format or version is an error; a line that does not
    /// parse (a recorder killed mid-line) is skipped and named, the rest read.
    pub fn open(dir: &Path) -> Result<Recording, String> {
        let manifest = read_manifest(dir)?;
        let path = dir.join("exchanges.jsonl");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut exchanges = Vec::new();
        let mut shadows = BTreeMap::new();
        let mut skipped = Vec::new();
        let lines = text.split_inclusive('\n').enumerate();
        for (i, line) in lines.filter(|(_, l)| !l.trim().is_empty()) {
            match serde_json::from_str::<Exchange>(line) {
                Ok(exchange) if exchange.role == Role::Shadow => {
                    shadows.insert(exchange.seq, exchange);
                }
                Ok(exchange) => exchanges.push(exchange),
                Err(error) => {
                    let why = if line.ends_with('\n') {
                        error.to_string()
                    } else {
                        "the line is cut short (was the recorder killed while writing it?)"
                            .to_owned()
                    };
                    skipped.push(format!("{}:{}: skipped: {why}", path.display(), i + 1));
                }
            }
        }
        exchanges.sort_by_key(|e| (e.at_us, e.seq));
        Ok(Recording {
            dir: dir.to_owned(),
            manifest,
            exchanges,
            shadows,
            skipped,
        })
    }
}

fn read_manifest(dir: &Path) -> Result<Manifest, String> {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "cannot read {}: {e} (is {} a recording made by `redline record`?)",
            path.display(),
            dir.display()
        )
    })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let format = value.get("format").and_then(|f| f.as_str());
    if format != Some(FORMAT) {
        return Err(format!(
            "{}: `format` is {format:?}, not \"{FORMAT}\"",
            path.display()
        ));
    }
    let version = value.get("version").and_then(|v| v.as_u64());
    if version != Some(u64::from(VERSION)) {
        return Err(format!(
            "{}: recording format version {}, and this redline reads version {VERSION}: replay it with the redline that recorded it, or record it again",
            path.display(),
            version.map_or("(none)".to_owned(), |v| v.to_string())
        ));
    }
    serde_json::from_value(value).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_keep_json_text_and_bytes() {
        let dir = Path::new("/nonexistent");
        for raw in [&br#"{"a":[1,2]}"#[..], b"plain words", &[0xff, 0x00, 0x10]] {
            let body = Body::inline(raw);
            let back = body.bytes(dir).unwrap();
            match body {
                Body::Json(_) => assert_eq!(
                    serde_json::from_slice::<serde_json::Value>(&back).unwrap(),
                    serde_json::from_slice::<serde_json::Value>(raw).unwrap()
                ),
                _ => assert_eq!(back, raw),
            }
        }
    }
}
