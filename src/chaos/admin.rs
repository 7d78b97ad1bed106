//! The live admin API, shaped after toxiproxy's: list, add, replace and remove rules,
//! read and reset counters, while traffic flows.
//!
//! - `GET /rules` — the rules with their counters
//! - `POST /rules` — add one (400 with every problem if invalid, 409 if the name is taken)
//! - `PUT /rules/{name}` (or `POST`) — replace one (404 if there is none)
//! - `DELETE /rules/{name}` — remove one
//! - `GET /stats` — the proxy's counters and each rule's
//! - `POST /reset` — zero every counter and budget

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde::Serialize;
use serde_json::json;

use super::proxy::Chaos;
use super::rules::Rule;
use crate::spec::Problem;
use crate::spec::faults::FaultRuleSpec;

/// One rule as the API lists it.
#[derive(Debug, Serialize)]
pub struct RuleStats {
    pub name: String,
    pub fault: &'static str,
    pub matched: u64,
    pub injected: u64,
    pub rule: FaultRuleSpec,
}

/// The proxy's counters.
#[derive(Debug, Serialize)]
pub struct ProxyStats {
    pub connections: u64,
    pub requests: u64,
    pub upstream_errors: u64,
    pub header_faults: u64,
    pub rules: Vec<RuleStats>,
}

impl Chaos {
    pub fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        ProxyStats {
            connections: c.connections.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            upstream_errors: c.upstream_errors.load(Ordering::Relaxed),
            header_faults: c.header_faults.load(Ordering::Relaxed),
            rules: self.rules().iter().map(|r| rule_stats(r)).collect(),
        }
    }

    fn swap(&self, change: impl FnOnce(&mut Vec<Arc<Rule>>)) {
        let mut rules = self
            .rules
            .write()
            .expect("rules are swapped whole; a panic cannot leave them half-written");
        let mut next = rules.as_ref().clone();
        change(&mut next);
        *rules = Arc::new(next);
    }
}

fn rule_stats(rule: &Rule) -> RuleStats {
    RuleStats {
        name: rule.name().to_owned(),
        fault: rule.def.fault.kind(),
        matched: rule.matched.load(Ordering::Relaxed),
        injected: rule.injected.load(Ordering::Relaxed),
        rule: rule.def.spec.clone(),
    }
}

pub fn app(chaos: Arc<Chaos>) -> Router {
    Router::new()
        .route("/rules", get(list).post(add))
        .route(
            "/rules/{name}",
            get(one).put(replace).post(replace).delete(remove),
        )
        .route("/stats", get(stats))
        .route("/reset", post(reset))
        .with_state(chaos)
}

async fn list(State(chaos): State<Arc<Chaos>>) -> Json<Vec<RuleStats>> {
    Json(chaos.rules().iter().map(|r| rule_stats(r)).collect())
}

async fn stats(State(chaos): State<Arc<Chaos>>) -> Json<ProxyStats> {
    Json(chaos.stats())
}

async fn one(State(chaos): State<Arc<Chaos>>, Path(name): Path<String>) -> Response {
    match chaos.rules().iter().find(|r| r.name() == name) {
        Some(rule) => Json(rule_stats(rule)).into_response(),
        None => not_found(&name),
    }
}

async fn add(State(chaos): State<Arc<Chaos>>, body: Bytes) -> Response {
    let rule = match parse(&body, None) {
        Ok(rule) => rule,
        Err(rejection) => return rejection.into_response(),
    };
    if chaos.rules().iter().any(|r| r.name() == rule.name()) {
        let message = format!(
            "a rule named `{}` exists; PUT /rules/{0} replaces it",
            rule.name()
        );
        return error(StatusCode::CONFLICT, &message, &[]);
    }
    let listed = rule_stats(&rule);
    chaos.swap(|rules| rules.push(Arc::new(rule)));
    (StatusCode::CREATED, Json(listed)).into_response()
}

async fn replace(
    State(chaos): State<Arc<Chaos>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let rule = match parse(&body, Some(&name)) {
        Ok(rule) => rule,
        Err(rejection) => return rejection.into_response(),
    };
    let Some(at) = chaos.rules().iter().position(|r| r.name() == name) else {
        return not_found(&name);
    };
    let listed = rule_stats(&rule);
    chaos.swap(|rules| {
        if at < rules.len() {
            rules[at] = Arc::new(rule);
        }
    });
    Json(listed).into_response()
}

async fn remove(State(chaos): State<Arc<Chaos>>, Path(name): Path<String>) -> Response {
    if !chaos.rules().iter().any(|r| r.name() == name) {
        return not_found(&name);
    }
    chaos.swap(|rules| rules.retain(|r| r.name() != name));
    StatusCode::NO_CONTENT.into_response()
}

async fn reset(State(chaos): State<Arc<Chaos>>) -> StatusCode {
    let c = &chaos.counters;
    for counter in [
        &c.requests,
        &c.upstream_errors,
        &c.header_faults,
        &c.connections,
    ] {
        counter.store(0, Ordering::Relaxed);
    }
    for rule in chaos.rules().iter() {
        rule.matched.store(0, Ordering::Relaxed);
        rule.injected.store(0, Ordering::Relaxed);
    }
    StatusCode::NO_CONTENT
}

/// Why a rule in a request body was refused: 400, the reason and every problem.
struct Rejection {
    message: String,
    problems: Vec<Problem>,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        error(StatusCode::BAD_REQUEST, &self.message, &self.problems)
    }
}

fn reject(message: String) -> Rejection {
    Rejection {
        message,
        problems: Vec::new(),
    }
}

/// A rule from a JSON body, validated; the name in the path wins when the body has none.
fn parse(body: &[u8], name: Option<&str>) -> Result<Rule, Rejection> {
    let mut spec: FaultRuleSpec =
        serde_json::from_slice(body).map_err(|e| reject(format!("the body is not a rule: {e}")))?;
    if let Some(name) = name {
        if spec.name.is_empty() {
            spec.name = name.to_owned();
        } else if spec.name != name {
            return Err(reject(format!(
                "the body names `{}` but the path `{name}`",
                spec.name
            )));
        }
    }
    if spec.service.is_some() {
        return Err(reject(
            "`service` belongs to a spec's `faults:`; this proxy serves one upstream".into(),
        ));
    }
    Rule::validate(&spec, "rule").map_err(|problems| Rejection {
        message: format!(
            "the rule is invalid: {}",
            problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        problems: problems.into_vec(),
    })
}

fn not_found(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &format!("no rule named `{name}`"),
        &[],
    )
}

fn error(status: StatusCode, message: &str, problems: &[Problem]) -> Response {
    let problems: Vec<_> = problems
        .iter()
        .map(|p| json!({"path": p.path, "message": p.message, "fix": p.fix}))
        .collect();
    (
        status,
        Json(json!({"error": message, "problems": problems})),
    )
        .into_response()
}
