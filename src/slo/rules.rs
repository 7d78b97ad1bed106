//! A spec's SLOs as Prometheus rules (`redline slo rules`): recording rules for each
//! SLO's error ratio over 5m…3d, and the multi-window, multi-burn-rate page and ticket
//! alerts of Google's SRE workbook (as Sloth and Pyrra generate them): page at 14.4×
//! the budget over 5m and 1h or 6× over 30m and 6h; ticket at 3× over 2h and 1d or 1×
//! over 6h and 3d. Over redline's own live metrics (`--metrics-addr`) or vLLM's.
//!
//! A latency SLO (`ttft: { p99: "<= 350ms" }`) becomes a ratio: requests slower than
//! the threshold over all, against a budget of 1 − 0.99; its threshold must be a bucket
//! boundary of the histogram, so the rule uses the largest bucket at or below it (and
//! says so). A share SLO (`pass_rate: ">= 99.995%"`) is failed requests over all.

use serde::Serialize;

use super::{Kind, Metric, Slo, SloSet};

/// The windows every SLO's ratio is recorded over.
const WINDOWS: [&str; 7] = ["5m", "30m", "1h", "2h", "6h", "1d", "3d"];

/// (severity, burn rate, short window, long window) of each alert condition.
const BURNS: [(&str, f64, &str, &str); 4] = [
    ("page", 14.4, "5m", "1h"),
    ("page", 6.0, "30m", "6h"),
    ("ticket", 3.0, "2h", "1d"),
    ("ticket", 1.0, "6h", "3d"),
];

/// Whose metric names the rules query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricNames {
    /// redline's own, served by `redline run --metrics-addr`.
    Redline,
    /// vLLM's `/metrics` (latency SLOs only: vLLM counts no failed requests).
    Vllm,
}

/// The buckets (seconds) of redline's latency histograms.
pub const REDLINE_BUCKETS: &[f64] = crate::prometheus::live::LATENCY_BUCKETS;

/// The ratio of bad events to all, as PromQL over a window `[W]`.
struct Sli {
    bad: String,
    total: String,
    /// What a reader must know about how the SLO was mapped.
    note: String,
}

fn sli_of(slo: &Slo, names: MetricNames) -> Result<Sli, String> {
    let name = &slo.name;
    match (slo.metric.kind(), names) {
        (Kind::Latency, _) => {
            let histogram = match (slo.metric, names) {
                (Metric::Ttft, MetricNames::Redline) => "redline_time_to_first_token_seconds",
                (Metric::E2e, MetricNames::Redline) => "redline_request_duration_seconds",
                (Metric::Itl, MetricNames::Redline) => "redline_inter_token_latency_seconds",
                (Metric::TimeToFirstAnswer, MetricNames::Redline) => {
                    "redline_time_to_first_answer_seconds"
                }
                (Metric::TimeToFirstReasoning, MetricNames::Redline) => {
                    "redline_time_to_first_reasoning_seconds"
                }
                (Metric::ReasoningTime, MetricNames::Redline) => "redline_reasoning_seconds",
                (Metric::Ttft, MetricNames::Vllm) => "vllm:time_to_first_token_seconds",
                (Metric::E2e, MetricNames::Vllm) => "vllm:e2e_request_latency_seconds",
                (Metric::Itl, MetricNames::Vllm) => "vllm:inter_token_latency_seconds",
                _ => return Err(format!("{name}: no histogram of this metric is exported")),
            };
            let threshold_s = slo.threshold / 1e3;
            let (le, note) = match names {
                MetricNames::Redline => {
                    let le = REDLINE_BUCKETS
                        .iter()
                        .copied()
                        .filter(|b| *b <= threshold_s * (1.0 + 1e-9))
                        .fold(f64::NAN, f64::max);
                    if le.is_nan() {
                        return Err(format!(
                            "{name}: {threshold_s}s is below the smallest bucket"
                        ));
                    }
                    let note = if (le - threshold_s).abs() > 1e-9 {
                        format!(
                            " The histogram has no bucket at {threshold_s}s: the rule counts requests over {le}s, the bucket below, so it is stricter."
                        )
                    } else {
                        String::new()
                    };
                    (le, note)
                }
                MetricNames::Vllm => (
                    threshold_s,
                    format!(" {threshold_s}s must be a bucket boundary of the server's histogram."),
                ),
            };
            let selector = match names {
                MetricNames::Redline => r#"{step="request"}"#,
                MetricNames::Vllm => "",
            };
            let le_label = match names {
                MetricNames::Redline => format!(r#"{{step="request",le="{le}"}}"#),
                MetricNames::Vllm => format!(r#"{{le="{le}"}}"#),
            };
            Ok(Sli {
                bad: format!(
                    "sum(rate({histogram}_count{selector}[W])) - sum(rate({histogram}_bucket{le_label}[W]))"
                ),
                total: format!("sum(rate({histogram}_count{selector}[W]))"),
                note: format!(
                    "{name} {}: requests over {le}s against a budget of {:.4}%.{note}",
                    slo.expression,
                    budget(slo) * 100.0
                ),
            })
        }
        (Kind::GoodShare | Kind::BadShare, MetricNames::Redline) => {
            let bad = match (slo.metric, &slo.error_kind) {
                (Metric::PassRate, _) | (Metric::ErrorRate, None) => {
                    r#"outcome=~"error|timeout""#.to_owned()
                }
                (Metric::ErrorRate, Some(kind)) => format!(r#"kind="{kind}""#),
                (Metric::Availability, _) => {
                    r#"outcome=~"error|timeout",kind=~"timeout|http_5xx|connect_refused|connect_error|reset""#
                        .to_owned()
                }
                _ => return Err(format!("{name}: not counted in the live metrics")),
            };
            let total = r#"phase="measure",outcome!~"cancelled|dropped""#;
            Ok(Sli {
                bad: format!("sum(rate(redline_requests_total{{phase=\"measure\",{bad}}}[W]))"),
                total: format!("sum(rate(redline_requests_total{{{total}}}[W]))"),
                note: format!(
                    "{name} {}: failed requests against a budget of {:.4}%.",
                    slo.expression,
                    budget(slo) * 100.0
                ),
            })
        }
        _ => Err(format!("{name}: not expressible over these metrics")),
    }
}

/// The share of events an SLO lets be bad.
fn budget(slo: &Slo) -> f64 {
    match slo.metric.kind() {
        Kind::Latency | Kind::Tokens | Kind::RequestShare => 1.0 - slo.quantile.unwrap_or(0.99),
        Kind::GoodShare => 1.0 - slo.threshold,
        Kind::BadShare | Kind::Throughput => slo.threshold,
    }
}

#[derive(Serialize)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(Serialize)]
struct Group {
    name: String,
    rules: Vec<Rule>,
}

#[derive(Serialize)]
struct Rule {
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alert: Option<String>,
    expr: String,
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    for_: Option<String>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    annotations: std::collections::BTreeMap<String, String>,
}

/// `ttft.p99` → `ttft_p99`, a name Prometheus accepts.
fn slug(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect::<String>()
        .trim_matches('_')
        .to_owned()
}

/// The rule groups of a spec's SLOs, and the SLOs left out with why.
fn groups(set: &SloSet, scenario: &str, names: MetricNames) -> (Vec<Group>, Vec<String>) {
    let mut groups = Vec::new();
    let mut skipped = Vec::new();
    for slo in &set.slos {
        let sli = match sli_of(slo, names) {
            Ok(sli) => sli,
            Err(why) => {
                skipped.push(why);
                continue;
            }
        };
        let id = slug(&slo.name);
        let labels = |severity: Option<&str>| {
            let mut l = std::collections::BTreeMap::from([
                ("slo".to_owned(), slo.name.clone()),
                ("scenario".to_owned(), scenario.to_owned()),
            ]);
            if let Some(s) = severity {
                l.insert("severity".into(), s.into());
            }
            l
        };
        let record = |w: &str| format!("redline_slo:{id}:error_ratio_rate{w}");
        let mut rules: Vec<Rule> = WINDOWS
            .iter()
            .map(|w| Rule {
                record: Some(record(w)),
                alert: None,
                expr: format!(
                    "({}) / ({})",
                    sli.bad.replace("[W]", &format!("[{w}]")),
                    sli.total.replace("[W]", &format!("[{w}]"))
                ),
                for_: None,
                labels: labels(None),
                annotations: Default::default(),
            })
            .collect();
        let budget = budget(slo);
        for severity in ["page", "ticket"] {
            let conditions: Vec<String> = BURNS
                .iter()
                .filter(|(s, ..)| *s == severity)
                .map(|(_, burn, short, long)| {
                    // 1 − 0.999 is 0.0010000000000000009: rounded to 12 decimals.
                    let bound = (burn * budget * 1e12).round() / 1e12;
                    format!(
                        "({} > {bound} and {} > {bound})",
                        record(short),
                        record(long)
                    )
                })
                .collect();
            rules.push(Rule {
                record: None,
                alert: Some(format!("RedlineSlo_{id}_{severity}")),
                expr: conditions.join(" or "),
                for_: Some(if severity == "page" { "2m" } else { "15m" }.into()),
                labels: labels(Some(severity)),
                annotations: std::collections::BTreeMap::from([
                    (
                        "summary".to_owned(),
                        format!("{} is burning its error budget ({severity})", slo.name),
                    ),
                    ("description".to_owned(), sli.note.clone()),
                ]),
            });
        }
        groups.push(Group {
            name: format!("redline-slo-{}-{id}", slug(scenario)),
            rules,
        });
    }
    (groups, skipped)
}

/// How the rules are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RulesFormat {
    /// A Prometheus Operator `PrometheusRule` resource.
    PrometheusRule,
    /// A plain Prometheus rule file (`promtool check rules` reads it).
    Prometheus,
}

/// The rules as YAML, and the SLOs that could not be expressed (with why).
pub fn render(
    set: &SloSet,
    scenario: &str,
    names: MetricNames,
    format: RulesFormat,
) -> (String, Vec<String>) {
    let (groups, skipped) = groups(set, scenario, names);
    let file = RuleFile { groups };
    let yaml = match format {
        RulesFormat::Prometheus => yaml_serde::to_string(&file),
        RulesFormat::PrometheusRule => yaml_serde::to_string(&serde_json::json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": { "name": format!("redline-slo-{}", slug(scenario).replace('_', "-")) },
            "spec": file,
        })),
    }
    .expect("rules are plain strings and maps");
    (yaml, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Problems;

    fn set(yaml: &str) -> SloSet {
        let thresholds = yaml_serde::from_str(yaml).unwrap();
        SloSet::from_spec(&thresholds, &mut Problems::new()).unwrap()
    }

    #[test]
    fn a_latency_and_a_share_slo_become_ratios_and_burn_rate_alerts() {
        let s = set(
            "ttft: { p99: \"<= 350ms\" }\npass_rate: \">= 99.9%\"\ntpot: { p95: \"< 50ms\" }\n",
        );
        let (yaml, skipped) = render(&s, "chat", MetricNames::Redline, RulesFormat::Prometheus);
        assert_eq!(
            skipped,
            ["tpot.p95: no histogram of this metric is exported"]
        );
        let file: serde_json::Value = yaml_serde::from_str(&yaml).unwrap();
        let groups = file["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 2);
        let ttft = groups[0]["rules"].as_array().unwrap();
        // Seven recording rules and two alerts.
        assert_eq!(ttft.len(), 9);
        assert_eq!(ttft[0]["record"], "redline_slo:ttft_p99:error_ratio_rate5m");
        assert_eq!(
            ttft[0]["expr"],
            r#"(sum(rate(redline_time_to_first_token_seconds_count{step="request"}[5m])) - sum(rate(redline_time_to_first_token_seconds_bucket{step="request",le="0.35"}[5m]))) / (sum(rate(redline_time_to_first_token_seconds_count{step="request"}[5m])))"#
        );
        let page = &ttft[7];
        assert_eq!(page["alert"], "RedlineSlo_ttft_p99_page");
        // 14.4 × 1 % and 6 × 1 %.
        let expr = page["expr"].as_str().unwrap();
        assert!(
            expr.contains("redline_slo:ttft_p99:error_ratio_rate5m > 0.144"),
            "{expr}"
        );
        assert!(
            expr.contains("redline_slo:ttft_p99:error_ratio_rate6h > 0.06"),
            "{expr}"
        );
        assert_eq!(ttft[8]["labels"]["severity"], "ticket");
        let pass = groups[1]["rules"].as_array().unwrap();
        assert!(
            pass[2]["expr"]
                .as_str()
                .unwrap()
                .contains(r#"outcome=~"error|timeout""#)
        );
        // 1 × 0.1 % over 6h and 3d.
        let ticket = pass[8]["expr"].as_str().unwrap();
        assert!(ticket.contains("rate3d > 0.001"), "{ticket}");
    }

    #[test]
    fn a_threshold_between_buckets_uses_the_one_below_and_says_so() {
        let s = set("e2e: { p95: \"<= 3s\" }\n");
        let (yaml, _) = render(&s, "x", MetricNames::Redline, RulesFormat::PrometheusRule);
        let file: serde_json::Value = yaml_serde::from_str(&yaml).unwrap();
        assert_eq!(file["kind"], "PrometheusRule");
        let rules = &file["spec"]["groups"][0]["rules"];
        assert!(rules[0]["expr"].as_str().unwrap().contains(r#"le="2.5""#));
        let description = rules[7]["annotations"]["description"].as_str().unwrap();
        assert!(description.contains("no bucket at 3s"), "{description}");
    }

    #[test]
    fn vllm_names_and_no_error_slos() {
        let s = set("ttft: { p99: \"<= 250ms\" }\navailability: \">= 99.9%\"\n");
        let (yaml, skipped) = render(&s, "x", MetricNames::Vllm, RulesFormat::Prometheus);
        assert!(
            yaml.contains(r#"vllm:time_to_first_token_seconds_bucket{le=\"0.25\"}"#)
                || yaml.contains(r#"vllm:time_to_first_token_seconds_bucket{le="0.25"}"#),
            "{yaml}"
        );
        assert_eq!(
            skipped,
            ["availability: not expressible over these metrics"]
        );
    }
}
