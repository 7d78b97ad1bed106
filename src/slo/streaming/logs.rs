//! Requests known from a JSON-lines log (an access log, a gateway's request log): a
//! timestamp, latencies and a status per line, read into the same windows as a run's
//! records.

use serde_json::Value;

use super::series::Quantity;

/// Which fields of a line hold what.
#[derive(Debug, Clone, PartialEq)]
pub struct LogFields {
    /// When the request ended: RFC 3339, or a Unix time in s, ms, µs or ns (told apart
    /// by size). A dotted name reads a nested field (`request.end`).
    pub time: String,
    /// Each quantity and its field, e.g. `e2e` from `duration_ms`.
    pub values: Vec<(Quantity, String)>,
    /// Microseconds per unit of the value fields (1,000 for milliseconds).
    pub unit_us: f64,
    /// A status field: an HTTP status of 500 or more, or `error`, `failed`, `timeout`,
    /// marks a failed request.
    pub status: Option<String>,
}

/// One line's request.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSample {
    /// When it ended, µs since the Unix epoch.
    pub done_unix_us: i64,
    pub failed: bool,
    /// Each quantity the line has, in µs.
    pub values: Vec<(Quantity, f64)>,
}

/// Why a line was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("not a JSON object")]
    NotJson,
    #[error("no `{0}` field")]
    NoTime(String),
    #[error("`{0}` is not a time (RFC 3339 or a Unix timestamp)")]
    BadTime(String),
}

impl LogFields {
    pub fn read(&self, line: &str) -> Result<LogSample, LineError> {
        let value: Value = serde_json::from_str(line).map_err(|_| LineError::NotJson)?;
        if !value.is_object() {
            return Err(LineError::NotJson);
        }
        let time = field(&value, &self.time).ok_or_else(|| LineError::NoTime(self.time.clone()))?;
        let done_unix_us = unix_us(time).ok_or_else(|| LineError::BadTime(time.to_string()))?;
        let failed = self
            .status
            .as_ref()
            .and_then(|name| field(&value, name))
            .is_some_and(failed);
        let values = self
            .values
            .iter()
            .filter_map(|(q, name)| {
                let v = number(field(&value, name)?)?;
                (v >= 0.0).then_some((*q, v * self.unit_us))
            })
            .collect();
        Ok(LogSample {
            done_unix_us,
            failed,
            values,
        })
    }
}

/// A field by a dotted name.
fn field<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    name.split('.').try_fold(value, |v, key| v.get(key))
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|v: &f64| v.is_finite())
}

/// RFC 3339, or a Unix time whose size says its unit: seconds until the year 5138,
/// then milliseconds, microseconds, nanoseconds.
fn unix_us(value: &Value) -> Option<i64> {
    if let Value::String(s) = value
        && let Ok(t) =
            time::OffsetDateTime::parse(s.trim(), &time::format_description::well_known::Rfc3339)
    {
        return i64::try_from(t.unix_timestamp_nanos() / 1_000).ok();
    }
    let n = number(value)?;
    let us = match n.abs() {
        n if n < 1e11 => n * 1e6,
        n if n < 1e14 => n * 1e3,
        n if n < 1e17 => n,
        _ => n / 1e3,
    };
    Some(us.round() as i64)
}

fn failed(status: &Value) -> bool {
    match status {
        Value::Number(n) => n.as_f64().is_some_and(|s| s >= 500.0),
        Value::String(s) => match s.trim().parse::<f64>() {
            Ok(code) => code >= 500.0,
            Err(_) => matches!(
                s.trim().to_ascii_lowercase().as_str(),
                "error" | "failed" | "failure" | "timeout"
            ),
        },
        Value::Bool(ok) => !ok,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> LogFields {
        LogFields {
            time: "ts".into(),
            values: vec![
                (Quantity::E2e, "latency_ms".into()),
                (Quantity::Ttft, "upstream.ttft_ms".into()),
            ],
            unit_us: 1_000.0,
            status: Some("status".into()),
        }
    }

    #[test]
    fn times_in_every_unit_and_rfc3339_read_as_the_same_instant() {
        let at = 1_764_650_000_250_000_i64;
        for ts in [
            "\"2025-12-02T04:33:20.25Z\"",
            "\"2025-12-02T05:33:20.25+01:00\"",
            "1764650000.25",
            "1764650000250",
            "1764650000250000",
            "1764650000250000000",
        ] {
            let line = format!(r#"{{"ts": {ts}, "latency_ms": 12.5, "status": 200}}"#);
            let s = fields().read(&line).unwrap();
            assert_eq!(s.done_unix_us, at, "{ts}");
            assert_eq!(s.values, [(Quantity::E2e, 12_500.0)]);
            assert!(!s.failed);
        }
    }

    #[test]
    fn nested_fields_statuses_and_bad_lines() {
        let s = fields()
            .read(r#"{"ts": 1.0, "latency_ms": "3", "upstream": {"ttft_ms": 1}, "status": "503"}"#)
            .unwrap();
        assert!(s.failed);
        assert_eq!(
            s.values,
            [(Quantity::E2e, 3_000.0), (Quantity::Ttft, 1_000.0)]
        );
        for (status, failed) in [("\"timeout\"", true), ("false", true), ("404", false)] {
            let line = format!(r#"{{"ts": 1, "status": {status}}}"#);
            assert_eq!(fields().read(&line).unwrap().failed, failed, "{status}");
        }
        assert_eq!(fields().read("GET / 200"), Err(LineError::NotJson));
        assert_eq!(fields().read("[1]"), Err(LineError::NotJson));
        assert_eq!(
            fields().read(r#"{"latency_ms": 1}"#),
            Err(LineError::NoTime("ts".into()))
        );
        assert!(matches!(
            fields().read(r#"{"ts": "yesterday"}"#),
            Err(LineError::BadTime(_))
        ));
    }
}
