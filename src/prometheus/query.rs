//! Range queries over Prometheus's HTTP API (`/api/v1/query_range`), which
//! VictoriaMetrics serves as well: what `redline watch --prometheus` reads.

use std::collections::BTreeMap;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::Uri;
use hyper::body::Bytes;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;

use crate::client::HttpClient;

/// Prometheus refuses a range of more than 11,000 points per series.
const MAX_POINTS: f64 = 10_000.0;
/// A query's answer is the server's to size: past this it is refused, not read.
const MAX_BODY: usize = 64 << 20;
const TIMEOUT: Duration = Duration::from_secs(30);

/// One series of a range query's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    /// (unix seconds, value); points whose value is not a finite number (NaN where a
    /// window had no requests, ±Inf) are left out.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// `{step="retrieve"}`, or `all` for a series without labels.
    pub fn group(&self) -> String {
        if self.labels.is_empty() {
            return "all".into();
        }
        let pairs: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        format!("{{{}}}", pairs.join(","))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0} is not an http(s) URL")]
    Url(String),
    #[error("cannot reach {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("{url} answered {status}: {message}")]
    Refused {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url} answered something that is not a query result: {message}")]
    Unreadable { url: String, message: String },
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Matrix>,
}

#[derive(Deserialize)]
struct Matrix {
    metric: BTreeMap<String, String>,
    values: Vec<(f64, String)>,
}

/// A PromQL expression, where to ask it and how often to evaluate it.
#[derive(Debug, Clone, Copy)]
pub struct Range<'a> {
    /// The API's base URL, `http://127.0.0.1:9090`.
    pub base: &'a str,
    pub query: &'a str,
    pub step_s: f64,
}

/// The query evaluated every step from `start_s` to `end_s` (unix seconds), in
/// pieces the server accepts; the series of every piece joined by their labels.
pub async fn range(
    http: &HttpClient,
    q: Range<'_>,
    (start_s, end_s): (f64, f64),
) -> Result<Vec<Series>, QueryError> {
    let mut joined: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
    let mut from = start_s;
    while from <= end_s {
        let to = (from + q.step_s * MAX_POINTS).min(end_s);
        for series in piece(http, q, (from, to)).await? {
            joined
                .entry(series.labels)
                .or_default()
                .extend(series.points);
        }
        from = to + q.step_s;
    }
    Ok(joined
        .into_iter()
        .map(|(labels, points)| Series { labels, points })
        .collect())
}

async fn piece(
    http: &HttpClient,
    q: Range<'_>,
    (start_s, end_s): (f64, f64),
) -> Result<Vec<Series>, QueryError> {
    let base = q.base;
    let url = format!(
        "{}/api/v1/query_range?query={}&start={start_s:.3}&end={end_s:.3}&step={}",
        base.trim_end_matches('/'),
        utf8_percent_encode(q.query, NON_ALPHANUMERIC),
        q.step_s
    );
    let uri: Uri = url.parse().map_err(|_| QueryError::Url(base.to_owned()))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(QueryError::Url(base.to_owned()));
    }
    let unreachable = |message: String| QueryError::Unreachable {
        url: base.to_owned(),
        message,
    };
    let request = hyper::Request::get(uri)
        .body(Full::new(Bytes::new()))
        .map_err(|e| unreachable(e.to_string()))?;
    let response = tokio::time::timeout(TIMEOUT, crate::client::send(http, request))
        .await
        .map_err(|_| unreachable(format!("no answer in {}s", TIMEOUT.as_secs())))?
        .map_err(|e| unreachable(e.to_string()))?;
    let status = response.status().as_u16();
    let body = tokio::time::timeout(
        TIMEOUT,
        Limited::new(response.into_body(), MAX_BODY).collect(),
    )
    .await
    .map_err(|_| unreachable("the answer did not finish in time".into()))?
    .map_err(|e| unreachable(format!("reading the answer: {e}")))?
    .to_bytes();
    parse(base, status, &body)
}

/// The series of one answer; a Prometheus error (`bad_data`: the query does not
/// parse) comes back with the server's own message.
fn parse(base: &str, status: u16, body: &[u8]) -> Result<Vec<Series>, QueryError> {
    let unreadable = |message: String| QueryError::Unreadable {
        url: base.to_owned(),
        message,
    };
    let answer: Answer = match serde_json::from_slice(body) {
        Ok(answer) => answer,
        Err(e) if (200..300).contains(&status) => return Err(unreadable(e.to_string())),
        Err(_) => {
            return Err(QueryError::Refused {
                url: base.to_owned(),
                status,
                message: String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
            });
        }
    };
    if answer.status != "success" {
        return Err(QueryError::Refused {
            url: base.to_owned(),
            status,
            message: format!(
                "{}: {}",
                answer.error_type.unwrap_or_default(),
                answer.error.unwrap_or_default()
            ),
        });
    }
    let data = answer
        .data
        .ok_or_else(|| unreadable("no `data` in a successful answer".into()))?;
    if data.result_type != "matrix" {
        return Err(unreadable(format!(
            "a range query gave a `{}`, not a matrix",
            data.result_type
        )));
    }
    Ok(data
        .result
        .into_iter()
        .map(|m| Series {
            labels: m.metric,
            points: m
                .values
                .into_iter()
                .filter_map(|(t, v)| Some((t, v.parse::<f64>().ok().filter(|v| v.is_finite())?)))
                .collect(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_reads_with_its_labels_and_without_nan() {
        let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"step":"llm"},"values":[[1700000000,"0.25"],[1700000010,"NaN"],[1700000020,"+Inf"],[1700000030,"0.5"]]}]}}"#;
        let series = parse("http://p", 200, body).unwrap();
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].group(), r#"{step="llm"}"#);
        assert_eq!(series[0].points, [(1.7e9, 0.25), (1_700_000_030.0, 0.5)]);
    }

    #[test]
    fn the_servers_error_is_passed_on() {
        let body = br#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected <by>"}"#;
        let e = parse("http://p", 400, body).unwrap_err().to_string();
        assert_eq!(
            e,
            "http://p answered 400: bad_data: 1:5: parse error: unexpected <by>"
        );
        let e = parse("http://p", 502, b"<html>bad gateway</html>").unwrap_err();
        assert!(matches!(e, QueryError::Refused { status: 502, .. }), "{e}");
        let e = parse(
            "http://p",
            200,
            br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
        );
        assert!(e.unwrap_err().to_string().contains("not a matrix"));
    }
}
